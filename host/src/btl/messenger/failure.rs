//! Why a peer failed: [`PeerFailure`], what [`Messenger::take_failures`]
//! reports and [`SendError::PeerFailed`] holds, and its [`FailureKind`].
//!
//! A transport reports a failed peer with a [`PluginError`], whose
//! [`ErrorKind`] is the only part a host may act on (the message is for
//! people). The failure keeps that error whole, as its
//! [`source`](std::error::Error::source), and classifies it.
//!
//! [`Messenger::take_failures`]: super::Messenger::take_failures
//! [`SendError::PeerFailed`]: super::SendError::PeerFailed

use std::fmt;

use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::wire::am::ReassemblyError;

/// How a peer failed, as far as this process can tell.
///
/// Transports say which with the peer-failure kinds of the plugin
/// interface ([`ErrorKind::CONNECTION_CLOSED`],
/// [`ErrorKind::PROCESS_ENDED`], [`ErrorKind::TIMED_OUT`],
/// [`ErrorKind::AUTHENTICATION`]); a plain [`ErrorKind::PEER_FAILED`],
/// or a code this build does not know, is [`Other`](Self::Other).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// Its connection closed or broke.
    ConnectionClosed,
    /// Its process ended.
    ProcessEnded,
    /// It did not answer within a time limit.
    TimedOut,
    /// It sent bytes that break a protocol: a transport's frames
    /// ([`ErrorKind::MALFORMED`]) or the messenger's fragments.
    ProtocolViolation,
    /// It could not prove that it belongs to the job.
    Authentication,
    /// No transport reaches it any more: the one used cannot
    /// ([`ErrorKind::UNREACHABLE`]), or the last module that did was closed.
    Unreachable,
    /// The transport did not say how; the source's message may.
    Other,
}

impl FailureKind {
    /// The kind of a peer failure a transport reported with `kind`.
    pub fn from_transport(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::MALFORMED => Self::ProtocolViolation,
            ErrorKind::UNREACHABLE => Self::Unreachable,
            ErrorKind::CONNECTION_CLOSED | ErrorKind::CONNECTION_RESET => Self::ConnectionClosed,
            ErrorKind::PROCESS_ENDED => Self::ProcessEnded,
            ErrorKind::TIMED_OUT => Self::TimedOut,
            ErrorKind::AUTHENTICATION => Self::Authentication,
            _ => Self::Other,
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ConnectionClosed => "connection closed",
            Self::ProcessEnded => "process ended",
            Self::TimedOut => "timed out",
            Self::ProtocolViolation => "protocol violation",
            Self::Authentication => "authentication failed",
            Self::Unreachable => "unreachable",
            Self::Other => "unspecified",
        })
    }
}

/// Why the messenger gave up on a peer. Once failed, a peer stays failed:
/// sends to it answer [`SendError::PeerFailed`](super::SendError::PeerFailed)
/// with this value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerFailure {
    /// The transport reported the peer failed.
    Transport(PluginError),
    /// Its fragments did not reassemble into a message.
    Fragments(ReassemblyError),
    /// A fragmented send to it failed midway, so it holds part of a
    /// message and the stream to it cannot go on.
    FragmentedSend(PluginError),
    /// Its messages over several modules broke their order (a number
    /// delivered twice, too many early, a malformed sequence header).
    Sequence(&'static str),
    /// One of several modules carrying its ordered messages lost its lane
    /// (closed after an error, or its connection broke), and a message
    /// that lane may have taken has no kept copy to send again
    /// (`bml_replay_size`), so the order cannot go on.
    LaneLost {
        /// Component of the closed module.
        component: String,
        /// Its index within the component.
        index: usize,
        /// The error that closed it.
        error: PluginError,
    },
    /// The last module that reached it was closed after an error.
    NoTransport {
        /// Component of the closed module.
        component: String,
        /// Its index within the component.
        index: usize,
        /// The error that closed it.
        error: PluginError,
    },
}

impl PeerFailure {
    /// How the peer failed.
    pub fn kind(&self) -> FailureKind {
        match self {
            Self::Transport(e) | Self::FragmentedSend(e) => FailureKind::from_transport(e.kind),
            Self::Fragments(_) | Self::Sequence(_) => FailureKind::ProtocolViolation,
            Self::LaneLost { error, .. } => FailureKind::from_transport(error.kind),
            Self::NoTransport { .. } => FailureKind::Unreachable,
        }
    }

    /// The transport's error behind the failure, when a transport gave
    /// one.
    pub fn plugin_error(&self) -> Option<&PluginError> {
        match self {
            Self::Transport(e)
            | Self::FragmentedSend(e)
            | Self::NoTransport { error: e, .. }
            | Self::LaneLost { error: e, .. } => Some(e),
            Self::Fragments(_) | Self::Sequence(_) => None,
        }
    }
}

