//! The receiving half of the protocol and the requests: what the handler
//! of the point-to-point tag does with each message while the module that
//! delivered it is on the stack, and what it leaves for the endpoint to do
//! afterwards ([`Action`]), since a handler cannot call the messenger.

#![allow(unsafe_code)]

use std::any::Any;
use std::collections::VecDeque;

use fireopal_abi::btl::Rank;
use fireopal_core::group::Group;
use fireopal_core::p2p::{ContextId, Envelope, Event, MatchEngine, Message as Matched, PostId};
use fireopal_core::wire::p2p::{self as wire, Credit, Fin, FinStatus, Message, RndvProtocol};

use super::table::{ReqTable, PARKED};
use super::{P2pError, Status, Violation};
use crate::btl::{Incoming, MemoryHandle};

/// Identifies a request of this process (also on the wire, as the
/// sender's or receiver's request of a rendezvous).
pub(crate) type ReqId = u64;

/// A message as the matching engine keeps it until a receive takes it.
#[derive(Debug)]
pub(crate) enum Arrived {
    /// The whole message.
    Eager { peer: Rank, data: Vec<u8> },
    /// The whole message, still in the transport's receive buffer: only
    /// while the handler that got it runs (the engine copies it into
    /// [`Arrived::Eager`] before keeping it).
    Inline {
        peer: Rank,
        ptr: *const u8,
        len: usize,
    },
    /// A rendezvous request: the data waits at the sender. Boxed, so
    /// that the handle the engine moves about stays small.
    Rts(Box<Announced>),
}

/// A rendezvous request as it arrived.
#[derive(Debug)]
pub(crate) struct Announced {
    pub(crate) peer: Rank,
    pub(crate) protocol: RndvProtocol,
    pub(crate) length: u64,
    pub(crate) sender_request: u64,
    pub(crate) address: u64,
    pub(crate) key: Vec<u8>,
}

/// Where a receive's bytes go.
pub(crate) struct RecvTarget {
    pub(crate) ptr: *mut u8,
    pub(crate) cap: usize,
    /// The caller's buffer when it handed it over (`irecv`); `None` for a
    /// blocking receive, whose caller keeps the borrow until it returns.
    pub(crate) owned: Option<Box<dyn Any>>,
}

/// A rendezvous being received.
pub(crate) struct Rendezvous {
    pub(crate) peer: Rank,
    pub(crate) sender_request: u64,
    /// The message's length at the sender.
    pub(crate) length: u64,
    /// The receive's status: the envelope, and `take` as its count.
    pub(crate) status: Status,
    /// Bytes of the message that land in the buffer.
    pub(crate) take: usize,
    /// Pipelined bytes received so far (counting what did not fit).
    pub(crate) received: u64,
    /// A `get` into the buffer is in flight: the buffer must stay.
    pub(crate) reading: bool,
    pub(crate) registration: Option<MemoryHandle>,
    /// The message is split: the sender writes its tail into the buffer.
    pub(crate) split: Option<Box<Split>>,
    /// Where the data is at the sender, and the key to read it.
    pub(crate) address: u64,
    pub(crate) key: Vec<u8>,
}

impl Rendezvous {
    /// The receive's result once the data has moved: truncated when the
    /// sender sent more than the buffer took.
    pub(crate) fn result(&self) -> Result<Status, P2pError> {
        if (self.status.count as u64) < self.length {
            Err(P2pError::Truncated {
                status: self.status,
                sent: self.length,
            })
        } else {
            Ok(self.status)
        }
    }
}

/// A split rendezvous at the receiver: the sender writes the tail while
/// the receiver reads the head (see the `split` module).
pub(crate) struct Split {
    /// The sender may still be writing: the buffer must stay.
    pub(crate) writing: bool,
    /// How the sender's write ended, once it said.
    pub(crate) written: Option<FinStatus>,
    /// How the receiver's own read ended, once it did.
    pub(crate) read: Option<Result<(), P2pError>>,
    /// The registration of the tail the sender writes.
    pub(crate) registration: Option<MemoryHandle>,
}

