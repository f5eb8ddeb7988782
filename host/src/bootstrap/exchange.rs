//! [`Exchange`]: the key-value exchange a job starts with, as the messenger
//! and the point-to-point layer use it. [`Bootstrap`] (PMI-1, the
//! launcher, a singleton) is one implementation; a runtime with its own
//! (PMIx, a launcher of its own) implements the trait and hands it to
//! [`Messenger::init`](crate::btl::Messenger::init).

use std::error::Error;
use std::fmt;

use super::{Bootstrap, GetError, PutError, WireError};

/// A job-wide key-value store with a fence: each rank puts values under
/// its own keys, every rank fences, then any rank reads any rank's values.
///
/// Keys are short ASCII names (`[A-Za-z0-9_-]`, at most 32 bytes: what
/// PMI-1 can carry); values up to 64 KiB. An implementation that cannot
/// hold a value reports an error rather than truncating it.
pub trait Exchange {
    /// The error of every call.
    type Error: Error + Send + Sync + 'static;

    /// This process's rank in the job, below [`size`](Self::size).
    fn rank(&self) -> u32;

    /// Number of processes in the job.
    fn size(&self) -> u32;

    /// The ranks that share this process's node, in increasing order, this
    /// rank included.
    fn local_ranks(&self) -> &[u32];

    /// Publishes `value` under `key` for this rank; other ranks see it
    /// after the next [`fence`](Self::fence).
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), Self::Error>;

    /// Collective: every put made before it, on any rank, is visible to
    /// every get made after it.
    fn fence(&mut self) -> Result<(), Self::Error>;

    /// The value `rank` put under `key` before the last fence.
    fn get(&mut self, rank: u32, key: &str) -> Result<Vec<u8>, Self::Error>;
}

/// The errors of [`Bootstrap`]'s calls, as one type for [`Exchange`].
#[derive(Debug)]
pub enum BootstrapError {
    /// [`Bootstrap::put`] failed.
    Put(PutError),
    /// [`Bootstrap::fence`] failed.
    Fence(WireError),
    /// [`Bootstrap::get`] failed.
    Get(GetError),
}

impl fmt::Display for BootstrapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Put(e) => e.fmt(f),
            Self::Fence(e) => e.fmt(f),
            Self::Get(e) => e.fmt(f),
        }
    }
}

impl Error for BootstrapError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Self::Put(e) => Some(e),
            Self::Fence(e) => Some(e),
            Self::Get(e) => Some(e),
        }
    }
}

impl Exchange for Bootstrap {
    type Error = BootstrapError;

    fn rank(&self) -> u32 {
        Bootstrap::rank(self)
    }

    fn size(&self) -> u32 {
        Bootstrap::size(self)
    }

    fn local_ranks(&self) -> &[u32] {
        Bootstrap::local_ranks(self)
    }

    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), Self::Error> {
        Bootstrap::put(self, key, value).map_err(BootstrapError::Put)
    }

    fn fence(&mut self) -> Result<(), Self::Error> {
        Bootstrap::fence(self).map_err(BootstrapError::Fence)
    }

    fn get(&mut self, rank: u32, key: &str) -> Result<Vec<u8>, Self::Error> {
        Bootstrap::get(self, rank, key).map_err(BootstrapError::Get)
    }
}
