//! Several modules to one peer ("lanes"): every module of the best
//! exclusivity that reaches a peer carries its messages, round robin, and
//! a sequence number restores their order at the receiver.
//!
//! A route with one module sends as it always did. A route with several
//! (tcp with `btl_tcp_links=N`, or several interfaces) is *sequenced* from
//! the start: each message, user or layer, eager or fragmented, goes under
//! the reserved tag [`TAG_SEQUENCED`] with a 9-byte header in front of its
//! own (its tag, a sequence number per receiver, and the number the sender
//! waits for from the receiver), on the next module in turn. The receiver delivers a message when its number is the next one
//! and holds it otherwise, so handlers see each sender's messages in the
//! order sent whatever module carried them.
//!
//! `bml_sendi` chooses how a message tries the modules' immediate send:
//! `fast` tries `sendi` on the module whose turn it is and falls back to
//! `send` there; `fair` tries `sendi` on every module, from the one whose
//! turn it is, before any `send`.
//!
//! A peer that closes its connections (it finished, or died) fails once
//! every lane has closed: each lane's data comes before its own close, but
//! not before the other lanes'. A lane lost while others are open (its
//! module closed after an error, or its connection to the peer broke or
//! closed) carries nothing more, and may have taken messages with it: the
//! sender keeps a copy of each message until the receiver says it was
//! delivered, and sends the copies again on the other lanes (`replay`).
//! Where no copy was kept, the peer fails
//! ([`PeerFailure::LaneLost`](super::PeerFailure)), naming the module.
//!
//! Messages of at least twice `bml_stripe_min` are striped over the
//! route's modules that allow it ([`BtlFlags::STRIPE`]), each one's share
//! in proportion to its bandwidth; with fewer than two such modules they
//! go whole. RDMA on a key naming every lane is striped the same way
//! (`super::rdma`).

use std::collections::BTreeMap;

use fireopal_abi::btl::Rank;

use abi_stable::std_types::RSlice;
use fireopal_abi::btl::{BtlFlags, Completion};
use fireopal_abi::ErrorKind;
use fireopal_core::wire::am::FirstFragment;

use super::replay::{LaneEvent, ReplayStore};
use super::sink::Sink;
use super::{
    Class, Messenger, PeerFailure, SendError, SendId, SendTicket, TAG_FRAG_FIRST, TAG_FRAG_NEXT,
};

/// Reserved tag of a message carried on a sequenced route.
pub(super) const TAG_SEQUENCED: u8 = 0xFC;
/// Bytes the sequence header adds: the message's tag, its number, and the
/// number the sender waits for from the receiver (every message of the
/// receiver's before it was delivered: an acknowledgement riding along).
pub(super) const SEQ_HEADER_LEN: usize = 9;
/// Most messages a receiver holds for one peer while waiting for an
/// earlier one; a peer past it breaks the protocol.
const MAX_HELD: usize = 1 << 16;
/// Headers up to this size are wrapped on the stack.
const STACK_HEADER: usize = 256;
/// The reassembly stream of a sequenced route's striped messages (module
/// streams are numbered from 0).
pub(super) const STRIPED: usize = usize::MAX;

/// How a message tries the immediate send of a route's modules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendiPolicy {
    /// `sendi` on the module whose turn it is, then `send` there.
    Fast,
    /// `sendi` on every module in turn, then `send` on the first tried.
    Fair,
}

impl SendiPolicy {
    /// The policy a `bml_sendi` value names.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "fast" => Some(Self::Fast),
            "fair" => Some(Self::Fair),
            _ => None,
        }
    }
}

