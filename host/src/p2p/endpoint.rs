//! [`P2p`]: the endpoint, its sends and receives, and the work the
//! protocol leaves for after each round of progress.

#![allow(unsafe_code)]

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;
use std::time::Duration;

use fireopal_abi::btl::{Access, MemRegion, Rank};
use fireopal_core::group::Group;
use fireopal_core::id_hash::IdHash;
use fireopal_core::p2p::{ContextId, Counts, Posted, RecvSpec, Source, Tag};
use fireopal_core::wire::p2p::{Eager, Envelope as WireEnvelope, RndvProtocol, Rts, MAX_KEY_LEN};

use super::comm::{CommInner, ContextIds};
use super::protocol::{
    credit_header, fin_header, Action, Arrived, Outgoing, Protocol, RecvTarget, Req, ReqId,
    ReqState,
};
use super::rendezvous::route_reads;
use super::{Communicator, P2pError, Status};
use crate::btl::{Messenger, SendError, SendId, StallWatch};
use crate::param::ParamStore;

/// The reserved active-message tag of the point-to-point protocol.
pub(crate) const TAG_P2P: u8 = 0xFD;

/// A layer operation whose completion matters.
pub(super) enum LayerOp {
    /// A rendezvous read into this receive.
    Get(ReqId),
    /// The write of a send's tail into its receiver's buffer.
    Put { req: ReqId, receiver_request: u64 },
    /// A fragment of a pipelined send, sent from where its bytes are.
    Fragment(ReqId),
}

/// Limits read from the parameters.
#[derive(Debug, Clone, Copy)]
pub(super) struct Config {
    eager_limit: u64,
    pub(super) pipeline_fragment: u64,
    /// Smallest message split between receiver and sender (0: never).
    pub(super) split_min: u64,
    /// Rendezvous read with `get` where the route offers it (else the
    /// pipeline).
    rget: bool,
    /// Reads in flight from one peer, on a route whose target serves
    /// them, beyond which its further rendezvous are moved by the sender
    /// (0: no bound).
    pub(super) rget_reads: u32,
    /// Smallest rendezvous beyond that bound the sender puts straight
    /// into the receive buffer, on routes with `put` (0: never).
    pub(super) put_min: u64,
    stall: Option<Duration>,
}

/// The point-to-point endpoint of one process. See the [module
/// docs](super).
pub struct P2p {
    pub(super) messenger: Messenger,
    pub(super) proto: Rc<RefCell<Protocol>>,
    pub(super) config: Config,
    /// Eager limit per peer: the route's, capped by the parameter.
    eager: Vec<u64>,
    /// Next sequence number per (context, peer), but for the pair last
    /// sent to, whose number is in `seq_last`.
    seqs: HashMap<(u32, Rank), u32, IdHash>,
    /// The pair last sent to and its next number, kept out of `seqs`: a
    /// stream of sends to one peer hashes nothing.
    seq_last: Option<((u32, Rank), u32)>,
    pub(super) layer_ops: HashMap<SendId, LayerOp, IdHash>,
    /// Rendezvous reads in flight, per peer.
    pub(super) reads: Vec<u32>,
    epoch: u64,
    /// Peers failed by the messenger or for breaking the protocol.
    pub(super) failed: HashMap<Rank, P2pError>,
    pub(super) ids: ContextIds,
    pub(super) world: Communicator,
}

