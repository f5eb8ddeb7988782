//! The handle a lookup returns: [`Registration`], one counted reference to a
//! cached registration.
//!
//! This module owns the handle's memory-safety argument, the only unsafe
//! code of the cache. A `Registration` holds a plain pointer to its entry
//! rather than an `Arc`, so that a hit does not have to touch the entry at
//! all (it only adds to the count in the entry's home slot). The pointer
//! stays valid because every live `Registration` adds one to the entry's
//! reference count, and:
//!
//! - while the entry is in the index, the index holds `Arc`s to it, and it
//!   leaves the index only by eviction (which takes idle entries only, under
//!   the write lock, so not while a count is held), or by invalidation,
//!   merging or the cache's drop, which hand the home slot's `Arc` to the
//!   users when the count is not zero;
//! - once out of the index, no new reference can be taken, and the put that
//!   brings the count to zero deregisters the entry and turns that handed-over
//!   `Arc` back into an owned one, dropping it.
#![allow(unsafe_code)]

use alloc::sync::Arc;
use core::fmt;
use core::marker::PhantomData;
use core::ptr::NonNull;

use super::{Access, Entry, Region, RegistrationBackend, TransportId};

/// What giving back a reference left to do.
pub(super) enum Released {
    /// Nothing more.
    Done,
    /// It was the last reference of an entry that had left the index: the
    /// entry was deregistered and the caller owns the users' `Arc`.
    Last,
}

/// A reference to a cached registration, returned by
/// [`RegCache::get`](super::RegCache::get).
///
/// Hand it back with [`RegCache::put`](super::RegCache::put); dropping it
/// does the same. While it is held the registration is never deregistered,
/// even if its memory is invalidated (then it is deregistered when the last
/// reference goes).
#[must_use = "dropping a registration releases it at once"]
pub struct Registration<B: RegistrationBackend> {
    entry: NonNull<Entry<B>>,
    /// Behaves as a shared owner of the entry.
    _owns: PhantomData<Arc<Entry<B>>>,
}

// SAFETY: a `Registration` is a shared reference-counted handle to an
// `Entry`, like an `Arc<Entry<B>>`, which is `Send` and `Sync` exactly when
// the entry is both; the entry holds `B::Handle` and an `Arc` of the cache's
// shared state (which holds `B`), so these bounds are the same.
unsafe impl<B> Send for Registration<B>
where
    B: RegistrationBackend + Send + Sync,
    B::Handle: Send + Sync,
{
}

// SAFETY: as for `Send`: the handle gives out only `&` access to the entry.
unsafe impl<B> Sync for Registration<B>
where
    B: RegistrationBackend + Send + Sync,
    B::Handle: Send + Sync,
{
}

impl<B: RegistrationBackend> Registration<B> {
    /// The handle for a reference the caller has just added to `entry`'s
    /// count.
    pub(super) fn new(entry: &Arc<Entry<B>>) -> Self {
        Self {
            entry: NonNull::from(&**entry),
            _owns: PhantomData,
        }
    }

    fn entry(&self) -> &Entry<B> {
        // SAFETY: the reference this handle holds keeps the entry alive (see
        // the module documentation) until `drop` gives it back.
        unsafe { self.entry.as_ref() }
    }

    /// The registered pages (they cover the requested range).
    pub fn region(&self) -> Region {
        self.entry().region
    }

    /// The transport that made this registration.
    pub fn transport(&self) -> TransportId {
        self.entry().transport
    }

    /// The rights it was registered with (at least those requested).
    pub fn access(&self) -> Access {
        self.entry().access
    }

    /// The backend's handle (keys, mapping...).
    pub fn handle(&self) -> &B::Handle {
        &self.entry().handle
    }

    /// Unique id of the registration within its cache: two `get`s that
    /// return the same registration return the same id.
    pub fn id(&self) -> u64 {
        self.entry().id
    }
}

impl<B: RegistrationBackend> Drop for Registration<B> {
    fn drop(&mut self) {
        let entry = self.entry();
        if let Released::Last = entry.shared.release(entry) {
            // SAFETY: the entry left the index with references held, so its
            // home slot's `Arc` was turned into a raw pointer for its users
            // (`Arc::into_raw` of an `Arc<Entry<B>>`, whose address is the
            // entry's); this put brought the count to zero, so it alone
            // takes that `Arc` back, once, and nothing uses the entry
            // through this handle afterwards.
            drop(unsafe { Arc::from_raw(self.entry.as_ptr().cast_const()) });
        }
    }
}

impl<B: RegistrationBackend> fmt::Debug for Registration<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entry = self.entry();
        f.debug_struct("Registration")
            .field("id", &entry.id)
            .field("region", &entry.region)
            .field("transport", &entry.transport)
            .field("access", &entry.access)
            .finish_non_exhaustive()
    }
}