/// The sending side of a route's lanes.
#[derive(Debug, Default)]
pub(super) struct Lanes {
    /// Whose turn it is (an index into the route's modules).
    pub(super) next: usize,
    /// Number of the next message to this peer.
    seq: u32,
    /// Messages handed to each module: `(module, count)`.
    pub(super) sent: Vec<(usize, u64)>,
    /// Modules whose connection the peer closed; the peer fails when every
    /// lane has.
    pub(super) closed: Vec<usize>,
    /// Copies of the messages not yet delivered, for replay.
    pub(super) store: ReplayStore,
    /// Modules whose lane was lost and replaced (`replay`).
    pub(super) lost: Vec<usize>,
}

impl Lanes {
    pub(super) fn new(modules: &[usize]) -> Self {
        Lanes {
            next: 0,
            seq: 0,
            sent: modules.iter().map(|&m| (m, 0)).collect(),
            closed: Vec::new(),
            store: ReplayStore::default(),
            lost: Vec::new(),
        }
    }

    fn count(&mut self, module: usize) {
        match self.sent.iter_mut().find(|(m, _)| *m == module) {
            Some((_, n)) => *n += 1,
            None => self.sent.push((module, 1)),
        }
    }
}

/// The receiving side for one peer: the next number, the messages that
/// came early, and what was last said delivered.
#[derive(Debug, Default)]
pub(super) struct Reorder {
    pub(super) expected: u32,
    held: BTreeMap<u32, (u8, Vec<u8>, Vec<u8>)>,
    /// The number last acknowledged to the peer, in a delivery notice or
    /// in the sequence header of a message to it.
    acked: u32,
    /// Bytes delivered since.
    unacked_bytes: usize,
    /// A replay may be under way: a number already delivered or held is
    /// a copy, dropped, not a broken protocol.
    pub(super) lenient: bool,
}

/// What one lane of a route carried, for reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneInfo {
    /// Component of the module.
    pub component: String,
    /// Its index within the component.
    pub index: usize,
    /// Its bandwidth attribute, the weight it would have in striping.
    pub bandwidth_mbps: u32,
    /// Messages handed to it for this peer so far.
    pub messages: u64,
}

impl Messenger {
    /// Whether at least two of the route's modules allow striping
    /// ([`BtlFlags::STRIPE`]).
    fn stripes(&self, route: &super::Route) -> bool {
        route
            .modules
            .iter()
            .filter(|&&i| self.slots[i].attrs.flags.contains(BtlFlags::STRIPE))
            .nth(1)
            .is_some()
    }

    /// Sends a message to `peer` over its route: as is on a route of one
    /// module, sequenced and round robin on a route of several.
    #[inline]
    pub(super) fn send_message(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        class: Class,
    ) -> Result<SendTicket, SendError> {
        let route = self.live_route(peer)?;
        let sent = if route.sequenced {
            self.send_on_lanes(peer, tag, header, payload, class)
        } else {
            let i = *route
                .modules
                .first()
                .ok_or_else(|| SendError::Unreachable(peer))?;
            self.send_routed(i, peer, tag, header, payload, class)
        };
        self.fail_peer_on_refusal(peer, sent)
    }

    /// A module's refusal that says the lane to `peer` is gone, when it was
    /// the route's last lane, fails the peer now, as the module's own
    /// report of it will, so that the caller learns which peer failed.
    /// (With lanes left, a send goes again on them before its error gets
    /// here; an RDMA operation fails alone.)
    #[inline]
    pub(super) fn fail_peer_on_refusal<T>(
        &mut self,
        peer: Rank,
        result: Result<T, SendError>,
    ) -> Result<T, SendError> {
        match result {
            Err(SendError::Module(e)) if connection_gone(e.kind) && self.lanes_left(peer) <= 1 => {
                let failure = PeerFailure::Transport(e);
                self.fail_lanes(peer, failure.clone());
                Err(SendError::PeerFailed { peer, failure })
            }
            result => result,
        }
    }

    /// The lanes still open to `peer`.
    fn lanes_left(&self, peer: Rank) -> usize {
        self.shared
            .routes
            .get(peer as usize)
            .map_or(0, |r| r.modules.len())
    }

