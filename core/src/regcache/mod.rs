//! Registration cache: memory registrations of several transports, looked up
//! by address range, reference counted, kept after use (leave-pinned) on an
//! LRU list, and removed at once when the memory goes away.
//!
//! This module owns the cache ([`RegCache`]), the interface a transport
//! implements to register memory ([`RegistrationBackend`]) and the typed
//! handle a lookup returns ([`Registration`]).
//!
//! # Entries and transports
//!
//! One cache serves every transport of a process. An entry is one
//! registration made by one transport's backend: a page-aligned address
//! range, the access rights it was registered with, the backend's handle,
//! and a reference count. Entries of different transports may cover the
//! same memory; a lookup names its transport ([`TransportId`]) and only
//! sees that transport's entries. An entry belongs to exactly one
//! transport because a registration is a transport's own object (a verbs
//! memory region with its keys, a mapping of a peer's segment): it cannot
//! be used by, or released through, another transport. What the transports
//! share is everything around the entries: one index, one LRU list and one
//! set of limits, so that a memory monitor calls one
//! [`invalidate`](RegCache::invalidate) for all of them, and pinned memory
//! is bounded for the process rather than per transport.
//!
//! # Lookup
//!
//! [`get`](RegCache::get)`(addr, len, access, transport)` returns an entry
//! of that transport that covers the whole range `[addr, addr + len)` with
//! at least `access` (a hit), or else registers a new one (a miss). A hit
//! never registers anything. A new registration is rounded out to whole
//! pages: its start is `addr` rounded down to a multiple of the page size,
//! its end `addr + len` rounded up to one. The page size is
//! [`RegCacheConfig::page_size`], 4096 by default.
//!
//! # Merging
//!
//! On a miss, the cache widens the new registration over *idle* (reference
//! count zero) entries of the same transport with exactly the same access
//! that overlap the rounded range or touch it end to end, repeatedly, so
//! that a chain of neighbours becomes one registration; the idle entries it
//! covers (also when it did not grow) are swallowed: taken out of the index
//! and deregistered. Entries in use, of another transport or
//! with other access are never merged (merging them would widen the rights
//! on memory nobody asked for, or free something in use). If the backend
//! refuses the widened range, the cache retries with the plain rounded
//! range; if it refuses that too, `get` returns the backend's error and the
//! cache is as it was. Merging can be turned off ([`RegCacheConfig::merge`]).
//!
//! # References, idle registrations and limits
//!
//! Each [`Registration`] holds one reference; [`put`](RegCache::put) (or
//! dropping the registration) gives it back. While a reference is held the
//! registration is never deregistered, even if its memory is invalidated.
//! At zero references the entry stays registered and goes to the back of
//! the LRU list. Whenever the cache is over one of its limits (number of
//! live registrations, bytes registered:
//! [`set_limits`](RegCache::set_limits)), it deregisters idle entries from
//! the front of the list until it is under them again or no idle entry is
//! left. Entries in use are never evicted, so the cache can stay over its
//! limits while they are held. The limits count every registration not yet
//! deregistered, including invalidated ones still in use, since those pin
//! memory too.
//!
//! # Invalidation
//!
//! [`invalidate`](RegCache::invalidate)`(addr, len)` is called by a memory
//! monitor (from a memory hook) or by the owner of the memory when it goes
//! away. Under one hold of the index lock it unlinks every entry touching
//! the range, so that none of them is found again; idle ones are
//! deregistered right after, in-use ones at their last put. On that path
//! nothing allocates or frees memory and no backend is called while the
//! lock is held, so a memory hook that fires inside an allocation, or
//! inside a backend call, can call `invalidate` without deadlocking. The
//! same holds on every other path: the lock is never held across an
//! allocation, a free or a backend call.
//!
//! A registration made while an invalidation of the same memory ran is
//! dropped and made again (the pages it describes may be gone), a few times
//! at most: if invalidations keep hitting the range, `get` returns
//! [`GetError::InvalidatedDuringRegistration`].
//!
//! # Concurrency and costs
//!
//! Every method takes `&self`. The index sits behind a `spin` read-write
//! lock, and:
//!
//! - a hit takes only the read lock and one atomic add, and allocates
//!   nothing, so lookups do not wait for each other. A lookup whose first
//!   byte lies in the first page of a covering registration (the common
//!   case: a buffer looked up again, registered rounded down from its own
//!   start) is answered from one slot of a hash table; other lookups
//!   (inside a registration that starts on an earlier page, such as a
//!   merged one) try a hint, then descend an interval tree, `O(log n)`;
//! - a put takes the read lock and one atomic subtract; the last put of a
//!   registration also takes the LRU list's lock, `O(1)`;
//! - misses are serialised by a miss lock, held while the backend
//!   registers, so that two threads never register the same range twice;
//!   they take the write lock only to insert;
//! - writers (inserts, invalidations, evictions) hold off new readers, so a
//!   stream of hits cannot starve an invalidation;
//! - [`find_overlapping`](RegCache::find_overlapping) visits
//!   `O(log n + k)` entries for `k` answers; [`stats`](RegCache::stats)
//!   walks every cached registration, `O(n)`, under the read lock.
//!
//! # Example
//!
//! ```
//! use core::convert::Infallible;
//! use fireopal_core::regcache::{Access, RegCache, Region, RegistrationBackend};
//!
//! /// A transport whose "registration" is just the region itself.
//! struct Loopback;
//!
//! impl RegistrationBackend for Loopback {
//!     type Handle = Region;
//!     type Error = Infallible;
//!     fn register(&self, region: Region, _access: Access) -> Result<Region, Infallible> {
//!         Ok(region)
//!     }
//!     fn deregister(&self, _region: Region, _handle: &Region) {}
//! }
//!
//! let cache = RegCache::default();
//! let tcp = cache.add_transport(Loopback).unwrap();
//! let reg = cache.get(0x10_0010, 100, Access::REMOTE_READ, tcp).unwrap();
//! assert_eq!(reg.region().base(), 0x10_0000); // rounded to 4 KiB pages
//! let again = cache.get(0x10_0020, 8, Access::REMOTE_READ, tcp).unwrap();
//! assert_eq!(again.id(), reg.id()); // a hit on the same registration
//! cache.put(again);
//! cache.put(reg); // idle now, still cached
//! assert_eq!(cache.stats().live_count, 1);
//! cache.invalidate(0x10_0000, 4096); // the memory went away
//! assert_eq!(cache.stats().live_count, 0);
//! ```

