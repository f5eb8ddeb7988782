//! Losing one lane of several: with `bml_replay_size` above 0, the sender
//! keeps a copy of every sequenced message until the receiver says it was
//! delivered, and sends the copies again on the lanes left when one is
//! lost; at 0, the default, the loss fails the peer.
//!
//! - Every sequenced message carries the number its sender waits for
//!   from its receiver, so traffic both ways acknowledges itself. A
//!   receiver that has delivered [`ACK_EVERY`] messages, or a quarter of
//!   `bml_replay_size` bytes, since it last said how far it got sends a
//!   [`LaneNotice::Delivered`]. The sender drops the copies before that
//!   number.
//! - A lane is lost when its module is closed after an error, or when the
//!   module reports the connection to this peer reset or timed out while
//!   other lanes to it are open (see [`loses_lane`]; a peer's orderly
//!   close loses nothing). The side that notices stops using the
//!   lane, sends again what it keeps (under [`TAG_REPLAYED`]), and tells
//!   the other side with [`LaneNotice::LaneLost`], naming the lane and the
//!   number it waits for, so that the other side does the same: a closed
//!   module is never read again, and its peer would not learn it
//!   otherwise.
//! - The receiver drops a message whose number it already delivered or
//!   holds once a replay may be under way (it received a replayed message
//!   or announced a loss); before that, such a message breaks the
//!   protocol.
//! - Copies are bounded by `bml_replay_size` bytes per peer, 0 (no
//!   copies, no notices) by default. A message sent while the copies are
//!   at the bound is not kept; a lane lost before it is delivered then
//!   fails the peer, as no copy can replace it ([`PeerFailure::LaneLost`]).
//! - A piece of striped RDMA whose lane is lost starts again on another
//!   lane with that lane's key (the caller's memory stays valid until the
//!   operation completes, so nothing is copied).

use std::collections::{HashMap, VecDeque};

use fireopal_abi::btl::Rank;
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::copy::copy_bytes;
use fireopal_core::id_hash::IdHash;
use fireopal_core::wire::am::LaneNotice;

use super::lanes::{wrap, Reorder, SEQ_HEADER_LEN};
use super::rdma::RdmaPiece;
use super::{Class, Messenger, PeerFailure, Route, SendError, SendId};

/// Reserved tag of a sequenced message sent again after a lane was lost.
pub(super) const TAG_REPLAYED: u8 = 0xF9;
/// Reserved tag of a [`LaneNotice`] (unsequenced).
pub(super) const TAG_LANE_NOTICE: u8 = 0xFA;
/// Messages delivered in order, with none sent back, after which a
/// delivery notice goes.
pub(super) const ACK_EVERY: u32 = 64;

/// When a receiver says how far it delivered: after `every` messages or
/// `bytes` bytes delivered since it last did (in a notice or riding
/// along a message of its own).
#[derive(Debug, Clone, Copy)]
pub(super) struct AckPolicy {
    pub(super) every: u32,
    pub(super) bytes: usize,
}

impl AckPolicy {
    /// The policy for a sender keeping `replay_limit` bytes of copies: a
    /// quarter of them delivered is said, so that the copies are dropped
    /// long before the bound; with no copies kept, nothing needs saying.
    pub(super) fn for_limit(replay_limit: usize) -> Self {
        if replay_limit == 0 {
            return AckPolicy {
                every: u32::MAX,
                bytes: usize::MAX,
            };
        }
        AckPolicy {
            every: ACK_EVERY,
            bytes: (replay_limit / 4).max(64 << 10),
        }
    }
}

/// Cache line size, for the copies' alignment.
const LINE: usize = 64;
/// Buffers of dropped copies kept for the next ones, at most this many
/// (and at most `bml_replay_size` bytes): fresh memory for every large
/// copy would cost a page fault per page.
const SPARE_BUFFERS: usize = 256;

/// Whether sequence number `a` comes before `b` (numbers wrap).
pub(super) fn before(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) > 0
}