    /// [`send_message`](Self::send_message) on a sequenced route: kept out
    /// of line, so that the path of a route of one module stays short.
    #[inline(never)]
    fn send_on_lanes(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        class: Class,
    ) -> Result<SendTicket, SendError> {
        let route = &self.shared.routes[peer as usize];
        if self.stripe_min > 0 && payload.len() >= 2 * self.stripe_min && self.stripes(route) {
            return self.send_striped(peer, tag, header, payload, class);
        }
        self.send_sequenced(peer, tag, header, payload, Some(class))
            .map(|t| t.unwrap_or(SendTicket::Done))
    }

    /// A message on a sequenced route. With `class` `None` only `sendi`
    /// is tried, and `Ok(None)` means nothing was sent.
    pub(super) fn send_sequenced(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        class: Option<Class>,
    ) -> Result<Option<SendTicket>, SendError> {
        let route = &self.shared.routes[peer as usize];
        let n = route.modules.len();
        if n == 0 {
            return Err(SendError::Unreachable(peer));
        }
        let turn = route.lanes.next % n;
        let seq = route.lanes.seq;
        let ack = self.ack_for(peer);
        let mut stack = [0u8; STACK_HEADER];
        let mut heap = Vec::new();
        let wrapped: &[u8] = if header.len() + SEQ_HEADER_LEN <= STACK_HEADER {
            wrap(
                &mut stack[..header.len() + SEQ_HEADER_LEN],
                tag,
                seq,
                ack,
                header,
            );
            &stack[..header.len() + SEQ_HEADER_LEN]
        } else {
            heap.resize(header.len() + SEQ_HEADER_LEN, 0);
            wrap(&mut heap, tag, seq, ack, header);
            &heap
        };
        let tries = match self.sendi_policy {
            SendiPolicy::Fast => 1,
            SendiPolicy::Fair => n,
        };
        for k in 0..tries {
            let i = self.shared.routes[peer as usize].modules[(turn + k) % n];
            match self.sendi_on(i, peer, TAG_SEQUENCED, wrapped, payload) {
                Ok(true) => {
                    self.keep(peer, seq, tag, header, payload, None);
                    self.sent_on(peer, i, turn);
                    return Ok(Some(SendTicket::Done));
                }
                Ok(false) => {}
                Err(e) if self.lose_lane_on(peer, i, &e) => {
                    return self.send_sequenced(peer, tag, header, payload, class);
                }
                Err(e) => return Err(e),
            }
        }
        let Some(class) = class else {
            return Ok(None);
        };
        // Its `sendi` was tried above (too large, or Busy).
        let i = self.shared.routes[peer as usize].modules[turn];
        let ticket =
            match self.send_routed_after(i, peer, TAG_SEQUENCED, wrapped, payload, class, true) {
                Ok(ticket) => ticket,
                Err(e) if self.lose_lane_on(peer, i, &e) => {
                    return self.send_sequenced(peer, tag, header, payload, Some(class));
                }
                Err(e) => return Err(e),
            };
        let id = match ticket {
            SendTicket::Pending(id) => Some(id),
            SendTicket::Done => None,
        };
        self.keep(peer, seq, tag, header, payload, id);
        self.sent_on(peer, i, turn);
        Ok(Some(ticket))
    }

