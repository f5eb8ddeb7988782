//! Why [`Messenger::init`](super::Messenger::init) failed: opening the
//! transports, or exchanging their addresses through the bootstrap.

use std::fmt;

use fireopal_abi::btl::Rank;
use fireopal_abi::PluginError;
use fireopal_core::wire::am::{EncodeError, ParseError};

/// Why the framework could not start.
#[derive(Debug)]
pub enum InitError {
    /// A selected component failed to open.
    Open(crate::plugin::OpenError),
    /// A module failed a setup call.
    Module {
        /// Component name.
        component: String,
        /// What it said.
        error: PluginError,
    },
    /// This process's modules do not fit in an address directory.
    Directory(EncodeError),
    /// The directory could not be published or read.
    Bootstrap(ExchangeError),
    /// A peer's directory did not parse.
    BadDirectory {
        /// The peer.
        peer: Rank,
        /// Why.
        error: ParseError,
    },
    /// The memory monitor asked for cannot run, or a registration cache
    /// parameter has a bad value.
    Memory(crate::memory::MonitorError),
    /// `bml_sendi` names no policy.
    BadSendiPolicy(String),
}

/// The error an [`Exchange`](crate::bootstrap::Exchange) implementation
/// reported, kept whole.
pub type ExchangeFailure = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The step of the address exchange that failed, with the exchange's
/// error.
#[derive(Debug)]
pub enum ExchangeError {
    /// Publishing this process's directory.
    Put(ExchangeFailure),
    /// The fence after every rank published.
    Fence(ExchangeFailure),
    /// Reading a peer's directory.
    Get {
        /// The peer.
        peer: Rank,
        /// The exchange's error.
        error: ExchangeFailure,
    },
}

impl fmt::Display for ExchangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Put(e) => write!(f, "publishing the directory: {e}"),
            Self::Fence(e) => write!(f, "fence after publishing: {e}"),
            Self::Get { peer, error } => write!(f, "reading rank {peer}'s directory: {error}"),
        }
    }
}

impl std::error::Error for ExchangeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Put(e) | Self::Fence(e) | Self::Get { error: e, .. } => Some(e.as_ref()),
        }
    }
}

impl fmt::Display for InitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Open(e) => write!(f, "opening transports: {e}"),
            Self::Module { component, error } => write!(f, "btl {component}: {error}"),
            Self::Directory(e) => write!(f, "building the address directory: {e}"),
            Self::Bootstrap(e) => write!(f, "exchanging transport addresses: {e}"),
            Self::BadDirectory { peer, error } => {
                write!(
                    f,
                    "rank {peer} published a malformed address directory: {error}"
                )
            }
            Self::Memory(e) => write!(f, "registration cache: {e}"),
            Self::BadSendiPolicy(v) => write!(f, "bml_sendi={v}: expected fast or fair"),
        }
    }
}

impl std::error::Error for InitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Open(e) => Some(e),
            Self::Module { error, .. } => Some(error),
            Self::Directory(e) => Some(e),
            Self::Bootstrap(e) => Some(e),
            Self::BadDirectory { error, .. } => Some(error),
            Self::Memory(e) => Some(e),
            Self::BadSendiPolicy(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;
    use crate::bootstrap::{GetError, WireError};

    #[test]
    fn every_variant_with_a_cause_returns_it_as_source() {
        let not_found = || GetError::NotFound {
            rank: 3,
            key: "btl-directory".into(),
        };
        let get = InitError::Bootstrap(ExchangeError::Get {
            peer: 3,
            error: Box::new(not_found()),
        });
        let exchange = get.source().and_then(|e| e.downcast_ref::<ExchangeError>());
        assert!(matches!(exchange, Some(ExchangeError::Get { peer: 3, .. })));
        let inner = exchange
            .and_then(|e| e.source())
            .and_then(|e| e.downcast_ref::<GetError>());
        assert!(matches!(inner, Some(GetError::NotFound { rank: 3, .. })));
        assert_eq!(
            get.to_string(),
            format!(
                "exchanging transport addresses: reading rank 3's directory: {}",
                not_found()
            )
        );
        let bad = InitError::BadDirectory {
            peer: 1,
            error: ParseError::Truncated,
        };
        assert_eq!(
            bad.source().and_then(|e| e.downcast_ref::<ParseError>()),
            Some(&ParseError::Truncated)
        );
        let big = InitError::Directory(EncodeError::TooManyEntries);
        assert!(big.source().is_some_and(|e| e.is::<EncodeError>()));
        let fence = InitError::Bootstrap(ExchangeError::Fence(Box::new(WireError::Finalized)));
        let wire = fence.source().and_then(|e| e.source());
        assert!(wire.is_some_and(|e| e.is::<WireError>()));
        let module = InitError::Module {
            component: "tcp".into(),
            error: PluginError::invalid("no interface"),
        };
        assert!(module.source().is_some_and(|e| e.is::<PluginError>()));
    }
}