/// A sequenced message kept until it is delivered.
#[derive(Debug)]
struct Kept {
    seq: u32,
    /// Its own tag, inside the sequence header.
    tag: u8,
    /// Where its header starts in `bytes`.
    start: usize,
    header_len: usize,
    /// Padding, its header, then its payload.
    bytes: Vec<u8>,
    /// The send it belongs to, if that completes later.
    id: Option<SendId>,
}

/// The copies one sender keeps for one peer.
#[derive(Debug, Default)]
pub(super) struct ReplayStore {
    kept: VecDeque<Kept>,
    bytes: usize,
    /// The number the receiver said it waits for.
    acked: u32,
    /// The latest number sent without a copy, while not yet delivered.
    unkept: Option<u32>,
    spare: Vec<Vec<u8>>,
    spare_bytes: usize,
    /// `bml_replay_size`: the bound on copies, and on spare buffers.
    limit: usize,
}

impl ReplayStore {
    /// Keeps a copy of message `seq`, unless that would pass `limit`
    /// bytes.
    pub(super) fn keep(
        &mut self,
        limit: usize,
        seq: u32,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        id: Option<SendId>,
    ) {
        let len = header.len() + payload.len();
        self.limit = limit;
        // With no copies kept (limit 0), an empty message is not kept
        // either: nothing would ever acknowledge it.
        if limit == 0 || self.bytes + len > limit {
            self.unkept = Some(seq);
            return;
        }
        // The last spare buffer if it is large enough: messages of one
        // size reuse theirs as they are.
        let room = len + LINE;
        let mut bytes = match self.spare.pop() {
            Some(b) => {
                self.spare_bytes -= b.capacity();
                if b.capacity() >= room {
                    b
                } else {
                    Vec::with_capacity(room)
                }
            }
            None => Vec::with_capacity(room),
        };
        // The payload goes at the caller's offset within a cache line, so
        // the copy runs at full speed whatever the sizes (see
        // `fireopal_core::copy`). The capacity holds the padding, so the
        // buffer does not move below; resizing a reused buffer of the
        // same length writes nothing.
        let at = bytes.as_ptr() as usize + header.len();
        let start = (payload.as_ptr() as usize).wrapping_sub(at) % LINE;
        bytes.resize(start + len, 0);
        let (h, p) = bytes[start..].split_at_mut(header.len());
        h.copy_from_slice(header);
        copy_bytes(p, payload);
        self.bytes += len;
        self.kept.push_back(Kept {
            seq,
            tag,
            start,
            header_len: header.len(),
            bytes,
            id,
        });
    }

    /// The receiver delivered every message before `next`: their copies
    /// go.
    pub(super) fn delivered(&mut self, next: u32) {
        if before(self.acked, next) {
            self.acked = next;
        }
        while let Some(k) = self.kept.front() {
            if !before(k.seq, next) {
                break;
            }
            if let Some(k) = self.kept.pop_front() {
                self.bytes -= k.bytes.len() - k.start;
                let cap = k.bytes.capacity();
                if self.spare.len() < SPARE_BUFFERS && self.spare_bytes + cap <= self.limit {
                    self.spare_bytes += cap;
                    self.spare.push(k.bytes);
                }
            }
        }
        if self.unkept.is_some_and(|u| before(u, next)) {
            self.unkept = None;
        }
    }

    /// Whether a copy of some message of send `id` is kept.
    fn holds(&self, id: SendId) -> bool {
        self.kept.iter().any(|k| k.id == Some(id))
    }

    /// Whether every message from `from` on has a copy.
    fn covers(&self, from: u32) -> bool {
        self.unkept.is_none_or(|u| before(u, from))
    }

    /// Bytes kept.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.bytes
    }
}

/// Whether a transport's report of kind `kind` about a peer loses only
/// the lane it came on, with what may have been in flight on it: the
/// connection was reset, broke or timed out. An orderly close
/// (`CONNECTION_CLOSED`) lost nothing: the peer is leaving, and fails once
/// its last lane closes. A peer that broke a protocol, failed
/// authentication or whose process ended fails on every lane.
pub(super) fn loses_lane(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::CONNECTION_RESET | ErrorKind::TIMED_OUT | ErrorKind::PEER_FAILED | ErrorKind::IO
    )
}