    /// A large message on a sequenced route, striped: cut into pieces
    /// sent on the lanes in turn, each lane's piece in proportion to its
    /// bandwidth attribute and at least `bml_stripe_min` bytes. Each piece
    /// is a sequenced message of its own (the first carrying the message's
    /// tag, header and length), so the receiver's reordering hands them to
    /// one reassembly in order.
    fn send_striped(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        class: Class,
    ) -> Result<SendTicket, SendError> {
        let route = &self.shared.routes[peer as usize];
        let n = route.modules.len();
        let turn = route.lanes.next % n;
        // The lanes that allow striping, from the one whose turn it is.
        let lanes: Vec<usize> = (0..n)
            .map(|k| route.modules[(turn + k) % n])
            .filter(|&i| self.slots[i].attrs.flags.contains(BtlFlags::STRIPE))
            .collect();
        let header_len = u16::try_from(header.len()).map_err(|_| SendError::HeaderTooLong {
            len: header.len(),
            max: usize::from(u16::MAX),
        })?;
        let mut first = FirstFragment {
            tag,
            header_len,
            payload_len: payload.len() as u64,
        }
        .encode()
        .to_vec();
        first.extend_from_slice(header);
        // The largest piece every lane takes in one send.
        let room = lanes
            .iter()
            .map(|&i| {
                let a = &self.slots[i].attrs;
                if SEQ_HEADER_LEN + first.len() > a.max_header_size as usize {
                    0
                } else {
                    usize::try_from(a.max_send_size)
                        .unwrap_or(usize::MAX)
                        .saturating_sub(SEQ_HEADER_LEN + first.len())
                }
            })
            .min()
            .unwrap_or(0);
        if room == 0 {
            return Err(SendError::HeaderTooLong {
                len: header.len(),
                max: 0,
            });
        }
        let weights: Vec<u64> = lanes
            .iter()
            .map(|&i| u64::from(self.slots[i].attrs.bandwidth_mbps.max(1)))
            .collect();
        let pieces = stripe(payload.len(), &weights, self.stripe_min, room);
        let id = self.next_id(class);
        let mut parts = 0usize;
        let mut offset = 0usize;
        for (k, &(lane, len)) in pieces.iter().enumerate() {
            let i = lanes[lane];
            let seq = self.shared.routes[peer as usize].lanes.seq;
            let (inner, hdr): (u8, &[u8]) = if k == 0 {
                (TAG_FRAG_FIRST, &first)
            } else {
                (TAG_FRAG_NEXT, &[])
            };
            let mut wrapped = vec![0u8; SEQ_HEADER_LEN + hdr.len()];
            let ack = self.ack_for(peer);
            wrap(&mut wrapped, inner, seq, ack, hdr);
            let piece = &payload[offset..offset + len];
            if !self.shared.routes[peer as usize].modules.contains(&i) {
                // Its lane was lost during this send: the piece goes on
                // another, its completion the messenger's own.
                self.send_sequenced(peer, inner, hdr, piece, Some(Class::Replay))?;
                offset += len;
                continue;
            }
            let cookie = self.next_cookie;
            let slot = &mut self.slots[i];
            slot.active = true;
            let sent = slot
                .module
                .send(
                    peer,
                    TAG_SEQUENCED,
                    RSlice::from_slice(&wrapped),
                    RSlice::from_slice(piece),
                    cookie,
                )
                .into_result();
            match sent {
                Ok(Completion::Done) => {}
                Ok(Completion::Pending) => {
                    self.next_cookie += 1;
                    self.shared.cookies.insert(cookie, (id, i));
                    parts += 1;
                }
                Err(e) if self.lose_lane_on(peer, i, &SendError::Module(e.clone())) => {
                    self.send_sequenced(peer, inner, hdr, piece, Some(Class::Replay))?;
                    offset += len;
                    continue;
                }
                Err(e) if k == 0 => return Err(SendError::Module(e)),
                Err(e) => {
                    // The peer holds part of the message: the stream to it
                    // cannot go on.
                    self.fail_route(peer, PeerFailure::FragmentedSend(e.clone()));
                    self.await_parts(id, parts, Some(SendError::Module(e.clone())));
                    return Err(SendError::Module(e));
                }
            }
            self.keep(peer, seq, inner, hdr, piece, Some(id));
            self.sent_on(peer, i, turn + lane);
            offset += len;
        }
        Ok(self.await_parts(id, parts, None))
    }

