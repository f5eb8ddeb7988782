//! The transports of a cache: what one implements so that the cache can
//! register memory through it ([`RegistrationBackend`]), and the id that
//! names it within the cache ([`TransportId`]).

use super::{Access, Region};

/// Names a transport within one cache; returned by
/// [`RegCache::add_transport`](super::RegCache::add_transport).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TransportId(pub(super) u16);

impl TransportId {
    /// Position of the transport in the order it was added (0 for the
    /// first).
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// What a transport implements so that the cache can register memory
/// through it.
///
/// Both calls are made with no index or LRU lock held, so they may block,
/// allocate, or trigger a memory hook that calls
/// [`RegCache::invalidate`](super::RegCache::invalidate). `register` runs
/// under the cache's miss lock, so it must not call
/// [`RegCache::get`](super::RegCache::get) on the same cache.
pub trait RegistrationBackend {
    /// The transport's registration (a memory region with its keys, a
    /// mapping...). Transports read it through
    /// [`Registration::handle`](super::Registration::handle).
    type Handle;
    /// Why a registration failed.
    type Error;

    /// Registers `region` (whole pages) with at least `access`.
    fn register(&self, region: Region, access: Access) -> Result<Self::Handle, Self::Error>;

    /// Releases a registration made by [`register`](Self::register). Called
    /// exactly once per successful registration; the handle itself is
    /// dropped once nothing refers to the entry any more.
    fn deregister(&self, region: Region, handle: &Self::Handle);
}