/// A send waiting for its receiver.
pub(crate) struct Outgoing {
    pub(crate) peer: Rank,
    pub(crate) registration: Option<MemoryHandle>,
    /// The data of a pipelined send, sent once the receiver's CTS comes.
    pub(crate) ptr: *const u8,
    pub(crate) len: usize,
    pub(crate) owned: Option<Box<dyn Any>>,
    /// A write of the tail into the receiver's buffer is in flight: the
    /// bytes must stay.
    pub(crate) putting: bool,
    /// Fragments of a pipelined send the transport still reads where they
    /// are: the bytes must stay until the last one completes.
    pub(crate) sending: u32,
    /// The first failure of those fragments, reported once all are over.
    pub(crate) send_failure: Option<Box<P2pError>>,
}

impl Outgoing {
    /// Whether a transport still reads or writes from the send's bytes.
    pub(crate) fn in_flight(&self) -> bool {
        self.putting || self.sending > 0
    }
}

// Small enough that a request moves without a call to `memcpy`: the
// rendezvous and the waiting send are boxed.
pub(crate) enum ReqState {
    Recv {
        target: RecvTarget,
        post: Option<PostId>,
        rndv: Option<Box<Rendezvous>>,
    },
    Send(Box<Outgoing>),
}

pub(crate) struct Req {
    pub(crate) state: ReqState,
    /// The result once complete; the error boxed, keeping requests small
    /// (they are moved in and out of the table on every message).
    pub(crate) done: Option<Result<Status, Box<P2pError>>>,
    /// The caller let go of the handle: forget the request once done.
    pub(crate) detached: bool,
}

/// Work the handler leaves for the endpoint.
#[derive(Debug)]
pub(crate) enum Action {
    /// Read a matched rendezvous into the receive buffer.
    Get(ReqId),
    /// Ask the sender of a pipelined rendezvous for its data.
    Cts {
        peer: Rank,
        sender_request: u64,
        receiver_request: ReqId,
    },
    /// Tell a sender its rendezvous is over.
    Fin {
        peer: Rank,
        sender_request: u64,
        status: FinStatus,
    },
    /// Send a pipelined message's data: the receiver is ready.
    Pipeline {
        peer: Rank,
        sender_request: ReqId,
        receiver_request: u64,
    },
    /// Release a send's registration and complete it.
    FinishSend {
        peer: Rank,
        req: ReqId,
        status: FinStatus,
    },
    /// Give eager credits back to a sender.
    Credit { peer: Rank, credits: u32 },
    /// Write the tail of a send into its receiver's buffer.
    PutTail {
        peer: Rank,
        sender_request: ReqId,
        receiver_request: u64,
        offset: u64,
        address: u64,
        key: Vec<u8>,
    },
    /// The sender of a split message wrote its tail.
    TailWritten {
        peer: Rank,
        receiver_request: ReqId,
        status: FinStatus,
    },
}

/// The groups of the communicators, indexed by context id: ids are small
/// and reused (at most `MAX_CONTEXT_IDS`), so every message finds its
/// communicator's group without hashing.
#[derive(Default)]
pub(crate) struct Groups(Vec<Option<Group>>);

impl Groups {
    pub(crate) fn insert(&mut self, id: u32, group: Group) {
        let i = id as usize;
        if self.0.len() <= i {
            self.0.resize_with(i + 1, || None);
        }
        self.0[i] = Some(group);
    }

    pub(crate) fn remove(&mut self, id: u32) {
        if let Some(slot) = self.0.get_mut(id as usize) {
            *slot = None;
        }
    }

    /// The group of communicator `id`, if this process has it (`id` may
    /// come from a peer: any value is looked up safely).
    #[inline]
    pub(crate) fn get(&self, id: u32) -> Option<&Group> {
        self.0.get(id as usize)?.as_ref()
    }

    /// Every communicator's id and group.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &Group)> {
        self.0
            .iter()
            .enumerate()
            .filter_map(|(i, g)| Some((i as u32, g.as_ref()?)))
    }
}

/// The state the handler and the endpoint share.
pub(crate) struct Protocol {
    pub(crate) engine: MatchEngine<ReqId, Arrived>,
    pub(crate) reqs: ReqTable,
    pub(crate) actions: VecDeque<Action>,
    /// Eager messages each peer may still send this process before
    /// credits come back.
    pub(crate) send_credits: Vec<u32>,
    /// Eager messages of each peer consumed and not yet credited back.
    owed: Vec<u32>,
    pub(crate) credit_batch: u32,
    /// Groups of the communicators this process has, by context id, to
    /// check a message's source against the process it came from.
    pub(crate) groups: Groups,
    /// Peers that broke the protocol, for the endpoint to fail.
    pub(crate) violations: Vec<(Rank, Violation)>,
}