    /// Keeps a copy of message `seq` to `peer` (its own tag, header and
    /// payload) until the peer says it was delivered.
    fn keep(
        &mut self,
        peer: Rank,
        seq: u32,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        id: Option<SendId>,
    ) {
        let limit = self.replay_limit;
        self.shared.routes[peer as usize]
            .lanes
            .store
            .keep(limit, seq, tag, header, payload, id);
    }

    /// The number to acknowledge to `peer` in a message sent now: the one
    /// this process waits for from it. The next delivery notice counts
    /// from here.
    pub(super) fn ack_for(&mut self, peer: Rank) -> u32 {
        let r = &mut self.shared.lane_state.reorder[peer as usize];
        r.acked = r.expected;
        r.unacked_bytes = 0;
        r.expected
    }

    /// Counts a message that left on module `i`: its number is used, and
    /// the next message goes on the next module.
    fn sent_on(&mut self, peer: Rank, i: usize, turn: usize) {
        let lanes = &mut self.shared.routes[peer as usize].lanes;
        lanes.seq = lanes.seq.wrapping_add(1);
        lanes.next = turn + 1;
        lanes.count(i);
    }

    /// The lanes to `peer`, with what each carried (one lane: the route's
    /// single module).
    pub fn lanes(&self, peer: Rank) -> Vec<LaneInfo> {
        let Some(route) = self.shared.routes.get(peer as usize) else {
            return Vec::new();
        };
        route
            .modules
            .iter()
            .filter_map(|&i| {
                let slot = self.slots.get(i)?;
                let messages = route
                    .lanes
                    .sent
                    .iter()
                    .find(|(m, _)| *m == i)
                    .map_or(0, |(_, n)| *n);
                Some(LaneInfo {
                    component: slot.component.clone(),
                    index: slot.index,
                    bandwidth_mbps: slot.attrs.bandwidth_mbps,
                    messages,
                })
            })
            .collect()
    }
}

/// The pieces of a striped message of `len` bytes over lanes of these
/// `weights` (in the order they take turns): `(lane, bytes)` in message
/// order. Each lane's share is in proportion to its weight; no share is
/// under `min` bytes, so a smaller message uses fewer lanes; a share over
/// `room` goes in several pieces on its lane.
pub(super) fn stripe(len: usize, weights: &[u64], min: usize, room: usize) -> Vec<(usize, usize)> {
    let (min, room) = (min.max(1), room.max(1));
    let lanes = weights.len().clamp(1, (len / min).max(1));
    let used = &weights[..lanes];
    let total: u128 = used.iter().map(|&w| u128::from(w.max(1))).sum();
    let mut pieces = Vec::new();
    let mut given = 0usize;
    for (lane, &w) in used.iter().enumerate() {
        let share = if lane + 1 == lanes {
            len - given
        } else {
            ((len as u128 * u128::from(w.max(1))) / total) as usize
        };
        given += share;
        let mut left = share;
        while left > 0 {
            let piece = left.min(room);
            pieces.push((lane, piece));
            left -= piece;
        }
    }
    pieces
}

/// Writes the sequence header and then `header` into `out`.
pub(super) fn wrap(out: &mut [u8], tag: u8, seq: u32, ack: u32, header: &[u8]) {
    out[0] = tag;
    out[1..5].copy_from_slice(&seq.to_le_bytes());
    out[5..SEQ_HEADER_LEN].copy_from_slice(&ack.to_le_bytes());
    out[SEQ_HEADER_LEN..].copy_from_slice(header);
}

