//! The values the matching engine takes and answers: its limits, the
//! handle of a queued receive, matched and stored messages, counts.

use alloc::vec::Vec;

use super::Envelope;

/// Limits of a [`MatchEngine`](super::MatchEngine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchConfig {
    /// How far ahead of a stream's expected sequence number an arriving
    /// message may be and still be held: `1..=max_ahead` ahead is held,
    /// further is
    /// [`ArrivalError::TooFarAhead`](super::ArrivalError::TooFarAhead).
    /// `0` allows no reordering at all. Must be below `2^31`. Default:
    /// `65536`.
    pub max_ahead: u32,
    /// How many messages the whole engine holds out of order at most;
    /// one more is [`ArrivalError::HeldLimit`](super::ArrivalError::HeldLimit).
    /// Default: `65536`.
    pub max_held: usize,
}

impl Default for MatchConfig {
    fn default() -> Self {
        MatchConfig {
            max_ahead: 1 << 16,
            max_held: 1 << 16,
        }
    }
}

/// The handle of a queued receive, for
/// [`MatchEngine::cancel`](super::MatchEngine::cancel); it also comes back
/// with the receive's match. Never reused within an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PostId {
    pub(super) idx: usize,
    pub(super) stamp: u64,
}

impl PostId {
    /// The receive's place in posting order (every post of the engine
    /// counts, also those matched at once): smaller is earlier.
    pub fn order(&self) -> u64 {
        self.stamp
    }
}

/// A message with its envelope and the size the caller gave at arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<M> {
    /// The message's envelope.
    pub envelope: Envelope,
    /// The caller's message handle (owned, or borrowed from a probe).
    pub msg: M,
    /// The size given to [`MatchEngine::arrive`](super::MatchEngine::arrive).
    pub bytes: usize,
}

/// What [`MatchEngine::post`](super::MatchEngine::post) did with a receive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Posted<R, M> {
    /// It matched an unexpected message, now removed from the engine; the
    /// receive was not queued and comes back.
    Matched {
        /// The receive, handed back.
        req: R,
        /// The message it matched.
        message: Message<M>,
    },
    /// No unexpected message matched: the receive is queued.
    Queued(PostId),
    /// The receive names a source failed with
    /// [`fail_source`](super::MatchEngine::fail_source): it can never match and was
    /// not queued.
    SourceFailed(R),
}

/// What an in-order arrival led to, one per message handed to matching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<R, M> {
    /// The message matched a queued receive, now removed from the engine.
    Matched {
        /// The receive's handle from [`Posted::Queued`].
        post: PostId,
        /// The receive.
        req: R,
        /// The message.
        message: Message<M>,
    },
    /// No receive matched: the message is stored as unexpected until a
    /// receive or [`take`](super::MatchEngine::take) claims it.
    Stored {
        /// The message's envelope.
        envelope: Envelope,
        /// Its size, now counted in the unexpected bytes.
        bytes: usize,
    },
}

/// What [`MatchEngine::arrive`](super::MatchEngine::arrive) did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The message was the next of its stream: it and `released` held
    /// successors were matched or stored, one [`Event`] each, in sequence
    /// order.
    Delivered {
        /// How many held messages followed it.
        released: usize,
    },
    /// The message came ahead of its predecessors and is held; no event.
    Held,
}

/// What [`MatchEngine::fail_source`](super::MatchEngine::fail_source) took
/// out of the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFailure<R, M> {
    /// The queued receives that named the source, in posting order; the
    /// caller completes them with an error.
    pub receives: Vec<(PostId, R)>,
    /// The source's unexpected messages in arrival order, then its held
    /// messages in sequence order.
    pub messages: Vec<Message<M>>,
}

/// How much an engine, or one context of it, holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Queued receives.
    pub posted: usize,
    /// Unexpected messages stored.
    pub unexpected: usize,
    /// Sum of the `bytes` of the unexpected messages (saturated at
    /// `u64::MAX`).
    pub unexpected_bytes: u64,
    /// Messages held out of order.
    pub held: usize,
    /// Sum of the `bytes` of the held messages (saturated).
    pub held_bytes: u64,
}