impl fmt::Debug for P2p {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("P2p")
            .field("rank", &self.messenger.rank())
            .field("size", &self.messenger.size())
            .field("failed", &self.failed.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// A completed request taken out: its result and its owned buffer.
pub(super) type Finished = (Result<Status, P2pError>, Option<Box<dyn Any>>);

/// What starting a send did.
pub(super) enum Started {
    /// The message left; nothing more to wait for.
    Done,
    /// A request waits for the receiver.
    Waiting(ReqId),
}

impl P2p {
    /// Puts the point-to-point layer on `messenger` (every rank of the
    /// job does, in the same order as its other collective calls); reads
    /// the `p2p_*` parameters from `params`.
    pub fn new(mut messenger: Messenger, params: &ParamStore) -> Self {
        let size = messenger.size();
        let uint = |name: &str| match params.value(name) {
            Some(
                fireopal_abi::param::ParamValue::UInt(v) | fireopal_abi::param::ParamValue::Size(v),
            ) => *v,
            _ => 0,
        };
        let credits = u32::try_from(uint("p2p_eager_credits")).unwrap_or(u32::MAX);
        let config = Config {
            eager_limit: uint("p2p_eager_limit"),
            pipeline_fragment: uint("p2p_pipeline_fragment"),
            split_min: uint("p2p_split_min"),
            rget: params.str_value("p2p_rendezvous") != Some("pipeline"),
            rget_reads: u32::try_from(uint("p2p_rget_reads")).unwrap_or(u32::MAX),
            put_min: uint("p2p_put_min"),
            stall: match uint("p2p_stall_limit") {
                0 => None,
                s => Some(Duration::from_secs(s)),
            },
        };
        let eager = (0..size)
            .map(|peer| {
                let route = messenger.attributes(peer).map_or(0, |a| a.eager_limit);
                match config.eager_limit {
                    0 => route,
                    p => p.min(route),
                }
            })
            .collect();
        let proto = Rc::new(RefCell::new(Protocol::new(size, credits)));
        let handler_state = Rc::clone(&proto);
        messenger.register_layer(TAG_P2P, move |msg, _| {
            if let Ok(mut p) = handler_state.try_borrow_mut() {
                p.on_message(msg);
            }
        });
        let world_group = Group::world(size.max(1)).unwrap_or_else(|_| Group::empty());
        let world = Communicator::new(CommInner::new(0, world_group, messenger.rank()));
        proto.borrow_mut().groups.insert(0, world.group().clone());
        P2p {
            messenger,
            proto,
            config,
            eager,
            seqs: HashMap::default(),
            seq_last: None,
            layer_ops: HashMap::default(),
            reads: vec![0; size as usize],
            epoch: 0,
            failed: HashMap::new(),
            ids: ContextIds::new(),
            world,
        }
    }

    /// The communicator of every rank of the job.
    pub fn world(&self) -> Communicator {
        self.world.clone()
    }

    /// The messenger underneath, for active messages and one-sided
    /// operations of the runtime's own.
    pub fn messenger(&mut self) -> &mut Messenger {
        &mut self.messenger
    }

    /// Gives the messenger back (for a runtime that closes it itself).
    pub fn into_messenger(self) -> Messenger {
        self.messenger
    }

    /// The stall limit of blocking calls (`p2p_stall_limit`), if any.
    pub fn stall_limit(&self) -> Option<Duration> {
        self.config.stall
    }

    /// Sets the stall limit of blocking calls: `None` waits for ever.
    pub fn set_stall_limit(&mut self, limit: Option<Duration>) {
        self.config.stall = limit;
    }

    /// Drives the transports once and does what arrived messages asked
    /// for. Returns the work done (0: nothing happened).
    pub fn progress(&mut self) -> Result<usize, P2pError> {
        let mut work = self
            .messenger
            .progress()
            .map_err(|e| P2pError::Progress(Box::new(e)))?;
        // Each step is skipped, not run empty, when it has nothing: a
        // blocking wait polls this in a loop, and how fast the loop turns
        // is how soon an arrival is seen.
        if self.messenger.has_layer_completions() {
            work += self.layer_completions();
        }
        work += self.run_actions();
        if self.messenger.failure_epoch() != self.epoch {
            self.epoch = self.messenger.failure_epoch();
            self.notice_failures();
        }
        if !self.proto.borrow().violations.is_empty() {
            self.fail_violators();
        }
        Ok(work)
    }

    /// Finishes the layer's RDMA operations the messenger completed.
    #[inline(never)]
    fn layer_completions(&mut self) -> usize {
        let mut work = 0;
        for (id, status) in self.messenger.take_layer_completions() {
            work += 1;
            match self.layer_ops.remove(&id) {
                Some(LayerOp::Get(req)) => self.get_done(req, status.map_err(P2pError::from)),
                Some(LayerOp::Put {
                    req,
                    receiver_request,
                }) => self.tail_put(req, receiver_request, status.map_err(P2pError::from)),
                Some(LayerOp::Fragment(req)) => {
                    self.fragment_sent(req, status.map_err(P2pError::from))
                }
                None => {}
            }
        }
        work
    }

    /// Fails the peers that broke the protocol.
    #[inline(never)]
    fn fail_violators(&mut self) {
        let violations = std::mem::take(&mut self.proto.borrow_mut().violations);
        for (peer, violation) in violations {
            self.fail_peer(peer, P2pError::Protocol { peer, violation });
        }
    }

    /// Calls [`progress`](Self::progress) until `done` holds, within the
    /// stall limit.
    pub(super) fn wait_for(
        &mut self,
        mut done: impl FnMut(&mut Self) -> bool,
    ) -> Result<(), P2pError> {
        let mut watch = self.config.stall.map(StallWatch::new);
        while !done(self) {
            let work = self.progress()?;
            if let Some(w) = &mut watch {
                if w.stalled(work) {
                    return Err(P2pError::Stalled { limit: w.limit() });
                }
            }
        }
        Ok(())
    }

    /// Why `peer` failed, if it did (no lookup while none has).
    fn failure_of(&self, peer: Rank) -> Option<&P2pError> {
        if self.failed.is_empty() {
            None
        } else {
            self.failed.get(&peer)
        }
    }

    /// The world rank of `rank` of `comm`, refusing a freed communicator.
    #[inline]
    fn peer_of(&self, comm: &Communicator, rank: u32) -> Result<Rank, P2pError> {
        if comm.is_freed() {
            return Err(P2pError::FreedCommunicator);
        }
        comm.group()
            .lookup(rank)
            .ok_or_else(|| P2pError::NoSuchRank {
                rank,
                size: comm.size(),
            })
    }

    /// Starts a send of `len` bytes at `ptr` on `context` of `comm`.
    ///
    /// # Safety
    ///
    /// `ptr..ptr + len` must stay readable and unchanged until the
    /// returned request completes (or until this returns, for
    /// [`Started::Done`]); the caller stores what keeps the bytes alive in
    /// the request.
    pub(super) unsafe fn start_send(
        &mut self,
        comm: &Communicator,
        context: u32,
        dest: u32,
        tag: i32,
        ptr: *const u8,
        len: usize,
    ) -> Result<Started, P2pError> {
        if tag < 0 {
            return Err(P2pError::InvalidTag(tag));
        }
        let peer = self.peer_of(comm, dest)?;
        if let Some(e) = self.failure_of(peer) {
            return Err(e.clone());
        }
        let seq = self.next_seq(context, peer);
        let envelope = WireEnvelope {
            context,
            source: comm.rank(),
            tag,
            seq,
        };
        let data: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: the caller keeps `len` bytes at `ptr` alive and
            // unchanged for the whole send.
            unsafe { std::slice::from_raw_parts(ptr, len) }
        };
        let eager_limit = self.eager.get(peer as usize).copied().unwrap_or(0);
        {
            let mut proto = self.proto.borrow_mut();
            let credits = proto.send_credits.get_mut(peer as usize);
            if let Some(c) = credits.filter(|c| **c > 0 && len as u64 <= eager_limit) {
                *c -= 1;
                // What this process owes the peer rides back on the
                // message: a conversation sends no credit messages.
                let owed = proto.take_owed(peer);
                drop(proto);
                let header = Eager {
                    envelope,
                    flags: 0,
                    credits: owed,
                }
                .encode();
                let sent = match self.messenger.sendi_layer(peer, TAG_P2P, &header, data) {
                    Ok(true) => Ok(()),
                    Ok(false) => self
                        .messenger
                        .send_layer(peer, TAG_P2P, &header, data)
                        .map(|_| ()),
                    Err(e) => Err(e),
                };
                return match sent {
                    Ok(()) => Ok(Started::Done),
                    Err(e) => {
                        self.proto.borrow_mut().owe_again(peer, owed);
                        self.unsend(context, peer, seq);
                        Err(e.into())
                    }
                };
            }
        }
        // Rendezvous: RGET where the route reads remote memory and the
        // message is at least its `min_rdma_pipeline_size`, else the
        // pipeline.
        let attrs = self.messenger.attributes(peer);
        let mut registration = None;
        let rget = attrs.is_some_and(|a| route_reads(&a, len as u64));
        if len > 0 && self.config.rget && rget {
            // SAFETY: the caller keeps the bytes alive until the request
            // completes, which is after the receiver's FIN (or a failure),
            // when the registration is released.
            let region = unsafe { MemRegion::new(ptr.cast_mut(), len) };
            registration = self
                .messenger
                .register_memory(peer, region, Access::REMOTE_READ | Access::LOCAL_READ)
                .ok();
        }
        let (protocol, address, key) = match &registration {
            Some(h) => (RndvProtocol::Get, ptr as u64, h.remote_key().to_vec()),
            None => (RndvProtocol::Pipeline, 0, Vec::new()),
        };
        let id = self
            .proto
            .borrow_mut()
            .new_req(ReqState::Send(Box::new(Outgoing {
                peer,
                registration,
                ptr,
                len,
                owned: None,
                putting: false,
                sending: 0,
                send_failure: None,
            })));
        let rts = Rts {
            envelope,
            protocol,
            length: len as u64,
            sender_request: id,
            address,
            key: &key,
        }
        .encode();
        let sent = match rts {
            Some(header) => self
                .messenger
                .send_layer(peer, TAG_P2P, &header, &[])
                .map_err(P2pError::from),
            None => Err(P2pError::Send(Box::new(SendError::HeaderTooLong {
                len: Rts::BASE_LEN + key.len(),
                max: Rts::BASE_LEN + MAX_KEY_LEN,
            }))),
        };
        if let Err(e) = sent {
            let mut proto = self.proto.borrow_mut();
            let registration = match proto.reqs.get_mut(&id).map(|r| &mut r.state) {
                Some(ReqState::Send(out)) => out.registration.take(),
                _ => None,
            };
            proto.reqs.remove(&id);
            drop(proto);
            if let Some(h) = registration {
                let _ = self.messenger.deregister_memory(h);
            }
            self.unsend(context, peer, seq);
            return Err(e);
        }
        Ok(Started::Waiting(id))
    }

    /// Checks a receive's arguments: `Ok` carries the failure of a named
    /// source that already failed, which completes the receive at once.
    #[inline]
    pub(super) fn check_recv(
        &self,
        comm: &Communicator,
        source: Source,
        tag: Tag,
    ) -> Result<Option<P2pError>, P2pError> {
        // The commonest receives (a rank of the communicator or any, a
        // tag >= 0 or any, on a live communicator, no peer failed) pass
        // without a call; the rest, and every error, out of line.
        let plain = match (source, tag) {
            (Source::Rank(r), Tag::Tag(t)) => t >= 0 && r < comm.size(),
            (Source::Rank(r), Tag::Any) => r < comm.size(),
            (Source::Any, Tag::Tag(t)) => t >= 0,
            (Source::Any, Tag::Any) => true,
        };
        if plain && self.failed.is_empty() && !comm.is_freed() {
            return Ok(None);
        }
        self.check_recv_fully(comm, source, tag)
    }

    /// [`check_recv`](Self::check_recv) in full.
    #[inline(never)]
    fn check_recv_fully(
        &self,
        comm: &Communicator,
        source: Source,
        tag: Tag,
    ) -> Result<Option<P2pError>, P2pError> {
        if comm.is_freed() {
            return Err(P2pError::FreedCommunicator);
        }
        if let Tag::Tag(t) = tag {
            if t < 0 {
                return Err(P2pError::InvalidTag(t));
            }
        }
        match source {
            // With no peer failed, only the rank's range is checked.
            Source::Rank(r) if self.failed.is_empty() => {
                if r < comm.size() {
                    Ok(None)
                } else {
                    Err(P2pError::NoSuchRank {
                        rank: r,
                        size: comm.size(),
                    })
                }
            }
            Source::Rank(r) => Ok(self.failure_of(self.peer_of(comm, r)?).cloned()),
            Source::Any => Ok(None),
        }
    }

    /// The next sequence number of a message on `context` to `peer`.
    #[inline]
    fn next_seq(&mut self, context: u32, peer: Rank) -> u32 {
        let next = match &mut self.seq_last {
            Some((key, next)) if *key == (context, peer) => next,
            _ => self.switch_seq((context, peer)),
        };
        let seq = *next;
        *next = seq.wrapping_add(1);
        seq
    }

    /// Moves the pair last sent to back into the map and takes `key` out.
    #[inline(never)]
    fn switch_seq(&mut self, key: (u32, Rank)) -> &mut u32 {
        if let Some((old, next)) = self.seq_last.take() {
            self.seqs.insert(old, next);
        }
        let next = self.seqs.remove(&key).unwrap_or(0);
        &mut self.seq_last.insert((key, next)).1
    }

    /// Takes back sequence number `seq` of a message that never left, so
    /// that the receiver does not wait for it.
    fn unsend(&mut self, context: u32, peer: Rank, seq: u32) {
        let next = match &mut self.seq_last {
            Some((key, next)) if *key == (context, peer) => Some(next),
            _ => self.seqs.get_mut(&(context, peer)),
        };
        if let Some(next) = next {
            if *next == seq.wrapping_add(1) {
                *next = seq;
            }
        }
    }

    /// Posts a receive of `comm` (`spec` names one of its contexts), whose
    /// arguments passed [`check_recv`](Self::check_recv) (`failed_peer` is
    /// its answer); `parked` for the one receive a blocking call waits for
    /// (see the `table` module).
    pub(super) fn start_recv(
        &mut self,
        comm: &Communicator,
        spec: RecvSpec,
        target: RecvTarget,
        failed_peer: Option<P2pError>,
        parked: bool,
    ) -> ReqId {
        let source = spec.source;
        let mut proto = self.proto.borrow_mut();
        // The request is stored once the engine said where it is posted.
        let id = if parked {
            proto.reqs.reserve_parked()
        } else {
            proto.reqs.reserve()
        };
        let posted = proto.engine.post(spec, id);
        let post = match &posted {
            Posted::Queued(post) if failed_peer.is_none() => Some(*post),
            _ => None,
        };
        proto.reqs.fill(
            id,
            Req {
                state: ReqState::Recv {
                    target,
                    post,
                    rndv: None,
                },
                done: None,
                detached: false,
            },
        );
        match posted {
            Posted::Matched { req, message } => proto.matched(req, message),
            // A failed source's messages that arrived before its failure
            // still match; with none left, the receive fails.
            Posted::Queued(post) if failed_peer.is_some() => {
                proto.engine.cancel(post);
                proto.complete(id, Err(failed_peer.unwrap_or(P2pError::FreedCommunicator)));
            }
            Posted::Queued(_) => {}
            Posted::SourceFailed(req) => {
                let peer = match source {
                    Source::Rank(r) => comm.group().lookup(r),
                    Source::Any => None,
                };
                let error = peer
                    .and_then(|p| self.failed.get(&p).cloned())
                    .unwrap_or(P2pError::FreedCommunicator);
                proto.complete(req, Err(error));
            }
        }
        drop(proto);
        self.run_actions();
        id
    }

    /// The unexpected message a receive with this specification would
    /// take, without taking it.
    pub(super) fn probe_now(&self, context: u32, source: Source, tag: Tag) -> Option<Status> {
        let proto = self.proto.borrow();
        let m = proto
            .engine
            .probe(RecvSpec::new(ContextId(context), source, tag))?;
        let count = match m.msg {
            Arrived::Eager { data, .. } => data.len(),
            Arrived::Inline { len, .. } => *len,
            Arrived::Rts(a) => usize::try_from(a.length).unwrap_or(usize::MAX),
        };
        Some(Status {
            source: m.envelope.source,
            tag: m.envelope.tag,
            count,
        })
    }

    /// Does the work the handler left. Returns how many actions ran.
    #[inline]
    fn run_actions(&mut self) -> usize {
        if self.proto.borrow().actions.is_empty() {
            return 0;
        }
        self.run_queued_actions()
    }

    /// [`run_actions`](Self::run_actions) with some queued: out of line,
    /// so that the check every receive and every poll makes stays small.
    #[inline(never)]
    fn run_queued_actions(&mut self) -> usize {
        let mut n = 0;
        loop {
            let Some(action) = self.proto.borrow_mut().actions.pop_front() else {
                return n;
            };
            n += 1;
            match action {
                Action::Get(req) => self.start_get(req),
                Action::Cts {
                    peer,
                    sender_request,
                    receiver_request,
                } => self.ask_to_send(peer, sender_request, receiver_request),
                Action::Fin {
                    peer,
                    sender_request,
                    status,
                } => self.control(peer, &fin_header(sender_request, status)),
                Action::Credit { peer, credits } => self.control(peer, &credit_header(credits)),
                Action::Pipeline {
                    peer,
                    sender_request,
                    receiver_request,
                } => self.send_pipeline(peer, sender_request, receiver_request),
                Action::FinishSend { peer, req, status } => self.finish_send(peer, req, status),
                Action::PutTail {
                    peer,
                    sender_request,
                    receiver_request,
                    offset,
                    address,
                    key,
                } => self.put_tail(
                    peer,
                    sender_request,
                    receiver_request,
                    offset,
                    address,
                    &key,
                ),
                Action::TailWritten {
                    peer,
                    receiver_request,
                    status,
                } => self.tail_written(peer, receiver_request, status),
            }
        }
    }

    pub(super) fn violation(&mut self, peer: Rank, id: ReqId) {
        let violation = super::Violation::UnknownRequest(id);
        self.fail_peer(peer, P2pError::Protocol { peer, violation });
    }

    /// Fails the peers the messenger reported since the last look.
    fn notice_failures(&mut self) {
        for peer in 0..self.messenger.size() {
            if self.failed.contains_key(&peer) {
                continue;
            }
            if let Some(failure) = self.messenger.peer_failed(peer).cloned() {
                let failure = Box::new(failure);
                self.fail_peer(peer, P2pError::PeerFailed { peer, failure });
            }
        }
    }

    /// Completes with `error` every request that waits on `peer`, and
    /// takes its messages out of matching on every communicator.
    pub(super) fn fail_peer(&mut self, peer: Rank, error: P2pError) {
        if self.failed.contains_key(&peer) {
            return;
        }
        self.failed.insert(peer, error.clone());
        let mut proto = self.proto.borrow_mut();
        let contexts: Vec<(u32, u32)> = proto
            .groups
            .iter()
            .filter_map(|(id, g)| g.rank_of(peer).map(|r| (id, r)))
            .collect();
        let mut receives = Vec::new();
        for (id, rank) in contexts {
            for context in [2 * id, 2 * id + 1] {
                let failure = proto
                    .engine
                    .fail_source_keeping_arrived(ContextId(context), rank);
                receives.extend(failure.receives.into_iter().map(|(_, r)| r));
            }
        }
        for r in receives {
            proto.complete(r, Err(error.clone()));
        }
        let waiting: Vec<ReqId> = proto
            .reqs
            .iter()
            .filter(|(_, r)| r.done.is_none())
            .filter(|(_, r)| match &r.state {
                // A write in flight from the bytes ends (with an error)
                // first.
                ReqState::Send(out) => out.peer == peer && !out.in_flight(),
                ReqState::Recv { rndv: Some(v), .. } => v.peer == peer && !v.reading,
                ReqState::Recv { .. } => false,
            })
            .map(|(id, _)| id)
            .collect();
        let mut registrations = Vec::new();
        for id in waiting {
            match proto.reqs.get_mut(&id).map(|r| &mut r.state) {
                Some(ReqState::Send(out)) => registrations.extend(out.registration.take()),
                // The buffer a failed sender was to write.
                Some(ReqState::Recv { rndv: Some(v), .. }) => {
                    registrations.extend(v.registration.take());
                    registrations.extend(v.split.as_mut().and_then(|s| s.registration.take()));
                }
                _ => {}
            }
            proto.complete(id, Err(error.clone()));
        }
        drop(proto);
        for h in registrations {
            let _ = self.messenger.deregister_memory(h);
        }
    }

    /// Forgets the sequence numbers of communicator `id`'s contexts, so
    /// that a communicator that reuses the id starts its streams at 0.
    pub(super) fn forget_sequences(&mut self, id: u32) {
        self.seqs.retain(|&(context, _), _| context / 2 != id);
        if self
            .seq_last
            .is_some_and(|((context, _), _)| context / 2 == id)
        {
            self.seq_last = None;
        }
    }

    /// What the matching engine holds now: receives posted and not
    /// matched, and unexpected messages with their stored bytes (a
    /// rendezvous announcement stores none; its data waits at the
    /// sender). Eager credits bound the stored bytes to
    /// `p2p_eager_credits × eager limit` per sender.
    pub fn counts(&self) -> Counts {
        self.proto.borrow().engine.counts()
    }

    /// Peers this endpoint treats as failed, with why.
    pub fn failed_peers(&self) -> Vec<(Rank, P2pError)> {
        let mut v: Vec<_> = self.failed.iter().map(|(&r, e)| (r, e.clone())).collect();
        v.sort_by_key(|(r, _)| *r);
        v
    }

    /// Whether request `id` has completed.
    #[inline]
    pub(super) fn is_done(&self, id: ReqId) -> bool {
        let proto = self.proto.borrow();
        proto
            .reqs
            .get(&proto.reqs.resolve(id))
            .is_none_or(|r| r.done.is_some())
    }

    /// Takes a completed request out: its result and its owned buffer.
    #[inline]
    pub(super) fn take_done(&mut self, id: ReqId) -> Option<Finished> {
        let (done, owned) = self.proto.borrow_mut().reqs.take_finished(&id)?;
        Some((done.map_err(|e| *e), owned))
    }

    /// Lets go of a request whose caller stopped waiting on a buffer it
    /// borrowed: an unmatched receive is cancelled, a read in flight is
    /// waited for (the transport writes the buffer until it ends), and
    /// anything else stops touching the buffer.
    pub(super) fn abandon(&mut self, id: ReqId) {
        let id = self.proto.borrow().reqs.resolve(id);
        let cancel = {
            let proto = self.proto.borrow();
            match proto.reqs.get(&id).map(|r| &r.state) {
                Some(ReqState::Recv { post: Some(p), .. }) => Some(*p),
                _ => None,
            }
        };
        if let Some(post) = cancel {
            let mut proto = self.proto.borrow_mut();
            proto.engine.cancel(post);
            proto.reqs.remove(&id);
            return;
        }
        let reading = |p: &Self| match p.proto.borrow().reqs.get(&id).map(|r| &r.state) {
            Some(ReqState::Recv { rndv: Some(r), .. }) => {
                let writing = r.split.as_ref().is_some_and(|s| s.writing);
                r.reading || (writing && !p.failed.contains_key(&r.peer))
            }
            Some(ReqState::Send(out)) => out.in_flight(),
            _ => false,
        };
        // A read or write ends with success, an error or the peer's
        // failure: every transport completes what it started, and a
        // splitting sender answers while it lives.
        while reading(self) {
            if self.progress().is_err() {
                break;
            }
        }
        let mut proto = self.proto.borrow_mut();
        let finished = match proto.reqs.get_mut(&id) {
            Some(req) => {
                match &mut req.state {
                    ReqState::Recv { target, .. } => target.ptr = std::ptr::null_mut(),
                    // A null pointer marks the bytes as gone; the length
                    // stays, to check what the receiver asks for.
                    ReqState::Send(out) => out.ptr = std::ptr::null(),
                }
                req.detached = true;
                req.done.is_some()
            }
            None => false,
        };
        if finished {
            proto.reqs.remove(&id);
        }
    }
}
