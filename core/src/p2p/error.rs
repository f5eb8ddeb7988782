//! Error values of the matching engine.

use core::fmt;

use super::{ContextId, Envelope};

/// Why [`RecvSpec::from_raw`](super::RecvSpec::from_raw) refused its
/// values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecError {
    /// A negative source other than [`ANY_SOURCE`](super::ANY_SOURCE).
    BadSource(i32),
    /// A negative tag other than [`ANY_TAG`](super::ANY_TAG).
    BadTag(i32),
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadSource(s) => write!(f, "source {s} is neither a rank nor ANY_SOURCE"),
            Self::BadTag(t) => write!(f, "tag {t} is neither a valid tag nor ANY_TAG"),
        }
    }
}

impl core::error::Error for SpecError {}

/// Why a [`MatchConfig`](super::MatchConfig) was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigError {
    /// `max_ahead` is `2^31` or more: a number that far ahead cannot be
    /// told from one already passed.
    WindowTooLarge(u32),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WindowTooLarge(w) => {
                write!(f, "a window of {w} sequence numbers is not below 2^31")
            }
        }
    }
}

impl core::error::Error for ConfigError {}

/// Why an arriving message was refused. Every case is a protocol error of
/// the sender or of the transports (or, for `HeldLimit`, more reordering
/// than the caller allows); the engine is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrivalError {
    /// The sequence number was already passed on this stream (it is behind
    /// the expected one in wrapping order): a duplicate or a replay.
    Stale {
        /// The number the message carried.
        seq: u32,
        /// The number the stream expects next.
        expected: u32,
    },
    /// The sequence number is more than
    /// [`max_ahead`](super::MatchConfig::max_ahead) ahead of the expected
    /// one.
    TooFarAhead {
        /// The number the message carried.
        seq: u32,
        /// The number the stream expects next.
        expected: u32,
    },
    /// A message with this sequence number is already held.
    DuplicateHeld {
        /// The number the message carried.
        seq: u32,
    },
    /// Holding the message would exceed
    /// [`max_held`](super::MatchConfig::max_held).
    HeldLimit,
    /// The source was failed with
    /// [`fail_source`](super::MatchEngine::fail_source) on this context.
    SourceFailed,
}

impl fmt::Display for ArrivalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stale { seq, expected } => {
                write!(
                    f,
                    "sequence number {seq} already passed (expected {expected})"
                )
            }
            Self::TooFarAhead { seq, expected } => {
                write!(f, "sequence number {seq} too far ahead of {expected}")
            }
            Self::DuplicateHeld { seq } => write!(f, "sequence number {seq} is already held"),
            Self::HeldLimit => f.write_str("too many messages held out of order"),
            Self::SourceFailed => f.write_str("the source has failed"),
        }
    }
}

impl core::error::Error for ArrivalError {}

/// A refused arrival: the reason, and the message handed back to the
/// caller, who still owns whatever it describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected<M> {
    /// Why the message was refused.
    pub error: ArrivalError,
    /// The message's envelope, as given.
    pub envelope: Envelope,
    /// The message, as given.
    pub msg: M,
}

impl<M> fmt::Display for Rejected<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.envelope;
        write!(
            f,
            "message from {} with tag {} on context {} refused: {}",
            e.source, e.tag, e.context.0, self.error
        )
    }
}

impl<M: fmt::Debug> core::error::Error for Rejected<M> {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Why [`retire_context`](super::MatchEngine::retire_context) refused: the
/// context still holds these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetireError {
    /// Receives, unexpected or held messages remain on the context.
    Busy {
        /// The context.
        context: ContextId,
        /// Posted receives still queued.
        posted: usize,
        /// Unexpected messages stored.
        unexpected: usize,
        /// Messages held out of order.
        held: usize,
    },
}

impl fmt::Display for RetireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Busy {
                context,
                posted,
                unexpected,
                held,
            } => write!(
                f,
                "context {} still has {posted} posted receives, {unexpected} unexpected \
                 and {held} held messages",
                context.0
            ),
        }
    }
}

impl core::error::Error for RetireError {}

/// Why [`set_next_seq`](super::MatchEngine::set_next_seq) refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamError {
    /// The stream holds messages numbered after its current expected
    /// number; moving it would strand them.
    Held {
        /// How many messages the stream holds.
        held: usize,
    },
    /// The source was failed on this context.
    SourceFailed,
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Held { held } => write!(f, "the stream holds {held} messages out of order"),
            Self::SourceFailed => f.write_str("the source has failed"),
        }
    }
}

impl core::error::Error for StreamError {}