impl Protocol {
    pub(crate) fn new(size: u32, credits: u32) -> Self {
        Protocol {
            engine: MatchEngine::new(),
            reqs: ReqTable::default(),
            actions: VecDeque::new(),
            send_credits: vec![credits; size as usize],
            owed: vec![0; size as usize],
            credit_batch: (credits / 2).max(1),
            groups: Groups::default(),
            violations: Vec::new(),
        }
    }

    pub(crate) fn new_req(&mut self, state: ReqState) -> ReqId {
        self.reqs.insert(Req {
            state,
            done: None,
            detached: false,
        })
    }

    /// Completes `id` with `result`; a detached request is forgotten.
    pub(crate) fn complete(&mut self, id: ReqId, result: Result<Status, P2pError>) {
        self.completer().complete(id, result);
    }

    /// The requests' side of the protocol.
    fn completer(&mut self) -> Completer<'_> {
        self.split().1
    }

    /// The engine and the requests' side, borrowed apart, so that the
    /// engine hands its matches straight to the requests.
    fn split(&mut self) -> (&mut MatchEngine<ReqId, Arrived>, Completer<'_>) {
        let completer = Completer {
            reqs: &mut self.reqs,
            actions: &mut self.actions,
            owed: &mut self.owed,
            credit_batch: self.credit_batch,
        };
        (&mut self.engine, completer)
    }

    /// Eager credits `peer` gave back.
    fn grant(&mut self, peer: Rank, credits: u32) {
        if let Some(n) = self.send_credits.get_mut(peer as usize) {
            *n = n.saturating_add(credits);
        }
    }

    /// Takes the credits owed to `peer`, for an eager message to it to
    /// carry back.
    pub(crate) fn take_owed(&mut self, peer: Rank) -> u32 {
        self.owed.get_mut(peer as usize).map_or(0, std::mem::take)
    }

    /// Owes `credits` to `peer` again: the message that was to carry them
    /// was not sent.
    pub(crate) fn owe_again(&mut self, peer: Rank, credits: u32) {
        if let Some(owed) = self.owed.get_mut(peer as usize) {
            *owed += credits;
        }
    }

    /// One message of the point-to-point tag, from `msg.peer`.
    #[inline]
    pub(crate) fn on_message(&mut self, msg: &Incoming<'_>) {
        // Eager messages are most messages: parsed and matched here, the
        // other kinds out of line.
        let Some(e) = wire::Eager::decode(msg.header) else {
            return self.on_control(msg);
        };
        let (peer, env) = (msg.peer, e.envelope);
        if e.credits != 0 {
            self.grant(peer, e.credits);
        }
        if !self.source_is_sender(peer, &env) {
            return;
        }
        // The commonest cases first: the one receive waiting takes it, or
        // one of several posted.
        let envelope = envelope_of(&env);
        let posted = self
            .engine
            .arrive_lone(envelope, env.seq)
            .or_else(|| self.engine.arrive_posted(envelope, env.seq));
        if let Some((_, id)) = posted {
            return self
                .completer()
                .deliver_eager(id, envelope, peer, msg.payload);
        }
        let arrived = Arrived::Inline {
            peer,
            ptr: msg.payload.as_ptr(),
            len: msg.payload.len(),
        };
        self.arrive_checked(peer, env, arrived, msg.payload.len());
    }

    /// A message other than a well-formed eager one.
    #[inline(never)]
    fn on_control(&mut self, msg: &Incoming<'_>) {
        let peer = msg.peer;
        let parsed = match Message::decode(msg.header) {
            Ok(m) => m,
            Err(e) => return self.violations.push((peer, Violation::Malformed(e))),
        };
        match parsed {
            Message::Eager(e) => {
                self.grant(peer, e.credits);
                let arrived = Arrived::Inline {
                    peer,
                    ptr: msg.payload.as_ptr(),
                    len: msg.payload.len(),
                };
                self.arrive(peer, e.envelope, arrived, msg.payload.len());
            }
            Message::Rts(r) => {
                let arrived = Arrived::Rts(Box::new(Announced {
                    peer,
                    protocol: r.protocol,
                    length: r.length,
                    sender_request: r.sender_request,
                    address: r.address,
                    key: r.key.to_vec(),
                }));
                self.arrive(peer, r.envelope, arrived, 0);
            }
            Message::Cts(c) => self.actions.push_back(Action::Pipeline {
                peer,
                sender_request: c.sender_request,
                receiver_request: c.receiver_request,
            }),
            Message::Data(d) => self.on_data(peer, d.receiver_request, d.offset, msg.payload),
            Message::Fin(f) => self.actions.push_back(Action::FinishSend {
                peer,
                req: f.sender_request,
                status: f.status,
            }),
            Message::Credit(c) => self.grant(peer, c.credits),
            Message::Ack(a) => self.actions.push_back(Action::PutTail {
                peer,
                sender_request: a.sender_request,
                receiver_request: a.receiver_request,
                offset: a.offset,
                address: a.address,
                key: a.key.to_vec(),
            }),
            Message::PutDone(d) => self.actions.push_back(Action::TailWritten {
                peer,
                receiver_request: d.receiver_request,
                status: d.status,
            }),
            Message::Cancel(c) => self.on_cancel(peer, c.receiver_request),
        }
    }

    fn arrive(&mut self, peer: Rank, env: wire::Envelope, arrived: Arrived, bytes: usize) {
        if self.source_is_sender(peer, &env) {
            self.arrive_checked(peer, env, arrived, bytes);
        }
    }

    /// Whether the source `env` names is the process `peer` it came from,
    /// where this process knows the communicator; if not, `peer` broke
    /// the protocol.
    #[inline]
    fn source_is_sender(&mut self, peer: Rank, env: &wire::Envelope) -> bool {
        // On the world's contexts (0 and 1) a rank is its world rank, and
        // `peer` is one: a source equal to it is right without a lookup.
        if env.context < 2 && env.source == peer {
            return true;
        }
        if let Some(group) = self.groups.get(env.context / 2) {
            if group.lookup(env.source) != Some(peer) {
                self.violations
                    .push((peer, Violation::WrongSource(env.source)));
                return false;
            }
        }
        true
    }

    /// A message from its source goes to matching.
    fn arrive_checked(&mut self, peer: Rank, env: wire::Envelope, arrived: Arrived, bytes: usize) {
        let envelope = envelope_of(&env);
        let (engine, mut completer) = self.split();
        let result =
            engine.arrive_with(
                envelope,
                env.seq,
                arrived,
                bytes,
                &mut completer,
                |m| match m {
                    Arrived::Inline { peer, ptr, len } => {
                        // SAFETY: `keep` runs inside this call, while the
                        // transport's bytes behind an inline message are
                        // valid.
                        let data = unsafe { bytes_at(ptr, len) }.to_vec();
                        Arrived::Eager { peer, data }
                    }
                    kept => kept,
                },
            );
        if let Err(rejected) = result {
            self.violations
                .push((peer, Violation::Sequence(rejected.error)));
        }
    }

    /// A receive met its message: copy it, or start the rendezvous.
    pub(crate) fn matched(&mut self, id: ReqId, message: Matched<Arrived>) {
        self.completer().matched(id, message);
    }

    /// The sender of the rendezvous receive `id` asked for gave it up: no
    /// data comes, and the receive fails.
    fn on_cancel(&mut self, peer: Rank, id: ReqId) {
        let waiting = match self.reqs.get(&id).map(|q| &q.state) {
            Some(ReqState::Recv { rndv: Some(r), .. }) => {
                r.peer == peer && !r.reading && r.split.is_none() && r.received == 0
            }
            _ => false,
        };
        if !waiting {
            return self.violations.push((peer, Violation::UnknownRequest(id)));
        }
        self.complete(id, Err(P2pError::SendGivenUp { peer }));
    }

    /// A fragment of a pipelined message: copy what fits, complete the
    /// receive with the last byte.
    fn on_data(&mut self, peer: Rank, id: ReqId, offset: u64, payload: &[u8]) {
        let Some(req) = self.reqs.get_mut(&id) else {
            return self.violations.push((peer, Violation::UnknownRequest(id)));
        };
        let ReqState::Recv {
            target,
            rndv: Some(r),
            ..
        } = &mut req.state
        else {
            return self.violations.push((peer, Violation::UnknownRequest(id)));
        };
        let end = offset.checked_add(payload.len() as u64);
        if r.peer != peer {
            return self.violations.push((peer, Violation::UnknownRequest(id)));
        }
        if end.is_none_or(|e| e > r.length) {
            return self.violations.push((peer, Violation::DataOutOfRange(id)));
        }
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        if start < r.take && !target.ptr.is_null() {
            let n = payload.len().min(r.take - start);
            // SAFETY: `start + n <= take <= cap`: inside the receive
            // buffer, which stays alive until the request completes.
            unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), target.ptr.add(start), n) };
        }
        r.received += payload.len() as u64;
        if r.received == r.length {
            let result = r.result();
            self.complete(id, result);
        }
    }
}