/// Whether a module's refusal of kind `kind` to send to a peer, or an
/// RDMA operation that ended with it, means that lane is gone: lost, or
/// closed by the peer.
pub(super) fn lane_refused(kind: ErrorKind) -> bool {
    loses_lane(kind) || kind == ErrorKind::CONNECTION_CLOSED
}

/// Whether a live sequenced route keeps a copy of some message of send
/// `id`: a failure of the module carrying it is then not the send's, as
/// the copy goes again on another lane.
pub(super) fn replaces(routes: &[Route], id: SendId) -> bool {
    routes
        .iter()
        .any(|r| r.sequenced && r.failed.is_none() && r.lanes.store.holds(id))
}

/// What the lanes of sequenced routes keep between calls, apart from each
/// route's own: per peer, the messages that came early; what `progress`
/// found; the pieces of striped RDMA in flight; when to acknowledge.
/// One value, so that a module's sink borrows it with one reference.
#[derive(Debug)]
pub(super) struct LaneState {
    pub(super) reorder: Vec<Reorder>,
    pub(super) events: Vec<LaneEvent>,
    pub(super) rdma_pieces: HashMap<u64, RdmaPiece, IdHash>,
    pub(super) acks: AckPolicy,
}

impl LaneState {
    /// Nothing yet, for a job of `size` ranks and copies bounded by
    /// `replay_limit` bytes.
    pub(super) fn new(size: usize, replay_limit: usize) -> Self {
        LaneState {
            reorder: (0..size).map(|_| Reorder::default()).collect(),
            events: Vec::new(),
            rdma_pieces: HashMap::default(),
            acks: AckPolicy::for_limit(replay_limit),
        }
    }
}

/// What `progress` found about lanes, acted on once the modules have
/// returned.
#[derive(Debug)]
pub(super) enum LaneEvent {
    /// Tell `peer` how far its messages were delivered.
    Delivered { peer: Rank, next: u32 },
    /// `peer` lost its lane of module `component`[`index`] and waits for
    /// number `next`.
    PeerLost {
        peer: Rank,
        next: u32,
        component: String,
        index: u16,
    },
    /// Module `module` of this process lost its lane to `peer`.
    Lost {
        peer: Rank,
        module: usize,
        error: PluginError,
    },
    /// A piece of a striped RDMA operation failed with its lane, module
    /// `lost`: it goes again on another, or the operation ends with
    /// `error`.
    RetryPiece {
        piece: RdmaPiece,
        lost: usize,
        error: SendError,
    },
}

impl Messenger {
    /// Acts on what `progress` found about lanes.
    #[inline(never)]
    pub(super) fn lane_events(&mut self) {
        for event in std::mem::take(&mut self.shared.lane_state.events) {
            match event {
                LaneEvent::Delivered { peer, next } => {
                    self.send_notice(peer, &LaneNotice::Delivered { next });
                }
                LaneEvent::PeerLost {
                    peer,
                    next,
                    component,
                    index,
                } => self.peer_lost_lane(peer, next, &component, index),
                LaneEvent::Lost {
                    peer,
                    module,
                    error,
                } => self.lane_lost(peer, module, error),
                LaneEvent::RetryPiece { piece, lost, error } => {
                    self.retry_piece(piece, lost, error);
                }
            }
        }
    }

    /// Whether module `i`'s refusal `e` of a send to `peer` lost that lane
    /// alone, another lane being open; the loss is then handled and the
    /// send may go on another lane.
    pub(super) fn lose_lane_on(&mut self, peer: Rank, i: usize, e: &SendError) -> bool {
        let SendError::Module(error) = e else {
            return false;
        };
        let Some(route) = self.shared.routes.get(peer as usize) else {
            return false;
        };
        if !route.sequenced || !lane_refused(error.kind) || !route.modules.iter().any(|&m| m != i) {
            return false;
        }
        self.lane_lost(peer, i, error.clone());
        self.shared.routes[peer as usize].failed.is_none()
    }