// How it is built; each module documents its own part:
// - `index`: what the index lock guards (the interval tree, the home table,
//   lookup hints, recent invalidations) and the entries it holds;
// - `interval_tree`, `home` and `lru`: the tree, the hash table in front of
//   it, and the LRU list, as plain data structures;
// - `lookup`, `miss` and `release`: the hit path, the miss path (merging,
//   inserting, growing the index), and giving references back (the LRU
//   list, eviction, deregistration);
// - `registration`: the handle, and the argument that keeps its pointer
//   valid (the only unsafe code of the cache);
// - `region`, `transport` and `error`: the public value types.

mod error;
mod home;
mod index;
mod interval_tree;
mod lookup;
mod lru;
mod miss;
mod region;
mod registration;
mod release;
mod transport;

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use spin::{Mutex, RwLock, RwLockWriteGuard};

pub use error::{AddTransportError, ConfigError, GetError};
pub use region::{Access, Region};
pub use registration::Registration;
pub use transport::{RegistrationBackend, TransportId};

use home::HomeTable;
use index::{Entry, Index, RECENT_INVALIDATIONS};
use interval_tree::IntervalTree;
use lru::LruList;

/// Page size used when none is given.
pub const DEFAULT_PAGE_SIZE: usize = 4096;

/// Settings of a [`RegCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegCacheConfig {
    /// Granularity of registrations in bytes; a power of two.
    pub page_size: usize,
    /// Most live registrations before idle ones are evicted.
    pub max_count: usize,
    /// Most registered bytes before idle registrations are evicted.
    pub max_bytes: usize,
    /// Whether a miss may merge idle neighbours into the new registration.
    pub merge: bool,
}

impl Default for RegCacheConfig {
    fn default() -> Self {
        Self {
            page_size: DEFAULT_PAGE_SIZE,
            max_count: usize::MAX,
            max_bytes: usize::MAX,
            merge: true,
        }
    }
}