/// The parts of [`Protocol`] that a matched receive touches: its request,
/// the actions it leaves, the credits it owes. Borrowed apart from the
/// engine, so that the engine hands its matches straight here.
struct Completer<'a> {
    reqs: &'a mut ReqTable,
    actions: &'a mut VecDeque<Action>,
    owed: &'a mut [u32],
    credit_batch: u32,
}

impl Extend<Event<ReqId, Arrived>> for Completer<'_> {
    fn extend<I: IntoIterator<Item = Event<ReqId, Arrived>>>(&mut self, events: I) {
        for event in events {
            if let Event::Matched { req, message, .. } = event {
                self.matched(req, message);
            }
        }
    }
}

impl Completer<'_> {
    /// Completes `id` with `result`; a detached request is forgotten.
    fn complete(&mut self, id: ReqId, result: Result<Status, P2pError>) {
        let Some(req) = self.reqs.get_mut(&id) else {
            return;
        };
        if settle(req, result.map_err(Box::new)) {
            self.reqs.remove(&id);
        }
    }

    /// A receive met its message: copy it, or start the rendezvous.
    ///
    /// An [`Arrived::Inline`] message is only ever matched inside the
    /// handler call that received it, so its bytes are still valid here.
    #[inline]
    fn matched(&mut self, id: ReqId, message: Matched<Arrived>) {
        let env = message.envelope;
        match message.msg {
            Arrived::Eager { peer, data } => self.deliver_eager(id, env, peer, &data),
            Arrived::Inline { peer, ptr, len } => {
                // SAFETY: see above: the handler that got the bytes runs.
                let data = unsafe { bytes_at(ptr, len) };
                self.deliver_eager(id, env, peer, data);
            }
            Arrived::Rts(_) => {
                // The rendezvous names the receive on the wire: a parked
                // one takes an id of its own first.
                let id = match id {
                    PARKED => self.reqs.unpark().unwrap_or(id),
                    id => id,
                };
                self.matched_rendezvous(id, message)
            }
        }
    }

    /// A receive met a rendezvous request: start moving its data.
    #[inline(never)]
    fn matched_rendezvous(&mut self, id: ReqId, message: Matched<Arrived>) {
        let env = message.envelope;
        let Some(req) = self.reqs.get_mut(&id) else {
            return;
        };
        let ReqState::Recv { target, post, rndv } = &mut req.state else {
            return;
        };
        *post = None;
        match message.msg {
            Arrived::Eager { .. } | Arrived::Inline { .. } => {}
            Arrived::Rts(announced) => {
                let Announced {
                    peer,
                    protocol,
                    length,
                    sender_request,
                    address,
                    key,
                } = *announced;
                let take = usize::try_from(length)
                    .unwrap_or(usize::MAX)
                    .min(target.cap);
                let r = rndv.insert(Box::new(Rendezvous {
                    peer,
                    sender_request,
                    length,
                    status: Status {
                        source: env.source,
                        tag: env.tag,
                        count: take,
                    },
                    take,
                    received: 0,
                    reading: false,
                    registration: None,
                    split: None,
                    address,
                    key,
                }));
                if take == 0 || length == 0 {
                    // Nothing to move: done, and the sender may finish.
                    self.actions.push_back(Action::Fin {
                        peer,
                        sender_request,
                        status: FinStatus::Done,
                    });
                    let result = r.result();
                    self.complete(id, result);
                    return;
                }
                match protocol {
                    RndvProtocol::Get => self.actions.push_back(Action::Get(id)),
                    RndvProtocol::Pipeline => self.actions.push_back(Action::Cts {
                        peer,
                        sender_request,
                        receiver_request: id,
                    }),
                }
            }
        }
    }

    /// An eager message for receive `id`: copy what fits, complete it.
    #[inline]
    fn deliver_eager(&mut self, id: ReqId, env: Envelope, peer: Rank, data: &[u8]) {
        let Some(req) = self.reqs.get_mut(&id) else {
            return;
        };
        let ReqState::Recv { target, post, .. } = &mut req.state else {
            return;
        };
        *post = None;
        let n = data.len().min(target.cap);
        copy_into(target, &data[..n]);
        let status = Status {
            source: env.source,
            tag: env.tag,
            count: n,
        };
        let result = if n < data.len() {
            Err(truncation(status, data.len()))
        } else {
            Ok(status)
        };
        // Completed where it lies, not looked up again.
        if settle(req, result) {
            self.reqs.remove(&id);
        }
        self.owe_credit(peer);
    }

    /// Counts one consumed eager message of `peer`, crediting a batch
    /// back when it is full.
    #[inline]
    fn owe_credit(&mut self, peer: Rank) {
        let Some(owed) = self.owed.get_mut(peer as usize) else {
            return;
        };
        *owed += 1;
        if *owed >= self.credit_batch {
            let credits = std::mem::take(owed);
            self.actions.push_back(Action::Credit { peer, credits });
        }
    }
}