    /// Module `module` lost its lane to `peer` after `error`: the lane
    /// carries nothing more, the peer is told from which number to send
    /// again, and this side sends again what it keeps.
    pub(super) fn lane_lost(&mut self, peer: Rank, module: usize, error: PluginError) {
        self.shared.reassembly.remove(&(module, peer));
        let Some(route) = self.shared.routes.get_mut(peer as usize) else {
            return;
        };
        if route.failed.is_some() || route.lanes.lost.contains(&module) {
            return;
        }
        route.lanes.lost.push(module);
        route.modules.retain(|&m| m != module);
        if !route.lanes.closed.contains(&module) {
            route.lanes.closed.push(module);
        }
        let (component, index) = {
            let slot = &self.slots[module];
            (slot.component.clone(), slot.index)
        };
        let failure = PeerFailure::LaneLost {
            component: component.clone(),
            index,
            error,
        };
        if self.shared.routes[peer as usize].modules.is_empty() {
            return self.fail_lanes(peer, failure);
        }
        let reorder = &mut self.shared.lane_state.reorder[peer as usize];
        reorder.lenient = true;
        let next = reorder.expected;
        if let PeerFailure::LaneLost { error, .. } = &failure {
            self.log.log(
                fireopal_abi::host::LogLevel::Info,
                &format!(
                    "rank {peer}: lane btl {component}[{index}] lost: {error}; what it may \
                     have taken goes again over the other lanes"
                ),
            );
        }
        self.send_notice(
            peer,
            &LaneNotice::LaneLost {
                next,
                component: &component,
                index: u16::try_from(index).unwrap_or(u16::MAX),
            },
        );
        self.replay(peer, None, failure);
    }

    /// `peer` lost its lane of `component`[`index`] and waits for `next`:
    /// that lane carries nothing more to it, and what this side keeps from
    /// `next` on goes again.
    fn peer_lost_lane(&mut self, peer: Rank, next: u32, component: &str, index: u16) {
        let lane = self
            .slots
            .iter()
            .position(|s| s.component == component && u16::try_from(s.index).ok() == Some(index));
        let Some(route) = self.shared.routes.get_mut(peer as usize) else {
            return;
        };
        if route.failed.is_some() || !route.sequenced {
            return;
        }
        if let Some(m) = lane {
            route.modules.retain(|&j| j != m);
            if !route.lanes.closed.contains(&m) {
                route.lanes.closed.push(m);
            }
        }
        let failure = PeerFailure::LaneLost {
            component: component.to_owned(),
            index: usize::from(index),
            error: PluginError::new(
                ErrorKind::CONNECTION_CLOSED,
                format!("rank {peer} lost its end of the lane"),
            ),
        };
        if route.modules.is_empty() {
            return self.fail_lanes(peer, failure);
        }
        self.replay(peer, Some(next), failure);
    }

    /// Sends again, on the lanes left to `peer`, every kept message from
    /// `from` on (every kept one with `None`). When one of them was not
    /// kept, or a lane refuses, the peer fails with `failure`.
    fn replay(&mut self, peer: Rank, from: Option<u32>, failure: PeerFailure) {
        let store = &mut self.shared.routes[peer as usize].lanes.store;
        let from = from.unwrap_or(store.acked);
        if !store.covers(from) {
            return self.fail_lanes(peer, failure);
        }
        let kept = std::mem::take(&mut store.kept);
        let mut refused = false;
        let mut wrapped = Vec::new();
        for k in kept.iter().filter(|k| !before(k.seq, from)) {
            let route = &mut self.shared.routes[peer as usize];
            let n = route.modules.len();
            if n == 0 {
                break;
            }
            let i = route.modules[route.lanes.next % n];
            route.lanes.next = route.lanes.next.wrapping_add(1);
            let (header, payload) = k.bytes[k.start..].split_at(k.header_len);
            wrapped.resize(SEQ_HEADER_LEN + header.len(), 0);
            let ack = self.ack_for(peer);
            wrap(&mut wrapped, k.tag, k.seq, ack, header);
            match self.send_routed(i, peer, TAG_REPLAYED, &wrapped, payload, Class::Replay) {
                Ok(_) => {}
                // That lane is going too (the peer may be closing them all):
                // its module reports it, and the next replay, or the
                // failure of the last lane, follows from that.
                Err(SendError::Module(e)) if lane_refused(e.kind) => break,
                Err(_) => {
                    refused = true;
                    break;
                }
            }
        }
        let store = &mut self.shared.routes[peer as usize].lanes.store;
        store.kept = kept;
        if refused {
            self.fail_lanes(peer, failure);
        }
    }