impl fmt::Display for PeerFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Transport(e) => e.fmt(f),
            Self::Fragments(e) => write!(f, "protocol error in its fragments: {e}"),
            Self::FragmentedSend(e) => write!(f, "fragmented send failed midway: {e}"),
            Self::Sequence(why) => write!(f, "protocol error in its sequenced messages: {why}"),
            Self::LaneLost {
                component,
                index,
                error,
            } => write!(
                f,
                "its lane over btl {component}[{index}] was lost, with ordered messages no \
                 kept copy replaces: {error}"
            ),
            Self::NoTransport {
                component,
                index,
                error,
            } => write!(
                f,
                "no transport reaches it since btl {component}[{index}] was closed: {error}"
            ),
        }
    }
}

impl std::error::Error for PeerFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Fragments(e) => Some(e),
            _ => self
                .plugin_error()
                .map(|e| e as &(dyn std::error::Error + 'static)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use abi_stable::std_types::RSlice;
    use fireopal_abi::btl::BtlEventSink;

    use super::super::sink::Shared;
    use super::super::{SendError, TAG_FRAG_NEXT};
    use super::*;

    #[test]
    fn transport_kinds_map_to_failure_kinds() {
        let cases = [
            (ErrorKind::MALFORMED, FailureKind::ProtocolViolation),
            (ErrorKind::UNREACHABLE, FailureKind::Unreachable),
            (ErrorKind::CONNECTION_CLOSED, FailureKind::ConnectionClosed),
            (ErrorKind::CONNECTION_RESET, FailureKind::ConnectionClosed),
            (ErrorKind::PROCESS_ENDED, FailureKind::ProcessEnded),
            (ErrorKind::TIMED_OUT, FailureKind::TimedOut),
            (ErrorKind::AUTHENTICATION, FailureKind::Authentication),
            (ErrorKind::PEER_FAILED, FailureKind::Other),
            (ErrorKind::IO, FailureKind::Other),
            (ErrorKind(999), FailureKind::Other),
        ];
        for (kind, want) in cases {
            assert_eq!(FailureKind::from_transport(kind), want, "{kind}");
            let failure = PeerFailure::Transport(PluginError::new(kind, "x"));
            assert_eq!(failure.kind(), want, "{kind}");
        }
        let reassembly = PeerFailure::Fragments(ReassemblyError::Orphan);
        assert_eq!(reassembly.kind(), FailureKind::ProtocolViolation);
        let closed = PeerFailure::NoTransport {
            component: "tcp".into(),
            index: 0,
            error: PluginError::new(ErrorKind::IO, "epoll failed"),
        };
        assert_eq!(closed.kind(), FailureKind::Unreachable);
    }

    #[test]
    fn the_source_chain_reaches_the_plugin_error() {
        let error = PluginError::new(ErrorKind::PEER_FAILED, "rank 1 closed its connection");
        let failure = PeerFailure::Transport(error.clone());
        assert_eq!(failure.to_string(), error.to_string());
        let send = SendError::PeerFailed {
            peer: 1,
            failure: failure.clone(),
        };
        assert_eq!(
            send.to_string(),
            "rank 1 failed: peer failed: rank 1 closed its connection"
        );
        let first = send.source().and_then(|e| e.downcast_ref::<PeerFailure>());
        assert_eq!(first, Some(&failure));
        let second = first
            .and_then(|f| f.source())
            .and_then(|e| e.downcast_ref::<PluginError>());
        assert_eq!(second, Some(&error));
        let fragments = PeerFailure::Fragments(ReassemblyError::Overrun);
        assert!(fragments
            .source()
            .is_some_and(|e| e.is::<ReassemblyError>()));
        assert_eq!(fragments.plugin_error(), None);
    }

    /// What a module's `progress` reports reaches `take_failures` and the
    /// route with its kind, once per peer.
    #[test]
    fn the_sink_keeps_what_the_transport_and_the_fragments_said() {
        let mut parts = Shared::new(3);
        let mut sink = parts.sink(0);
        let bad_frame = PluginError::new(ErrorKind::MALFORMED, "rank 1 sent a bad frame");
        sink.peer_failed(1, bad_frame.clone());
        sink.peer_failed(1, PluginError::new(ErrorKind::PEER_FAILED, "later"));
        let empty = RSlice::from_slice(&[]);
        sink.deliver(2, TAG_FRAG_NEXT, empty, RSlice::from_slice(&[1, 2]));
        drop(sink);
        let (failures, routes) = (&parts.failures, &parts.routes);
        assert_eq!(
            *failures,
            [
                (1, PeerFailure::Transport(bad_frame.clone())),
                (2, PeerFailure::Fragments(ReassemblyError::Orphan)),
            ]
        );
        assert_eq!(failures[0].1.kind(), FailureKind::ProtocolViolation);
        assert_eq!(failures[1].1.kind(), FailureKind::ProtocolViolation);
        assert_eq!(
            routes[1].failed,
            Some(Box::new(PeerFailure::Transport(bad_frame)))
        );
        assert_eq!(routes[0].failed, None);
    }
}
