//! The errors of the point-to-point layer.

use std::fmt;
use std::time::Duration;

use fireopal_abi::btl::Rank;
use fireopal_core::p2p::ArrivalError;
use fireopal_core::wire::p2p::Malformed;

use super::Status;
use crate::btl::{PeerFailure, ProgressError, SendError};

/// Why a point-to-point call or request failed.
///
/// The errors of the layers below are boxed: every request's result and
/// every `waitall` answer carries this type, so it stays four words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum P2pError {
    /// The message was longer than the receive buffer: the bytes that fit
    /// were delivered (`status.count` of them), the rest dropped.
    Truncated {
        /// What was received.
        status: Status,
        /// The length the sender sent.
        sent: u64,
    },
    /// The peer failed; the request can never complete.
    PeerFailed {
        /// The peer's world rank.
        peer: Rank,
        /// How it failed.
        failure: Box<PeerFailure>,
    },
    /// The messenger refused or failed an operation.
    Send(Box<SendError>),
    /// The receiver could not read a rendezvous message from the sender's
    /// memory (the transport's `get` failed).
    RemoteRead {
        /// The sender's world rank.
        peer: Rank,
        /// The transport's error.
        error: Box<SendError>,
    },
    /// The receiver reported that it could not read this send's data.
    ReadRefused {
        /// The receiver's world rank.
        peer: Rank,
    },
    /// The sender could not write its part of a message the receiver
    /// split between them.
    WriteRefused {
        /// The sender's world rank.
        peer: Rank,
    },
    /// A rank outside the communicator.
    NoSuchRank {
        /// The rank given.
        rank: u32,
        /// The communicator's size.
        size: u32,
    },
    /// A tag below 0 (only receives take [`Tag::Any`](super::Tag::Any)).
    InvalidTag(i32),
    /// The communicator was freed.
    FreedCommunicator,
    /// A group given to [`P2p::create`](super::P2p::create) holds a
    /// process outside the communicator.
    NotASubgroup,
    /// Every context id is in use on some member.
    NoContextId,
    /// A member answered a communicator-creating call with data this one
    /// cannot read (the ranks did not make the same calls).
    Collective(&'static str),
    /// The sender of a rendezvous gave it up (its blocking send stalled
    /// and returned) before sending the data this receive asked for.
    SendGivenUp {
        /// The sender.
        peer: Rank,
    },
    /// Nothing arrived or completed for the stall limit
    /// (`p2p_stall_limit`) while waiting.
    Stalled {
        /// The limit.
        limit: Duration,
    },
    /// The messenger's `progress` failed.
    Progress(Box<ProgressError>),
    /// A peer broke the point-to-point protocol; it is no longer heard,
    /// and its requests fail with this.
    Protocol {
        /// The peer.
        peer: Rank,
        /// What it did.
        violation: Violation,
    },
}

/// How a peer broke the point-to-point protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A message did not parse.
    Malformed(Malformed),
    /// A message named a source rank that is not the process it came
    /// from.
    WrongSource(u32),
    /// A message's sequence number was refused by matching.
    Sequence(ArrivalError),
    /// A message named a request this process does not have with that
    /// peer.
    UnknownRequest(u64),
    /// A data fragment lies outside its message.
    DataOutOfRange(u64),
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed(e) => write!(f, "{e}"),
            Self::WrongSource(s) => write!(f, "a message claims to come from rank {s}"),
            Self::Sequence(e) => write!(f, "{e}"),
            Self::UnknownRequest(r) => write!(f, "a message names request {r}, not its own"),
            Self::DataOutOfRange(r) => write!(f, "data for request {r} lies outside its message"),
        }
    }
}

impl std::error::Error for Violation {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Malformed(e) => Some(e),
            Self::Sequence(e) => Some(e),
            _ => None,
        }
    }
}

impl fmt::Display for P2pError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { status, sent } => write!(
                f,
                "message of {sent} bytes from rank {} (tag {}) truncated to the receive buffer's {}",
                status.source, status.tag, status.count
            ),
            Self::PeerFailed { peer, failure } => write!(f, "rank {peer} failed: {failure}"),
            Self::Send(e) => write!(f, "{e}"),
            Self::RemoteRead { peer, error } => {
                write!(f, "reading the message from rank {peer}: {error}")
            }
            Self::ReadRefused { peer } => write!(f, "rank {peer} could not read the message"),
            Self::WriteRefused { peer } => {
                write!(f, "rank {peer} could not write its part of the message")
            }
            Self::NoSuchRank { rank, size } => {
                write!(f, "rank {rank} is not in a communicator of {size}")
            }
            Self::InvalidTag(t) => write!(f, "tag {t} is negative"),
            Self::FreedCommunicator => f.write_str("the communicator was freed"),
            Self::NotASubgroup => f.write_str("the group is not a subgroup of the communicator"),
            Self::NoContextId => f.write_str("no context id is free on every member"),
            Self::Collective(what) => write!(f, "collective call mismatch: {what}"),
            Self::SendGivenUp { peer } => write!(
                f,
                "rank {peer} gave up the send (it stalled) before its data was sent"
            ),
            Self::Stalled { limit } => write!(
                f,
                "nothing arrived or completed for {:.1} s",
                limit.as_secs_f64()
            ),
            Self::Progress(e) => write!(f, "progress: {e}"),
            Self::Protocol { peer, violation } => {
                write!(f, "rank {peer} broke the point-to-point protocol: {violation}")
            }
        }
    }
}

impl std::error::Error for P2pError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::PeerFailed { failure, .. } => Some(&**failure),
            Self::Send(e) | Self::RemoteRead { error: e, .. } => Some(&**e),
            Self::Progress(e) => Some(&**e),
            Self::Protocol { violation, .. } => Some(violation),
            _ => None,
        }
    }
}

impl From<SendError> for P2pError {
    fn from(e: SendError) -> Self {
        match e {
            SendError::PeerFailed { peer, failure } => Self::PeerFailed {
                peer,
                failure: Box::new(failure),
            },
            e => Self::Send(Box::new(e)),
        }
    }
}