/// Counters of a cache, read by [`RegCache::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// `get` calls served by an existing registration.
    pub hits: u64,
    /// `get` calls that made a new registration.
    pub misses: u64,
    /// Idle registrations deregistered to get under the limits.
    pub evictions: u64,
    /// Registrations removed by `invalidate` (idle or in use).
    pub invalidations: u64,
    /// Idle registrations swallowed by a merged one.
    pub merges: u64,
    /// Registrations made and not yet deregistered, including in-use ones
    /// already invalidated.
    pub live_count: usize,
    /// Bytes of those registrations (overlapping ones counted each time).
    pub live_bytes: usize,
}

/// What [`RegCache::find_overlapping`] reports of one registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegistrationInfo {
    /// Unique id of the registration (the same as [`Registration::id`]).
    pub id: u64,
    /// Registered pages.
    pub region: Region,
    /// Transport that made it.
    pub transport: TransportId,
    /// Rights it was made with.
    pub access: Access,
    /// References held when it was looked at.
    pub refs: u32,
}

/// The LRU list: entries in the order of their last put. An entry is listed
/// at most once; a hit leaves it where it is (hits take no LRU lock), so the
/// list may hold entries in use (dropped from the list when met at its
/// front, listed again at their last put) and entries that left the index
/// (dropped when met at the front or by a sweep).
struct Lru<B: RegistrationBackend> {
    list: LruList<Arc<Entry<B>>>,
    /// Set when the cache is dropped; nothing is listed after that.
    closed: bool,
}

/// Keeps a lock word on a cache line of its own, so that the atomic adds of
/// readers do not slow down unrelated fields.
#[repr(align(128))]
struct Padded<T>(T);

impl<T> core::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The state shared by a [`RegCache`] and its entries.
struct Shared<B: RegistrationBackend> {
    index: Padded<RwLock<Index<B>>>,
    lru: Padded<Mutex<Lru<B>>>,
    miss_lock: Mutex<()>,
    transports: RwLock<Vec<Arc<B>>>,
    page_size: usize,
    page_shift: u32,
    merge: AtomicBool,
    max_count: AtomicUsize,
    max_bytes: AtomicUsize,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    invalidations: AtomicU64,
    merges: AtomicU64,
    live_count: AtomicUsize,
    live_bytes: AtomicUsize,
    next_id: AtomicU64,
}

/// The registration cache. See the [module documentation](self).
pub struct RegCache<B: RegistrationBackend> {
    shared: Arc<Shared<B>>,
}

impl<B: RegistrationBackend> fmt::Debug for RegCache<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegCache")
            .field("page_size", &self.shared.page_size)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<B: RegistrationBackend> Default for RegCache<B> {
    /// A cache with 4 KiB pages, no limits and merging on.
    fn default() -> Self {
        Self::with_valid_config(RegCacheConfig::default())
    }
}

impl<B: RegistrationBackend> RegCache<B> {
    /// A cache with these settings.
    pub fn new(config: RegCacheConfig) -> Result<Self, ConfigError> {
        if !config.page_size.is_power_of_two() {
            return Err(ConfigError::BadPageSize(config.page_size));
        }
        Ok(Self::with_valid_config(config))
    }

    fn with_valid_config(config: RegCacheConfig) -> Self {
        let shared = Shared {
            index: Padded(RwLock::new(Index {
                tree: IntervalTree::new(),
                invalidation_seq: 0,
                recent: [(0, 0); RECENT_INVALIDATIONS],
                retired_hits: 0,
                hints: Vec::new(),
                homes: HomeTable::new(config.page_size.trailing_zeros()),
            })),
            lru: Padded(Mutex::new(Lru {
                list: LruList::new(),
                closed: false,
            })),
            miss_lock: Mutex::new(()),
            transports: RwLock::new(Vec::new()),
            page_size: config.page_size,
            page_shift: config.page_size.trailing_zeros(),
            merge: AtomicBool::new(config.merge),
            max_count: AtomicUsize::new(config.max_count),
            max_bytes: AtomicUsize::new(config.max_bytes),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            invalidations: AtomicU64::new(0),
            merges: AtomicU64::new(0),
            live_count: AtomicUsize::new(0),
            live_bytes: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
        };
        Self {
            shared: Arc::new(shared),
        }
    }