    /// Fails `peer` after a lane was lost and its messages could not go
    /// again, or its only lane was.
    pub(super) fn fail_lanes(&mut self, peer: Rank, failure: PeerFailure) {
        super::lanes::forget(&mut self.shared.lane_state.reorder, peer);
        if super::mark_failed(
            &mut self.shared.routes,
            &mut self.shared.failure_epoch,
            peer,
            failure.clone(),
        ) {
            self.shared.failures.push((peer, failure));
        }
    }

    /// Sends `notice` to `peer` on its first open lane. A notice that
    /// cannot go is dropped: the lane's own failure reports it.
    fn send_notice(&mut self, peer: Rank, notice: &LaneNotice<'_>) {
        let Some(&i) = self.shared.routes.get(peer as usize).and_then(|r| {
            if r.failed.is_some() {
                None
            } else {
                r.modules.first()
            }
        }) else {
            return;
        };
        let _ = self.send_routed(
            i,
            peer,
            TAG_LANE_NOTICE,
            &notice.encode(),
            &[],
            Class::Replay,
        );
    }
}

#[cfg(test)]
mod tests {
    use abi_stable::std_types::RSlice;
    use fireopal_abi::btl::BtlEventSink;

    use super::super::lanes::{Lanes, TAG_SEQUENCED};
    use super::super::sink::Shared;
    use super::*;

    /// Parts for 3 ranks whose routes to ranks 1 and 2 have lanes 0 and 1,
    /// with a handler of tag 7 counting what it sees.
    fn two_lanes() -> (Shared, std::rc::Rc<std::cell::Cell<u32>>) {
        let mut parts = Shared::new(3);
        for peer in [1usize, 2] {
            let route = &mut parts.routes[peer];
            route.modules = vec![0, 1];
            route.sequenced = true;
            *route.lanes = Lanes::new(&[0, 1]);
        }
        let seen = std::rc::Rc::new(std::cell::Cell::new(0));
        let count = std::rc::Rc::clone(&seen);
        parts.handlers[7] = Some(Box::new(move |_, _| count.set(count.get() + 1)));
        (parts, seen)
    }

    fn sequenced(tag: u8, seq: u32) -> Vec<u8> {
        let mut out = vec![0u8; SEQ_HEADER_LEN];
        wrap(&mut out, tag, seq, 0, &[]);
        out
    }

    #[test]
    fn copies_of_delivered_messages_are_dropped_once_a_replay_started() {
        let (mut parts, seen) = two_lanes();
        let mut sink = parts.sink(0);
        let empty = RSlice::from_slice(&[]);
        for seq in [0u32, 1] {
            let h = sequenced(7, seq);
            sink.deliver(1, TAG_SEQUENCED, RSlice::from_slice(&h), empty);
        }
        // Number 3 comes early; then 1 to 3 again as replayed copies, the
        // originals of 1 and 3 after them: each is delivered once.
        for (tag, seq) in [
            (TAG_SEQUENCED, 3u32),
            (TAG_REPLAYED, 1),
            (TAG_REPLAYED, 2),
            (TAG_REPLAYED, 3),
            (TAG_SEQUENCED, 1),
            (TAG_SEQUENCED, 3),
        ] {
            let h = sequenced(7, seq);
            sink.deliver(1, tag, RSlice::from_slice(&h), empty);
        }
        drop(sink);
        assert_eq!(seen.get(), 4);
        assert!(parts.failures.is_empty(), "{:?}", parts.failures);
    }