/// Completes `req` with `result`, unless it already completed; true when
/// the caller let go of it, and it is to be forgotten instead.
#[inline]
fn settle(req: &mut Req, result: Result<Status, Box<P2pError>>) -> bool {
    if req.detached {
        return true;
    }
    if req.done.is_none() {
        req.done = Some(result);
    }
    false
}

/// The matching envelope of a message's wire envelope.
#[inline]
fn envelope_of(env: &wire::Envelope) -> Envelope {
    Envelope {
        context: ContextId(env.context),
        source: env.source,
        tag: env.tag,
    }
}

/// The error of a receive whose buffer took `status.count` of the `sent`
/// bytes; out of line, so that a delivery that fits builds none.
#[cold]
#[inline(never)]
fn truncation(status: Status, sent: usize) -> Box<P2pError> {
    Box::new(P2pError::Truncated {
        status,
        sent: sent as u64,
    })
}

/// Copies `data`, which fits, to the start of a receive's buffer.
#[inline]
fn copy_into(target: &RecvTarget, data: &[u8]) {
    if data.is_empty() || target.ptr.is_null() || data.len() > target.cap {
        return;
    }
    // SAFETY: `target` is the receive's buffer of `cap >= data.len()`
    // bytes, kept alive and untouched by its owner until the request
    // completes (owned here, or borrowed by a blocking receive that waits
    // for it); `data` is the message's own bytes, elsewhere.
    let to = unsafe { std::slice::from_raw_parts_mut(target.ptr, data.len()) };
    fireopal_core::copy::copy_bytes(to, data);
}

