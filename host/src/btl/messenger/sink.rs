//! The host side of a module's `progress` call: messages handed to their
//! handlers (reassembled from fragments, put back in order on a route of
//! several modules), completions counted against their sends, peers
//! the module reports failed, and messages no handler was there for.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use abi_stable::std_types::{RResult, RSlice};
use fireopal_abi::btl::{BtlEventSink, Rank};
use fireopal_abi::host::LogLevel;
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::id_hash::IdHash;
use fireopal_core::wire::am::{LaneNotice, Reassembled, Reassembly};

use super::layered::Completions;
use super::replay::{self, LaneEvent, TAG_LANE_NOTICE, TAG_REPLAYED};
use super::{
    lanes, mark_failed, Handler, Incoming, Messenger, Outstanding, PeerFailure, Replies, Route,
    SendError, SendId, MAX_MESSAGE, TAG_FRAG_FIRST, TAG_FRAG_NEXT,
};

/// The host side of a module's `progress` call.
pub(super) struct Sink<'a> {
    pub(super) module: usize,
    pub(super) shared: &'a mut Shared,
    pub(super) panic: Option<Box<dyn std::any::Any + Send>>,
}

/// Counts one part of send `id` as done, with `status`; the send
/// completes, with its first error, when its last part does.
pub(super) fn complete_part(
    outstanding: &mut HashMap<SendId, Outstanding, IdHash>,
    completions: &mut Completions,
    id: SendId,
    status: Result<(), SendError>,
) {
    let Some(o) = outstanding.get_mut(&id) else {
        return;
    };
    if let Err(e) = status {
        o.error.get_or_insert(e);
    }
    o.parts_left = o.parts_left.saturating_sub(1);
    if o.parts_left == 0 {
        if let Some(o) = outstanding.remove(&id) {
            completions.push(o.id, o.error.map_or(Ok(()), Err));
        }
    }
}