    #[test]
    fn the_receiver_says_how_far_it_delivered_and_the_sender_drops_copies() {
        let (mut parts, seen) = two_lanes();
        let mut sink = parts.sink(1);
        let empty = RSlice::from_slice(&[]);
        for seq in 0..ACK_EVERY + 3 {
            let h = sequenced(7, seq);
            sink.deliver(2, TAG_SEQUENCED, RSlice::from_slice(&h), empty);
        }
        drop(sink);
        assert_eq!(seen.get(), ACK_EVERY + 3);
        let said: Vec<(Rank, u32)> = parts
            .lane_state
            .events
            .iter()
            .filter_map(|e| match e {
                LaneEvent::Delivered { peer, next } => Some((*peer, *next)),
                _ => None,
            })
            .collect();
        assert_eq!(said, [(2, ACK_EVERY)]);

        // As the sender: copies of 0..5 kept for rank 1, which says 4 came.
        for seq in 0..5u32 {
            parts.routes[1]
                .lanes
                .store
                .keep(1 << 20, seq, 7, b"", b"abc", None);
        }
        let delivered = LaneNotice::Delivered { next: 4 }.encode();
        let lost = LaneNotice::LaneLost {
            next: 4,
            component: "tcp",
            index: 1,
        }
        .encode();
        let mut sink = parts.sink(0);
        sink.deliver(1, TAG_LANE_NOTICE, RSlice::from_slice(&delivered), empty);
        sink.deliver(1, TAG_LANE_NOTICE, RSlice::from_slice(&lost), empty);
        sink.deliver(2, TAG_LANE_NOTICE, RSlice::from_slice(&[9, 9]), empty);
        drop(sink);
        assert_eq!(parts.routes[1].lanes.store.bytes(), 3);
        assert!(parts.lane_state.events.iter().any(|e| matches!(
            e,
            LaneEvent::PeerLost { peer: 1, next: 4, component, index: 1 } if component == "tcp"
        )));
        let failed: Vec<Rank> = parts.failures.iter().map(|(p, _)| *p).collect();
        assert_eq!(failed, [2], "a malformed notice breaks the protocol");
    }

    #[test]
    fn a_lane_that_breaks_while_another_is_open_is_lost_alone() {
        let (mut parts, _) = two_lanes();
        let broken = PluginError::new(ErrorKind::IO, "link down");
        parts.sink(1).peer_failed(1, broken.clone());
        assert!(parts.failures.is_empty());
        assert_eq!(parts.routes[1].modules, [0]);
        assert!(matches!(
            parts.lane_state.events.as_slice(),
            [LaneEvent::Lost {
                peer: 1,
                module: 1,
                ..
            }]
        ));
        // The last lane's loss fails the peer; so does a process that
        // ended, at once.
        parts.sink(0).peer_failed(1, broken);
        let ended = PluginError::new(ErrorKind::PROCESS_ENDED, "gone");
        parts.sink(0).peer_failed(2, ended);
        let failed: Vec<Rank> = parts.failures.iter().map(|(p, _)| *p).collect();
        assert_eq!(failed, [1, 2]);
    }

    #[test]
    fn numbers_compare_across_the_wrap() {
        assert!(before(1, 2));
        assert!(!before(2, 2));
        assert!(!before(3, 2));
        assert!(before(u32::MAX, 0));
        assert!(!before(0, u32::MAX));
    }

    #[test]
    fn with_no_copies_kept_not_even_an_empty_message_is_kept() {
        let mut s = ReplayStore::default();
        s.keep(0, 0, 7, b"", b"", Some(SendId(1)));
        assert!(!s.holds(SendId(1)));
        assert!(s.kept.is_empty() && !s.covers(0));
    }

    #[test]
    fn copies_go_when_delivered_and_the_bound_leaves_gaps() {
        let mut s = ReplayStore::default();
        for seq in 0..4u32 {
            s.keep(
                100,
                seq,
                7,
                b"h",
                &[seq as u8; 9],
                Some(SendId(u64::from(seq))),
            );
        }
        assert_eq!(s.bytes(), 40);
        assert!(s.holds(SendId(2)) && s.covers(0));
        s.delivered(2);
        assert_eq!(s.bytes(), 20);
        assert!(!s.holds(SendId(1)) && s.holds(SendId(2)));
        // Past the bound: number 9 has no copy, so nothing from 9 or
        // before can be replayed whole until it is delivered.
        s.keep(30, 9, 7, b"", &[0; 20], None);
        assert!(!s.covers(9) && !s.covers(4) && s.covers(10));
        s.delivered(10);
        assert!(s.covers(10));
        assert_eq!(s.bytes(), 0);
    }
}