impl Sink<'_> {
    /// A message of a sequenced route: delivered if it is the next one
    /// (with every held one that follows), held if it came early.
    /// A `replayed` one was sent again after a lane was lost.
    pub(super) fn sequenced(&mut self, peer: Rank, header: &[u8], payload: &[u8], replayed: bool) {
        let Some((&tag, rest)) = header.split_first() else {
            return self.fail_peer(peer, PeerFailure::Sequence("empty sequence header"));
        };
        let word = |at: usize| {
            rest.get(at..at + 4)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(u32::from_le_bytes)
        };
        let (Some(seq), Some(ack)) = (word(0), word(4)) else {
            return self.fail_peer(peer, PeerFailure::Sequence("short sequence header"));
        };
        let inner = &rest[8..];
        if let Some(route) = self.shared.routes.get_mut(peer as usize) {
            route.lanes.store.delivered(ack);
        }
        if tag == TAG_SEQUENCED {
            let why = "a sequenced message inside another";
            return self.fail_peer(peer, PeerFailure::Sequence(why));
        }
        let Some(reorder) = self.shared.lane_state.reorder.get_mut(peer as usize) else {
            return;
        };
        if replayed {
            reorder.lenient = true;
        }
        let ahead = seq.wrapping_sub(reorder.expected);
        if ahead == 0 {
            reorder.expected = reorder.expected.wrapping_add(1);
            self.in_order(peer, tag, inner, payload);
            self.release_held(peer);
        } else if reorder.lenient && (ahead >= 1 << 31 || reorder.held.contains_key(&seq)) {
            // A copy of a message already delivered or held.
        } else if ahead >= 1 << 31 {
            self.fail_peer(
                peer,
                PeerFailure::Sequence("a sequence number already delivered"),
            );
        } else if reorder.held.len() >= MAX_HELD || reorder.held.contains_key(&seq) {
            self.fail_peer(
                peer,
                PeerFailure::Sequence("too many or repeated early messages"),
            );
        } else {
            reorder
                .held
                .insert(seq, (tag, inner.to_vec(), payload.to_vec()));
        }
    }

    /// Delivers the held messages of `peer` that now come next.
    fn release_held(&mut self, peer: Rank) {
        loop {
            let Some(reorder) = self.shared.lane_state.reorder.get_mut(peer as usize) else {
                return;
            };
            let Some((tag, header, payload)) = reorder.held.remove(&reorder.expected) else {
                return;
            };
            reorder.expected = reorder.expected.wrapping_add(1);
            self.in_order(peer, tag, &header, &payload);
        }
    }

    /// The next message of a sequenced route: a piece of a striped
    /// message goes to its reassembly, anything else to its handler.
    fn in_order(&mut self, peer: Rank, tag: u8, header: &[u8], payload: &[u8]) {
        if let Some(r) = self.shared.lane_state.reorder.get_mut(peer as usize) {
            r.unacked_bytes += header.len() + payload.len();
            if r.expected.wrapping_sub(r.acked) >= self.shared.lane_state.acks.every
                || r.unacked_bytes >= self.shared.lane_state.acks.bytes
            {
                r.acked = r.expected;
                r.unacked_bytes = 0;
                self.shared.lane_state.events.push(LaneEvent::Delivered {
                    peer,
                    next: r.expected,
                });
            }
        }
        if tag == TAG_FRAG_FIRST || tag == TAG_FRAG_NEXT {
            self.reassemble(STRIPED, peer, tag, header, payload);
        } else {
            self.dispatch_now(peer, tag, header, payload);
        }
    }
}

/// Forgets what was held for `peer` (it failed).
pub(super) fn forget(reorder: &mut [Reorder], peer: Rank) {
    if let Some(r) = reorder.get_mut(peer as usize) {
        r.held.clear();
    }
}