/// The `len` bytes at `ptr`.
///
/// # Safety
///
/// They must be valid for reads while the slice is used.
unsafe fn bytes_at<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if len == 0 {
        &[]
    } else {
        // SAFETY: as the caller promises.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }
}

/// The credit message for `credits`.
pub(crate) fn credit_header(credits: u32) -> [u8; Credit::LEN] {
    Credit { credits }.encode()
}

/// The FIN message for a sender's request.
pub(crate) fn fin_header(sender_request: u64, status: FinStatus) -> [u8; Fin::LEN] {
    Fin {
        sender_request,
        status,
    }
    .encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owed_credits_go_back_once_on_a_message_or_in_a_batch() {
        // 4 credits a peer, given back in batches of 2.
        let mut p = Protocol::new(2, 4);
        p.completer().owe_credit(1);
        assert!(p.actions.is_empty(), "half a batch waits");
        assert_eq!(p.take_owed(1), 1, "an eager message to the peer carries it");
        assert_eq!(p.take_owed(1), 0, "and only once");
        // The message was not sent: owed again, and the next one makes a
        // batch of its own.
        p.owe_again(1, 1);
        p.completer().owe_credit(1);
        assert!(matches!(
            p.actions.pop_front(),
            Some(Action::Credit {
                peer: 1,
                credits: 2
            })
        ));
        assert_eq!(p.take_owed(1), 0);
        // What comes back, on a message or in a credit message, adds up.
        p.grant(1, 3);
        assert_eq!(p.send_credits[1], 7);
        assert_eq!(p.take_owed(9), 0, "a rank out of range owes nothing");
    }
}