    /// Page size of this cache.
    pub fn page_size(&self) -> usize {
        self.shared.page_size
    }

    /// Adds a transport; its registrations are made through `backend`.
    pub fn add_transport(&self, backend: B) -> Result<TransportId, AddTransportError> {
        let backend = Arc::new(backend);
        // The table is copied into storage allocated with no lock held: a
        // memory hook may read it (to deregister) from inside an allocation.
        loop {
            let len = self.shared.transports.read().len();
            let id = u16::try_from(len)
                .ok()
                .filter(|&id| id != u16::MAX)
                .ok_or(AddTransportError::TooMany)?;
            let mut table = Vec::with_capacity(len + 1);
            let old = {
                let mut transports = self.shared.transports.write();
                if transports.len() != len {
                    // Another transport was added meanwhile; start again.
                    None
                } else {
                    table.extend(transports.iter().cloned());
                    table.push(Arc::clone(&backend));
                    Some(core::mem::replace(&mut *transports, table))
                }
            };
            if let Some(old) = old {
                drop(old);
                return Ok(TransportId(id));
            }
        }
    }

    /// A registration of `transport` covering `[addr, addr + len)` with at
    /// least `access`, with one reference taken for the caller.
    ///
    /// A hit takes the index read lock and one atomic add, and allocates
    /// nothing. A miss registers the range rounded to pages (possibly merged
    /// with idle neighbours, see the [module documentation](self)) and may
    /// evict idle registrations if the cache is then over its limits.
    #[inline]
    pub fn get(
        &self,
        addr: usize,
        len: usize,
        access: Access,
        transport: TransportId,
    ) -> Result<Registration<B>, GetError<B::Error>> {
        if len == 0 {
            return Err(GetError::ZeroLength);
        }
        let last = addr.checked_add(len - 1).ok_or(GetError::AddressOverflow)?;
        if let Some(reg) = self.shared.lookup(addr, last, access, transport)? {
            return Ok(reg);
        }
        self.shared.miss(
            addr,
            last,
            access,
            transport,
            &mut |backend, region, access| backend.register(region, access),
        )
    }

    /// [`get`](Self::get), registering a miss through `register` instead of
    /// the transport's [`RegistrationBackend::register`].
    ///
    /// For an owner that holds what registers memory itself (a transport
    /// object it may only use through `&mut`): the closure can borrow it
    /// for the call, which a backend stored in the cache cannot. It is
    /// called under the miss lock, like `register`, possibly more than once
    /// (a widened range refused, an invalidation during the registration),
    /// and never on a hit. Deregistration still goes through the backend.
    #[inline]
    pub fn get_with<F>(
        &self,
        addr: usize,
        len: usize,
        access: Access,
        transport: TransportId,
        mut register: F,
    ) -> Result<Registration<B>, GetError<B::Error>>
    where
        F: FnMut(Region, Access) -> Result<B::Handle, B::Error>,
    {
        if len == 0 {
            return Err(GetError::ZeroLength);
        }
        let last = addr.checked_add(len - 1).ok_or(GetError::AddressOverflow)?;
        if let Some(reg) = self.shared.lookup(addr, last, access, transport)? {
            return Ok(reg);
        }
        self.shared
            .miss(addr, last, access, transport, &mut |_, region, access| {
                register(region, access)
            })
    }

    /// Gives back the reference `reg` holds (the same as dropping it).
    /// At zero references the registration stays cached as the most
    /// recently used idle one, unless the cache is over its limits.
    pub fn put(&self, reg: Registration<B>) {
        drop(reg);
    }

    /// Every registration, of any transport, touching `[addr, addr + len)`
    /// (clamped to the address space), in address order. Takes no
    /// references. Empty for `len == 0`.
    pub fn find_overlapping(&self, addr: usize, len: usize) -> Vec<RegistrationInfo> {
        let mut out = Vec::new();
        if len == 0 {
            return out;
        }
        let last = addr.saturating_add(len - 1);
        loop {
            let mut total = 0usize;
            {
                let index = self.shared.index.read();
                index
                    .tree
                    .for_each_overlapping(addr, last, |_, _, _, slot| {
                        total += 1;
                        if out.len() < out.capacity() {
                            // Fits: pushing does not allocate under the lock.
                            out.push(slot.entry.info(index.refs(&slot.entry)));
                        }
                        true
                    });
            }
            if total == out.len() {
                return out;
            }
            // Grow with the lock released, then look again.
            out.clear();
            out.reserve(total + total / 4 + 4);
        }
    }