/// Whether a module's refusal of kind `kind` says its connection to the
/// peer is gone (not an error of the one operation, such as a bad
/// address).
fn connection_gone(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::CONNECTION_RESET | ErrorKind::CONNECTION_CLOSED | ErrorKind::PEER_FAILED
    )
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use abi_stable::std_types::RSlice;
    use fireopal_abi::btl::BtlEventSink;
    use fireopal_abi::{ErrorKind, PluginError};

    use super::super::sink::Shared;
    use super::*;

    /// A sequenced message of `tag` number `seq` with header `h`.
    fn sequenced(tag: u8, seq: u32, h: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; SEQ_HEADER_LEN + h.len()];
        wrap(&mut out, tag, seq, 0, h);
        out
    }

    /// What a handler saw: (peer, header, payload) per message.
    type Seen = Rc<RefCell<Vec<(Rank, Vec<u8>, Vec<u8>)>>>;

    /// Parts whose handler of tag 7 records what it sees.
    fn recording() -> (Shared, Seen) {
        let mut parts = Shared::new(3);
        let seen = Rc::new(RefCell::new(Vec::new()));
        let log = Rc::clone(&seen);
        parts.handlers[7] = Some(Box::new(move |m, _| {
            log.borrow_mut()
                .push((m.peer, m.header.to_vec(), m.payload.to_vec()))
        }));
        (parts, seen)
    }

    #[test]
    fn messages_are_handed_over_in_their_senders_order() {
        let (mut parts, seen) = recording();
        let mut sink = parts.sink(1);
        // Peer 1 sends 0..6; they arrive over two lanes as 1, 3, 0, 2, 5, 4.
        for seq in [1u32, 3, 0, 2, 5, 4] {
            let h = sequenced(7, seq, &[seq as u8]);
            let p = [0xA0 | seq as u8; 3];
            sink.deliver(
                1,
                TAG_SEQUENCED,
                RSlice::from_slice(&h),
                RSlice::from_slice(&p),
            );
        }
        // Peer 2's numbers are its own.
        let h = sequenced(7, 0, b"x");
        sink.deliver(
            2,
            TAG_SEQUENCED,
            RSlice::from_slice(&h),
            RSlice::from_slice(&[]),
        );
        drop(sink);
        let got: Vec<(Rank, Vec<u8>)> = seen
            .borrow()
            .iter()
            .map(|(peer, h, _)| (*peer, h.clone()))
            .collect();
        let want: Vec<(Rank, Vec<u8>)> = (0..6u8)
            .map(|s| (1, vec![s]))
            .chain([(2, b"x".to_vec())])
            .collect();
        assert_eq!(got, want);
        assert!(seen.borrow()[..6]
            .iter()
            .enumerate()
            .all(|(s, (_, _, p))| *p == [0xA0 | s as u8; 3]));
        assert!(parts.failures.is_empty());
    }

    #[test]
    fn a_peer_that_breaks_the_sequence_fails_with_why() {
        let (mut parts, seen) = recording();
        let mut sink = parts.sink(0);
        let empty = RSlice::from_slice(&[]);
        // A number already delivered.
        for seq in [0u32, 0] {
            let h = sequenced(7, seq, &[]);
            sink.deliver(1, TAG_SEQUENCED, RSlice::from_slice(&h), empty);
        }
        // A header too short to hold a number.
        sink.deliver(2, TAG_SEQUENCED, RSlice::from_slice(&[7, 0]), empty);
        drop(sink);
        assert_eq!(seen.borrow().len(), 1);
        let failed: Vec<Rank> = parts.failures.iter().map(|(p, _)| *p).collect();
        assert_eq!(failed, [1, 2]);
        assert!(parts
            .failures
            .iter()
            .all(|(_, f)| matches!(f, PeerFailure::Sequence(_))));
    }

    #[test]
    fn stripes_follow_the_weights_the_minimum_and_the_room() {
        // Equal lanes share equally; the last takes the remainder.
        assert_eq!(stripe(1000, &[1, 1], 100, 1 << 20), [(0, 500), (1, 500)]);
        assert_eq!(
            stripe(1001, &[1, 1, 1], 100, 1 << 20),
            [(0, 333), (1, 333), (2, 335)]
        );
        // A lane of three times the bandwidth takes three quarters.
        assert_eq!(
            stripe(4000, &[3000, 1000], 100, 1 << 20),
            [(0, 3000), (1, 1000)]
        );
        // Too small for every lane: only as many as the minimum allows.
        assert_eq!(
            stripe(250, &[1, 1, 1, 1], 100, 1 << 20),
            [(0, 125), (1, 125)]
        );
        assert_eq!(stripe(99, &[1, 1], 100, 1 << 20), [(0, 99)]);
        // One lane: the room alone cuts the message (an RDMA operation
        // larger than a module's `rdma_pipeline_frag_size`).
        assert_eq!(
            stripe(1000, &[5], 1, 300),
            [(0, 300), (0, 300), (0, 300), (0, 100)]
        );
        assert!(stripe(0, &[5], 1, 300).is_empty());
        // A share over the room goes in several pieces on its lane.
        assert_eq!(
            stripe(1000, &[1, 1], 100, 300),
            [(0, 300), (0, 200), (1, 300), (1, 200)]
        );
        // Every byte is given, whatever the weights.
        for len in [1usize, 777, 1 << 20, (4 << 20) + 3] {
            let total: usize = stripe(len, &[10_000, 1, 2_500, 7], 4096, 1 << 18)
                .iter()
                .map(|&(_, n)| n)
                .sum();
            assert_eq!(total, len);
        }
    }

    #[test]
    fn a_striped_message_is_reassembled_from_its_pieces_in_order() {
        let (mut parts, seen) = recording();
        let mut sink = parts.sink(0);
        let payload: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let mut first = FirstFragment {
            tag: 7,
            header_len: 2,
            payload_len: 1000,
        }
        .encode()
        .to_vec();
        first.extend_from_slice(b"hd");
        // Pieces 0..3 of the message (numbers 0..3), arriving 2, 0, 3, 1.
        let pieces = [(0u32, 0..400), (1, 400..700), (2, 700..900), (3, 900..1000)];
        for k in [2usize, 0, 3, 1] {
            let (seq, range) = pieces[k].clone();
            let (tag, hdr): (u8, &[u8]) = if seq == 0 {
                (TAG_FRAG_FIRST, &first)
            } else {
                (TAG_FRAG_NEXT, &[])
            };
            let h = sequenced(tag, seq, hdr);
            let p = &payload[range];
            sink.deliver(
                1,
                TAG_SEQUENCED,
                RSlice::from_slice(&h),
                RSlice::from_slice(p),
            );
        }
        drop(sink);
        assert!(parts.failures.is_empty(), "{:?}", parts.failures);
        assert_eq!(*seen.borrow(), [(1, b"hd".to_vec(), payload)]);
    }

    #[test]
    fn a_peer_fails_when_its_last_lane_closes_or_at_once_on_an_error() {
        let mut parts = Shared::new(3);
        for peer in [1usize, 2] {
            let route = &mut parts.routes[peer];
            route.modules = vec![0, 1];
            route.sequenced = true;
            *route.lanes = Lanes::new(&[0, 1]);
        }
        let closed = || PluginError::new(ErrorKind::CONNECTION_CLOSED, "closed");
        parts.sink(0).peer_failed(1, closed());
        parts.sink(0).peer_failed(1, closed());
        assert!(parts.failures.is_empty(), "one lane of two closed");
        assert_eq!(
            parts.routes[1].modules,
            [1],
            "the closed lane carries no more"
        );
        parts.sink(1).peer_failed(1, closed());
        assert_eq!(parts.failures.len(), 1);
        assert_eq!(parts.failures[0].0, 1);
        let broken = PluginError::new(ErrorKind::MALFORMED, "bad frame");
        parts.sink(0).peer_failed(2, broken);
        assert_eq!(parts.failures.len(), 2, "an error fails the peer at once");
    }

    #[test]
    fn policies_parse_from_their_names() {
        assert_eq!(SendiPolicy::parse("fast"), Some(SendiPolicy::Fast));
        assert_eq!(SendiPolicy::parse("fair"), Some(SendiPolicy::Fair));
        assert_eq!(SendiPolicy::parse("round"), None);
    }
}