impl Sink<'_> {
    /// A fragment of a message from `peer`, on the stream `stream` (a
    /// module, or [`lanes::STRIPED`] for the pieces of a sequenced route):
    /// handed on once the message is whole.
    pub(super) fn reassemble(
        &mut self,
        stream: usize,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
    ) {
        let key = (stream, peer);
        let assembly = self.shared.reassembly.entry(key).or_default();
        let step = if tag == TAG_FRAG_FIRST {
            assembly.first(header, payload, MAX_MESSAGE)
        } else {
            assembly.next(payload)
        };
        match step {
            Ok(Reassembled::Partial) => {}
            Ok(Reassembled::Complete(tag, h, p)) => {
                self.shared.reassembly.remove(&key);
                if stream == lanes::STRIPED && (tag == lanes::TAG_SEQUENCED || tag == TAG_REPLAYED)
                {
                    let why = "a sequenced message inside a striped one";
                    return self.fail_peer(peer, PeerFailure::Sequence(why));
                }
                self.dispatch(peer, tag, &h, &p);
            }
            Err(e) => {
                self.shared.reassembly.remove(&key);
                self.fail_peer(peer, PeerFailure::Fragments(e));
            }
        }
    }

    #[inline]
    fn dispatch(&mut self, peer: Rank, tag: u8, header: &[u8], payload: &[u8]) {
        if matches!(tag, lanes::TAG_SEQUENCED | TAG_REPLAYED | TAG_LANE_NOTICE) {
            return self.dispatch_lanes(peer, tag, header, payload);
        }
        self.dispatch_now(peer, tag, header, payload);
    }

    /// A message of a route of several lanes: kept out of line, so that
    /// the path of a route of one module stays short.
    #[inline(never)]
    fn dispatch_lanes(&mut self, peer: Rank, tag: u8, header: &[u8], payload: &[u8]) {
        match tag {
            TAG_REPLAYED => self.sequenced(peer, header, payload, true),
            TAG_LANE_NOTICE => self.lane_notice(peer, header),
            _ => self.sequenced(peer, header, payload, false),
        }
    }

    /// A notice from the other end of a route of several lanes.
    fn lane_notice(&mut self, peer: Rank, header: &[u8]) {
        let sequenced = self
            .shared
            .routes
            .get(peer as usize)
            .is_some_and(|r| r.sequenced && r.failed.is_none());
        if !sequenced {
            // A route of one lane has nothing to replay; a failed one is
            // over.
            return;
        }
        match LaneNotice::parse(header) {
            Ok(LaneNotice::Delivered { next }) => {
                self.shared.routes[peer as usize]
                    .lanes
                    .store
                    .delivered(next);
            }
            Ok(LaneNotice::LaneLost {
                next,
                component,
                index,
            }) => self.shared.lane_state.events.push(LaneEvent::PeerLost {
                peer,
                next,
                component: component.to_owned(),
                index,
            }),
            Err(_) => self.fail_peer(peer, PeerFailure::Sequence("a malformed lane notice")),
        }
    }

    /// Runs the handler of `tag`.
    #[inline]
    pub(super) fn dispatch_now(&mut self, peer: Rank, tag: u8, header: &[u8], payload: &[u8]) {
        if self.panic.is_some() {
            return;
        }
        let Some(Some(handler)) = self.shared.handlers.get_mut(usize::from(tag)) else {
            self.shared.unhandled.note(peer, tag);
            return;
        };
        let msg = Incoming {
            peer,
            tag,
            header,
            payload,
        };
        // A panic must not unwind into the module's frames (it would abort
        // the process): keep it and resume once the module has returned.
        let replies = &mut self.shared.replies;
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| handler(&msg, replies))) {
            self.panic = Some(p);
        }
    }

    /// Notes that this module's connection to `peer` closed: whether no
    /// lane to it is left open (always, on a route of one module).
    fn last_lane_closed(&mut self, peer: Rank) -> bool {
        let Some(route) = self.shared.routes.get_mut(peer as usize) else {
            return true;
        };
        if !route.sequenced {
            return true;
        }
        let closed = &mut route.lanes.closed;
        if !closed.contains(&self.module) {
            closed.push(self.module);
        }
        if route.modules.iter().all(|m| closed.contains(m)) {
            return true;
        }
        // Later messages go over the lanes still open.
        route.modules.retain(|m| !closed.contains(m));
        false
    }

    pub(super) fn fail_peer(&mut self, peer: Rank, failure: PeerFailure) {
        lanes::forget(&mut self.shared.lane_state.reorder, peer);
        if mark_failed(
            &mut self.shared.routes,
            &mut self.shared.failure_epoch,
            peer,
            failure.clone(),
        ) {
            self.shared.failures.push((peer, failure));
        }
    }

    fn complete(&mut self, cookie: u64, status: Result<(), PluginError>) {
        let Some((id, module)) = self.shared.cookies.remove(&cookie) else {
            return;
        };
        if status.is_ok() && self.shared.lane_state.rdma_pieces.is_empty() {
            return complete_part(
                &mut self.shared.outstanding,
                &mut self.shared.completions,
                id,
                Ok(()),
            );
        }
        self.complete_on_lanes(cookie, id, module, status);
    }

    /// [`complete`](Self::complete) of a failed operation, or with pieces
    /// of striped RDMA in flight: a piece whose lane was lost goes again
    /// on another, and a send whose copy goes again does not fail.
    #[inline(never)]
    fn complete_on_lanes(
        &mut self,
        cookie: u64,
        id: SendId,
        module: usize,
        mut status: Result<(), PluginError>,
    ) {
        if !self.shared.lane_state.rdma_pieces.is_empty() {
            if let Some(piece) = self.shared.lane_state.rdma_pieces.remove(&cookie) {
                if let Err(e) = &status {
                    let peer = piece.peer;
                    let live = self
                        .shared
                        .routes
                        .get(peer as usize)
                        .is_some_and(|r| r.failed.is_none());
                    if live && replay::lane_refused(e.kind) {
                        let error = SendError::Module(e.clone());
                        self.shared.lane_state.events.push(LaneEvent::RetryPiece {
                            piece,
                            lost: module,
                            error,
                        });
                        return;
                    }
                }
            }
        }
        if status.is_err() && replay::replaces(&self.shared.routes, id) {
            // A copy goes again on another lane.
            status = Ok(());
        }
        complete_part(
            &mut self.shared.outstanding,
            &mut self.shared.completions,
            id,
            status.map_err(SendError::Module),
        );
    }
}