    /// Removes every registration touching `[addr, addr + len)` (clamped to
    /// the address space) so that none of them is returned again; idle ones
    /// are deregistered before this returns (by this call, or by a
    /// concurrent one that collected them), in-use ones at their last put.
    /// Returns how many were removed.
    ///
    /// Safe to call from a memory hook: no allocation, free or backend call
    /// happens while the index lock is held.
    pub fn invalidate(&self, addr: usize, len: usize) -> usize {
        if len == 0 {
            return 0;
        }
        let last = addr.saturating_add(len - 1);
        let mut index = self.shared.write_index();
        let mut removed = 0usize;
        while let Some(id) = index.tree.any_overlapping(addr, last) {
            index.retire(id);
            removed += 1;
        }
        index.note_invalidation(addr, last);
        self.shared
            .invalidations
            .fetch_add(removed as u64, Ordering::Relaxed);
        // Collects the first batch under this same hold of the lock.
        self.shared.drain_retired(Some(index));
        removed
    }

    /// Sets the limits on live registrations and registered bytes, evicting
    /// idle registrations at once if the cache is over them.
    pub fn set_limits(&self, max_count: usize, max_bytes: usize) {
        self.shared.max_count.store(max_count, Ordering::Relaxed);
        self.shared.max_bytes.store(max_bytes, Ordering::Relaxed);
        self.shared.evict_over_limits();
    }

    /// Turns merging of idle neighbours on misses on or off.
    pub fn set_merge(&self, merge: bool) {
        self.shared.merge.store(merge, Ordering::Relaxed);
    }

    /// Registrations currently in the index (idle or in use; invalidated
    /// ones awaiting their last put are not counted).
    pub fn cached_count(&self) -> usize {
        self.shared.index.read().tree.len()
    }

    /// The counters. Hits are counted in each entry's home slot (so that a
    /// hit costs a single atomic add), which makes this walk the home table:
    /// `O(n)` under the read lock.
    pub fn stats(&self) -> CacheStats {
        let s = &self.shared;
        let hits = {
            let index = s.index.read();
            let mut hits = index.retired_hits;
            index.homes.for_each(|word, _| hits += home::hits_of(word));
            hits
        };
        CacheStats {
            hits: hits + s.hits.load(Ordering::Relaxed),
            misses: s.misses.load(Ordering::Relaxed),
            evictions: s.evictions.load(Ordering::Relaxed),
            invalidations: s.invalidations.load(Ordering::Relaxed),
            merges: s.merges.load(Ordering::Relaxed),
            live_count: s.live_count.load(Ordering::Relaxed),
            live_bytes: s.live_bytes.load(Ordering::Relaxed),
        }
    }
}

impl<B: RegistrationBackend> Drop for RegCache<B> {
    /// Deregisters every idle registration; in-use ones are deregistered at
    /// their last put, which stays valid after the cache is gone.
    fn drop(&mut self) {
        {
            let mut index = self.shared.write_index();
            while let Some(id) = index.tree.any_overlapping(0, usize::MAX) {
                index.retire(id);
            }
        }
        self.shared.drain_retired(None);
        // The list holds entries that hold the shared state: empty it to
        // break the cycle, and free it with no lock held.
        let listed = {
            let mut lru = self.shared.lru.lock();
            lru.closed = true;
            lru.list.take_all()
        };
        drop(listed);
    }
}

impl<B: RegistrationBackend> Shared<B> {
    /// The index write lock, taken through an upgradeable read so that new
    /// readers wait behind it.
    fn write_index(&self) -> RwLockWriteGuard<'_, Index<B>> {
        self.index.upgradeable_read().upgrade()
    }

    fn backend(&self, transport: TransportId) -> Option<Arc<B>> {
        self.transports.read().get(transport.index()).cloned()
    }
}
