//! The error value that crosses the plugin boundary.
//!
//! One struct with an open-ended kind code rather than an enum, so that new
//! kinds can be added without changing the layout that abi_stable checks.

use abi_stable::std_types::RString;
use abi_stable::StableAbi;
use core::fmt;

/// What went wrong, as an extensible code.
///
/// Unknown codes from a newer plugin are shown as `kind <n>`.
#[repr(transparent)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorKind(pub u32);

impl ErrorKind {
    /// The plugin panicked; the message is the panic payload.
    pub const PANICKED: Self = Self(1);
    /// A previous call panicked, so the module refuses further work.
    pub const POISONED: Self = Self(2);
    /// The operation is not offered by this component (a normal answer).
    pub const UNSUPPORTED: Self = Self(3);
    /// An argument is out of range or malformed.
    pub const INVALID_ARGUMENT: Self = Self(4);
    /// The peer cannot be reached by this transport.
    pub const UNREACHABLE: Self = Self(5);
    /// The peer failed, for a reason none of the finer peer-failure kinds
    /// below names ([`Self::is_peer_failure`] lists them all).
    pub const PEER_FAILED: Self = Self(6);
    /// Out of memory, descriptors, queue slots or registrations.
    pub const RESOURCE_EXHAUSTED: Self = Self(7);
    /// An operating-system call failed.
    pub const IO: Self = Self(8);
    /// Bytes from a peer did not parse.
    pub const MALFORMED: Self = Self(9);
    /// The module was used before `init` or after it was closed.
    pub const NOT_READY: Self = Self(10);
    /// Anything else.
    pub const OTHER: Self = Self(11);
    /// The peer failed: it closed the connection in order, so everything
    /// it sent before the close arrived.
    pub const CONNECTION_CLOSED: Self = Self(12);
    /// The peer failed: its process exited.
    pub const PROCESS_ENDED: Self = Self(13);
    /// The peer failed: it did not answer within a limit (a handshake, an
    /// acknowledgement).
    pub const TIMED_OUT: Self = Self(14);
    /// The peer failed: it could not prove it belongs to the job.
    pub const AUTHENTICATION: Self = Self(15);
    /// The peer failed: the connection was reset or broke, so what was
    /// in flight on it either way may be lost. A host with other
    /// connections to the peer may send it again on those.
    pub const CONNECTION_RESET: Self = Self(16);

    /// Whether this kind reports a failed peer: [`Self::PEER_FAILED`] or
    /// one of the finer kinds a newer plugin may use instead. A host that
    /// meets a code it does not know treats it as `PEER_FAILED` only where
    /// a peer failure is reported.
    pub fn is_peer_failure(self) -> bool {
        matches!(
            self,
            Self::PEER_FAILED
                | Self::CONNECTION_CLOSED
                | Self::CONNECTION_RESET
                | Self::PROCESS_ENDED
                | Self::TIMED_OUT
                | Self::AUTHENTICATION
        )
    }

    /// Short lowercase name of the kind.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::PANICKED => "panicked",
            Self::POISONED => "poisoned",
            Self::UNSUPPORTED => "unsupported",
            Self::INVALID_ARGUMENT => "invalid argument",
            Self::UNREACHABLE => "unreachable",
            Self::PEER_FAILED => "peer failed",
            Self::RESOURCE_EXHAUSTED => "resource exhausted",
            Self::IO => "i/o error",
            Self::MALFORMED => "malformed data",
            Self::NOT_READY => "not ready",
            Self::OTHER => "error",
            Self::CONNECTION_CLOSED => "connection closed",
            Self::PROCESS_ENDED => "process ended",
            Self::TIMED_OUT => "timed out",
            Self::AUTHENTICATION => "authentication failed",
            Self::CONNECTION_RESET => "connection reset",
            _ => return None,
        })
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "kind {}", self.0),
        }
    }
}

/// An error returned by a plugin entry point.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct PluginError {
    /// Category, for the host to act on (retry, drop the peer, give up).
    pub kind: ErrorKind,
    /// Human-readable detail.
    pub message: RString,
}

impl PluginError {
    /// Builds an error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: RString::from(message.into()),
        }
    }

    /// Shorthand for an [`ErrorKind::UNSUPPORTED`] error.
    pub fn unsupported(what: &str) -> Self {
        Self::new(ErrorKind::UNSUPPORTED, format!("{what} is not supported"))
    }

    /// Shorthand for an [`ErrorKind::INVALID_ARGUMENT`] error.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::INVALID_ARGUMENT, message)
    }
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.kind)
        } else {
            write!(f, "{}: {}", self.kind, self.message)
        }
    }
}

impl std::error::Error for PluginError {}