impl BtlEventSink for Sink<'_> {
    fn deliver(&mut self, peer: Rank, tag: u8, header: RSlice<'_, u8>, payload: RSlice<'_, u8>) {
        let (header, payload) = (header.as_slice(), payload.as_slice());
        if tag == TAG_FRAG_FIRST || tag == TAG_FRAG_NEXT {
            return self.reassemble(self.module, peer, tag, header, payload);
        }
        self.dispatch(peer, tag, header, payload);
    }

    fn send_complete(&mut self, cookie: u64, status: RResult<(), PluginError>) {
        self.complete(cookie, status.into_result());
    }

    fn rdma_complete(&mut self, cookie: u64, status: RResult<(), PluginError>) {
        self.complete(cookie, status.into_result());
    }

    fn peer_failed(&mut self, peer: Rank, error: PluginError) {
        // A lane the peer closed in order carried all it sent on it: with
        // others open, they may still carry more. A lane that broke while
        // others are open is lost alone, and what it may have taken goes
        // again on the others. Anything else fails the peer at once.
        if error.kind == ErrorKind::CONNECTION_CLOSED && !self.last_lane_closed(peer) {
            return;
        }
        if replay::loses_lane(error.kind) && !self.last_lane_closed(peer) {
            self.shared.lane_state.events.push(LaneEvent::Lost {
                peer,
                module: self.module,
                error,
            });
            return;
        }
        self.fail_peer(peer, PeerFailure::Transport(error));
    }
}

/// What the sinks of the messenger's modules update: one borrow, so that
/// a poll hands each module its sink without gathering the parts.
pub(super) struct Shared {
    pub(super) handlers: Vec<Option<Handler>>,
    pub(super) reassembly: HashMap<(usize, Rank), Reassembly>,
    /// cookie -> (key into `outstanding`, module the operation is on)
    pub(super) cookies: HashMap<u64, (SendId, usize), IdHash>,
    pub(super) outstanding: HashMap<SendId, Outstanding, IdHash>,
    pub(super) completions: Completions,
    pub(super) failures: Vec<(Rank, PeerFailure)>,
    pub(super) routes: Vec<Route>,
    pub(super) replies: Replies,
    /// Counts peer failures recorded, so that layers above notice new ones
    /// without taking them from the user.
    pub(super) failure_epoch: u64,
    /// What the lanes of sequenced routes keep between calls.
    pub(super) lane_state: replay::LaneState,
    /// Messages dropped for want of a handler.
    pub(super) unhandled: Unhandled,
}

/// Messages that arrived for a tag with no handler installed: dropped,
/// counted, and reported by the messenger after the `progress` that saw
/// them, as UCX warns of an active message with no callback.
#[derive(Debug, Default)]
pub(super) struct Unhandled {
    /// Every one so far.
    pub(super) count: u64,
    /// The count at which the log is told next: reports thin out as the
    /// drops go on (1, 2, 4, ...), so that a flood does not flood the log.
    pub(super) next_report: u64,
    /// The sender and tag of the latest.
    pub(super) last: Option<(Rank, u8)>,
}

impl Messenger {
    /// Tells the log of the messages dropped for want of a handler so
    /// far; the next report waits for twice as many.
    #[cold]
    pub(super) fn report_unhandled(&mut self) {
        let u = &mut self.shared.unhandled;
        u.next_report = u.count.saturating_mul(2);
        let (peer, tag) = u.last.unwrap_or_default();
        self.log.log(
            LogLevel::Warn,
            &format!(
                "{} message(s) dropped: no handler installed for their tag (the latest: \
                 tag {tag} from rank {peer}); install handlers before peers send to them",
                u.count
            ),
        );
    }
}

impl Unhandled {
    #[cold]
    fn note(&mut self, peer: Rank, tag: u8) {
        self.count += 1;
        self.last = Some((peer, tag));
    }

    /// Whether the log should hear of the drops so far.
    #[inline]
    pub(super) fn due(&self) -> bool {
        self.count > 0 && self.count >= self.next_report
    }
}

impl Shared {
    /// Nothing yet, for a job of `peers` ranks (tests that drive a sink
    /// by hand).
    #[cfg(test)]
    pub(super) fn new(peers: usize) -> Self {
        let mut handlers = Vec::new();
        handlers.resize_with(256, || None);
        Shared {
            handlers,
            reassembly: HashMap::new(),
            cookies: HashMap::default(),
            outstanding: HashMap::default(),
            completions: Completions::default(),
            failures: Vec::new(),
            routes: (0..peers).map(|_| Route::default()).collect(),
            replies: Replies::default(),
            failure_epoch: 0,
            lane_state: replay::LaneState::new(peers, 1 << 20),
            unhandled: Unhandled::default(),
        }
    }

    /// The sink of module `module`.
    #[inline]
    pub(super) fn sink(&mut self, module: usize) -> Sink<'_> {
        Sink {
            module,
            shared: self,
            panic: None,
        }
    }
}
