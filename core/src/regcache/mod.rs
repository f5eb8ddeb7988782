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
//! # Index
//!
//! Entries are indexed by an interval tree (an AVL tree ordered by start
//! address, each node carrying the largest end address below it), which
//! holds overlapping and identical ranges and answers "which entries touch
//! this range" in `O(log n + k)` for `k` answers, and "which entry covers
//! this range" by one descent in the usual case.
//!
//! In front of the tree sits the *home table*: an open-addressed hash table
//! (linear probing, at most half full, 32-byte slots) in which every entry
//! of the tree has exactly one slot, keyed by the first page of its region
//! and its transport, holding the region, transport, access and reference
//! count next to a pointer to the entry. A lookup whose first byte lies in the first page of a covering
//! registration (the common case: a buffer looked up again, registered
//! rounded down from its own start) is answered from one slot without
//! touching the tree. Neighbouring pages have neighbouring slots, so lookups
//! in address order stay on the same cache lines. Other lookups (inside a
//! registration that starts on an earlier page, such as a merged one) go to
//! a hint table and then to the tree. The home table grows with the tree's
//! arena, from storage allocated with no lock held.
//!
//! # Reference counts and the LRU list
//!
//! Each [`Registration`] holds one reference; [`put`](RegCache::put) (or
//! dropping the registration) gives it back. While an entry is in the index
//! its reference count lives in its home slot, in one word with the
//! transport, the access rights and a hit counter, so that a hit reads and
//! writes a single 32-byte slot and never touches the entry itself (a
//! `Registration` is a counted pointer to the entry, not an `Arc`; the
//! `registration` module gives the argument). When the entry leaves the
//! index (invalidated, evicted, merged away), the count moves into the
//! entry, marked gone, and the put that brings it to zero deregisters it.
//! At zero the entry stays
//! registered and goes to the back of the LRU list. Whenever the cache is
//! over one of its limits (number of live registrations, bytes registered:
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
//! # Concurrency
//!
//! The index sits behind a `spin` read-write lock. A hit takes only the read
//! lock and allocates nothing: it first probes the home table; failing that
//! it tries a hint (a two-cell bucket, chosen by page and transport, naming
//! the nodes that served the last hits there), checks that node against the
//! request, and otherwise walks the tree and updates the hint with relaxed
//! stores. The reference count and the hit counter share one word, taken
//! with one atomic add, so lookups do not wait for each other. A put takes
//! the read lock too (a count moves only under the write lock) and one
//! atomic subtract; the last put of an entry then releases the read lock and
//! takes the (separate) LRU lock to move the entry to the back of the list
//! (a doubly linked list in a slab, `O(1)`). The LRU lock is never requested
//! while an index lock is held (eviction looks at the index while holding
//! the LRU lock, never the other way round), so the two cannot deadlock. Misses are serialised by a miss lock, held
//! while the backend
//! registers, so that two threads never register the same range twice; they
//! take the write lock only to insert. Writers take the lock through an
//! upgradeable read, which holds off new readers, so a stream of hits cannot
//! starve an invalidation.
//!
//! A registration made while an invalidation of the same memory ran is
//! dropped and made again (the pages it describes may be gone): the index
//! remembers the last few invalidated ranges for that check.
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

mod home;
mod interval_tree;
mod lru;
mod registration;

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::ops::BitOr;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use spin::{Mutex, RwLock, RwLockWriteGuard};

use home::HomeTable;
use interval_tree::{IntervalTree, NodeId};
use lru::LruList;
pub use registration::Registration;
use registration::Released;

/// Page size used when none is given.
pub const DEFAULT_PAGE_SIZE: usize = 4096;

// While an entry is in the index its reference count and hits live in the
// word of its home slot (see `home`), and its own state word holds only
// HOMED. When it leaves the index the count moves into its state word,
// marked GONE.
/// Mask of a reference count (in a home slot's word or an entry's state).
const REFS_MASK: u64 = home::REFS_MASK;
/// Entry state flag: the entry has left the index (invalidated, evicted,
/// merged away, or the cache was dropped); the low bits are its reference
/// count. Whoever brings that count to zero deregisters it.
const GONE: u64 = 1 << 24;
/// Entry state flag: the entry is in the index and its count lives in its
/// home slot.
const HOMED: u64 = 1 << 62;
/// One hit in a home slot's word.
const HIT_ONE: u64 = home::HIT_ONE;
/// More references than this on one entry are refused rather than risk the
/// count running into the fields above it.
const MAX_REFS: u64 = 1 << 23;
/// A slot's hit field is moved to the cache-wide counter when it reaches
/// this, long before it could wrap (the field holds 16 bits).
const HIT_HARVEST: u64 = 1 << 15;
/// Invalidations remembered so that a registration made while one ran can
/// be checked against it.
const RECENT_INVALIDATIONS: usize = 8;
/// Times a miss retries when invalidations keep hitting the range being
/// registered.
const MAX_MISS_ATTEMPTS: usize = 4;
/// Retired entries collected per hold of the lock.
const DRAIN_BATCH: usize = 16;

/// Access rights of a registration. Every registration allows local reads;
/// the flags add to that. A registration serves a request when its rights
/// [`contain`](Access::contains) the requested ones.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// Local reads only (no flag set).
    pub const LOCAL_READ: Access = Access(0);
    /// The local process may write through the registration.
    pub const LOCAL_WRITE: Access = Access(1);
    /// Peers may read the memory (RDMA get).
    pub const REMOTE_READ: Access = Access(1 << 1);
    /// Peers may write the memory (RDMA put).
    pub const REMOTE_WRITE: Access = Access(1 << 2);
    /// Peers may perform atomics on the memory.
    pub const REMOTE_ATOMIC: Access = Access(1 << 3);
    const ALL: u8 = 0b1111;

    /// Rights from their bit pattern; unknown bits are dropped.
    pub const fn from_bits(bits: u8) -> Self {
        Access(bits & Self::ALL)
    }

    /// The bit pattern of these rights.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Both sets of rights.
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }

    /// Whether these rights include all of `other`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        self.union(rhs)
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(Access, &str); 4] = [
            (Access::LOCAL_WRITE, "LOCAL_WRITE"),
            (Access::REMOTE_READ, "REMOTE_READ"),
            (Access::REMOTE_WRITE, "REMOTE_WRITE"),
            (Access::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
        ];
        f.write_str("Access(LOCAL_READ")?;
        for (flag, name) in NAMES {
            if self.contains(flag) {
                write!(f, " | {name}")?;
            }
        }
        f.write_str(")")
    }
}

/// Names a transport within one cache; returned by
/// [`RegCache::add_transport`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TransportId(u16);

impl TransportId {
    /// Position of the transport in the order it was added (0 for the
    /// first).
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// A non-empty address range, kept as first and last byte so that it can
/// end at the top of the address space. A registration's region is whole
/// pages.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Region {
    first: usize,
    last: usize,
}

impl Region {
    /// The region `[base, base + len)`; `None` if `len` is zero, the range
    /// runs past the top of the address space, or it covers the whole
    /// address space (its length would not fit a `usize`).
    pub const fn new(base: usize, len: usize) -> Option<Region> {
        if len == 0 {
            return None;
        }
        match base.checked_add(len - 1) {
            Some(last) => Some(Region { first: base, last }),
            None => None,
        }
    }

    /// First byte.
    pub const fn base(&self) -> usize {
        self.first
    }

    /// Last byte (inclusive), so that a region ending at the top of the
    /// address space has one.
    pub const fn last(&self) -> usize {
        self.last
    }

    /// Length in bytes.
    pub const fn len(&self) -> usize {
        // A region never covers the whole address space, so this fits.
        self.last - self.first + 1
    }

    /// Always false: a region holds at least one byte.
    pub const fn is_empty(&self) -> bool {
        false
    }

    /// Whether every byte of `other` lies in this region.
    pub const fn contains(&self, other: &Region) -> bool {
        self.first <= other.first && other.last <= self.last
    }

    /// Whether the two regions share at least one byte.
    pub const fn overlaps(&self, other: &Region) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Region({:#x}..={:#x})", self.first, self.last)
    }
}

/// What a transport implements so that the cache can register memory
/// through it.
///
/// Both calls are made with no index or LRU lock held, so they may block,
/// allocate, or trigger a memory hook that calls [`RegCache::invalidate`].
/// `register` runs under the cache's miss lock, so it must not call
/// [`RegCache::get`] on the same cache.
pub trait RegistrationBackend {
    /// The transport's registration (a memory region with its keys, a
    /// mapping...). Transports read it through [`Registration::handle`].
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

/// Why a [`RegCacheConfig`] was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigError {
    /// The page size is zero or not a power of two.
    BadPageSize(usize),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadPageSize(p) => write!(f, "page size {p} is not a power of two"),
        }
    }
}

impl core::error::Error for ConfigError {}

/// Why a transport could not be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddTransportError {
    /// The cache already serves the most transports a [`TransportId`] can
    /// name.
    TooMany,
}

impl fmt::Display for AddTransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooMany => write!(f, "a cache serves at most {} transports", u16::MAX),
        }
    }
}

impl core::error::Error for AddTransportError {}

/// Why [`RegCache::get`] returned no registration. In every case the cache
/// holds the registrations it held before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GetError<E> {
    /// The request has length zero: there is nothing to register.
    ZeroLength,
    /// The range runs past the top of the address space, or rounded to
    /// pages it would cover the whole address space.
    AddressOverflow,
    /// No transport of this cache has that id.
    UnknownTransport(TransportId),
    /// The registration found already has 2^23 references.
    TooManyReferences,
    /// The memory was invalidated again and again while it was being
    /// registered (it is being unmapped while in use).
    InvalidatedDuringRegistration,
    /// The backend refused to register the range.
    Backend(E),
}

impl<E: fmt::Display> fmt::Display for GetError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroLength => f.write_str("cannot register a zero-length range"),
            Self::AddressOverflow => f.write_str("range runs past the end of the address space"),
            Self::UnknownTransport(t) => write!(f, "no transport {} in this cache", t.index()),
            Self::TooManyReferences => f.write_str("registration has too many references"),
            Self::InvalidatedDuringRegistration => {
                f.write_str("memory was invalidated while it was being registered")
            }
            Self::Backend(e) => write!(f, "backend failed to register memory: {e}"),
        }
    }
}

impl<E: core::error::Error + 'static> core::error::Error for GetError<E> {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Backend(e) => Some(e),
            _ => None,
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

/// One registration, shared by the index, the LRU list and its users.
///
/// Owned through `Arc`s by the tree, its home slot and the LRU list; a
/// [`Registration`] holds a plain pointer, kept valid by the count it adds
/// to (see the `registration` module). When an entry leaves the index while
/// in use, its home slot's `Arc` passes to its users, and the last of them
/// gives it back.
struct Entry<B: RegistrationBackend> {
    /// [`HOMED`] while in the index; then [`GONE`] and the reference count.
    state: AtomicU64,
    /// Its slot in the LRU list, or `lru::NIL`; only touched under the LRU
    /// lock.
    lru_slot: AtomicU32,
    /// Its node in the index, while it is there.
    node: AtomicU32,
    region: Region,
    transport: TransportId,
    access: Access,
    id: u64,
    handle: B::Handle,
    shared: Arc<Shared<B>>,
}

/// What the index holds per node: the entry, with the fields a lookup
/// filters on kept inline so that rejected nodes cost no extra cache miss.
struct Slot<B: RegistrationBackend> {
    entry: Arc<Entry<B>>,
    transport: TransportId,
    access: Access,
}

/// Everything behind the index lock.
struct Index<B: RegistrationBackend> {
    tree: IntervalTree<Slot<B>>,
    /// Number of invalidations so far.
    invalidation_seq: u64,
    /// The last few invalidated ranges, by `seq % RECENT_INVALIDATIONS`.
    recent: [(usize, usize); RECENT_INVALIDATIONS],
    /// Hits taken on entries that have left the index.
    retired_hits: u64,
    /// Lookup hints: by page and transport, a bucket of two nodes that
    /// served the last hits there (most recent first). Only guesses, checked
    /// against the node on use, so they are written with relaxed stores
    /// under the read lock. Sized with the arena (a power of two), grown
    /// with it.
    hints: Vec<[AtomicU32; 2]>,
    /// Every entry in the tree, by first page and transport: where a hit
    /// looks first (see the `home` module).
    homes: HomeTable<Arc<Entry<B>>>,
}

impl<B: RegistrationBackend> Index<B> {
    /// Whether an invalidation after `since` may have touched
    /// `[first, last]`.
    fn invalidated_since(&self, since: u64, first: usize, last: usize) -> bool {
        let missed = self.invalidation_seq - since;
        if missed == 0 {
            return false;
        }
        if missed > RECENT_INVALIDATIONS as u64 {
            return true;
        }
        (since..self.invalidation_seq).any(|seq| {
            let (f, l) = self.recent[(seq % RECENT_INVALIDATIONS as u64) as usize];
            f <= last && first <= l
        })
    }

    /// The hint bucket for `addr`'s page and `transport`, if there is a
    /// table. Neighbouring pages map to neighbouring buckets; the high bits
    /// are folded in so that regularly spaced buffers do not share buckets.
    #[inline]
    fn hint(
        &self,
        addr: usize,
        page_shift: u32,
        transport: TransportId,
    ) -> Option<&[AtomicU32; 2]> {
        let page = addr >> page_shift;
        let key = page ^ (page >> 17) ^ (usize::from(transport.0) << 9);
        let mask = self.hints.len().wrapping_sub(1);
        self.hints.get(key & mask)
    }

    fn note_invalidation(&mut self, first: usize, last: usize) {
        let at = (self.invalidation_seq % RECENT_INVALIDATIONS as u64) as usize;
        self.recent[at] = (first, last);
        self.invalidation_seq += 1;
    }

    /// Unlinks a node, marks its entry gone and returns whether the caller
    /// now owns its deregistration (it was idle).
    fn retire(&mut self, id: NodeId) -> bool {
        let Some(slot) = self.tree.get(id) else {
            return false;
        };
        let idle = unhome(&mut self.homes, &mut self.retired_hits, &slot.entry) == 0;
        self.tree.retire(id, idle);
        idle
    }

    /// References held on an indexed or gone entry.
    fn refs(&self, entry: &Arc<Entry<B>>) -> u64 {
        let state = entry.state.load(Ordering::Acquire);
        if state & HOMED == 0 {
            return state & REFS_MASK;
        }
        self.homes
            .locate(entry.region.first, entry.transport, |e| {
                Arc::ptr_eq(e, entry)
            })
            .map_or(0, |found| home::refs_of(found.word.load(Ordering::Acquire)))
    }
}

/// Takes an indexed entry out of the home table (under the write lock): its
/// count moves into its own state word, marked [`GONE`], and its hits into
/// `retired_hits`. Returns the references it held. If there were any, the
/// home slot's `Arc` passes to the users, to be given back by the last put;
/// otherwise it is dropped here, which frees nothing since the tree still
/// holds the entry.
fn unhome<B: RegistrationBackend>(
    homes: &mut HomeTable<Arc<Entry<B>>>,
    retired_hits: &mut u64,
    entry: &Arc<Entry<B>>,
) -> u64 {
    let Some((word, home_ref)) = homes.remove(entry.region.first, entry.transport, |e| {
        Arc::ptr_eq(e, entry)
    }) else {
        // Not reached: every indexed entry has its home.
        debug_assert!(false, "indexed entry without a home slot");
        entry.state.store(GONE, Ordering::Release);
        return 0;
    };
    *retired_hits += home::hits_of(word);
    let refs = home::refs_of(word);
    entry.state.store(GONE | refs, Ordering::Release);
    if refs > 0 {
        let _users_share = Arc::into_raw(home_ref);
    } else {
        drop(home_ref);
    }
    refs
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
        self.shared.miss(addr, last, access, transport)
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

impl<B: RegistrationBackend> Entry<B> {
    fn info(&self, refs: u64) -> RegistrationInfo {
        RegistrationInfo {
            id: self.id,
            region: self.region,
            transport: self.transport,
            access: self.access,
            refs: (refs & REFS_MASK) as u32,
        }
    }

    fn node_id(&self) -> NodeId {
        NodeId::from_raw(self.node.load(Ordering::Relaxed))
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

    /// The hit path: read lock, find, one atomic add.
    #[inline(always)]
    fn lookup(
        &self,
        first: usize,
        last: usize,
        access: Access,
        transport: TransportId,
    ) -> Result<Option<Registration<B>>, GetError<B::Error>> {
        let index = self.index.read();
        if let Some(found) = index.homes.find(first, last, transport, access) {
            return self.take_reference(found.word, found.value);
        }
        self.lookup_in_tree(&index, first, last, access, transport)
    }

    /// The rest of the hit path, for lookups the home table does not
    /// answer: the hint, then the tree. Kept out of line so that the home
    /// table's path stays short.
    #[inline(never)]
    fn lookup_in_tree(
        &self,
        index: &Index<B>,
        first: usize,
        last: usize,
        access: Access,
        transport: TransportId,
    ) -> Result<Option<Registration<B>>, GetError<B::Error>> {
        let accept = |slot: &Slot<B>| slot.transport == transport && slot.access.contains(access);
        let hint = index.hint(first, self.page_shift, transport);
        let guess = hint.and_then(|bucket| {
            bucket.iter().find_map(|cell| {
                index
                    .tree
                    .covering_at(cell.load(Ordering::Relaxed), first, last)
                    .filter(|slot| accept(slot))
            })
        });
        let slot = match guess {
            Some(slot) => slot,
            None => {
                let Some((id, slot)) = index.tree.find_covering(first, last, accept) else {
                    return Ok(None);
                };
                if let Some([recent, older]) = hint {
                    older.store(recent.load(Ordering::Relaxed), Ordering::Relaxed);
                    recent.store(id.raw(), Ordering::Relaxed);
                }
                slot
            }
        };
        match index
            .homes
            .locate(slot.entry.region.first, slot.transport, |e| {
                Arc::ptr_eq(e, &slot.entry)
            }) {
            Some(found) => self.take_reference(found.word, found.value),
            // Not reached: every indexed entry has its home.
            None => Ok(None),
        }
    }

    /// Takes a reference on an entry found in the index (a hit), with the
    /// read lock held.
    #[inline]
    fn take_reference(
        &self,
        word: &AtomicU64,
        entry: &Arc<Entry<B>>,
    ) -> Result<Option<Registration<B>>, GetError<B::Error>> {
        // Entries in the index are never gone, and nothing can mark one gone
        // while the read lock is held, so a plain add is enough; it counts
        // the hit too. Relaxed: the lock orders it against eviction, which
        // looks under the write lock.
        let old = word.fetch_add(1 + HIT_ONE, Ordering::Relaxed);
        if old & REFS_MASK >= MAX_REFS {
            word.fetch_sub(1 + HIT_ONE, Ordering::Relaxed);
            return Err(GetError::TooManyReferences);
        }
        if old / HIT_ONE == HIT_HARVEST {
            // Rare: move hits to the cache-wide counter. The field only
            // grows between harvests, so exactly one hit sees this value
            // and does the harvest (concurrent hits under the read lock
            // cannot both take it).
            word.fetch_sub(HIT_HARVEST * HIT_ONE, Ordering::Relaxed);
            self.hits.fetch_add(HIT_HARVEST, Ordering::Relaxed);
        }
        Ok(Some(Registration::new(entry)))
    }

    /// The miss path; see the module documentation. Out of line and cold so
    /// that the hit path inlined into callers stays free of its stack frame
    /// (its spills were stores that held back overlapping hits).
    #[cold]
    #[inline(never)]
    fn miss(
        self: &Arc<Self>,
        first: usize,
        last: usize,
        access: Access,
        transport: TransportId,
    ) -> Result<Registration<B>, GetError<B::Error>> {
        let mask = self.page_size - 1;
        let (pfirst, plast) = (first & !mask, last | mask);
        if pfirst == 0 && plast == usize::MAX {
            return Err(GetError::AddressOverflow);
        }
        let _miss = self.miss_lock.lock();
        // Another thread may have registered it while we waited.
        if let Some(reg) = self.lookup(first, last, access, transport)? {
            return Ok(reg);
        }
        let backend = self
            .backend(transport)
            .ok_or(GetError::UnknownTransport(transport))?;
        let mut merge = self.merge.load(Ordering::Relaxed);
        for _ in 0..MAX_MISS_ATTEMPTS {
            let (seq, region, swallow) = {
                let index = self.index.read();
                let (f, l, swallow) = if merge {
                    plan_merge(&index, pfirst, plast, transport, access)
                } else {
                    (pfirst, plast, false)
                };
                (
                    index.invalidation_seq,
                    Region { first: f, last: l },
                    swallow,
                )
            };
            let widened = region.first != pfirst || region.last != plast;
            let handle = match backend.register(region, access) {
                Ok(h) => h,
                Err(_) if widened => {
                    merge = false;
                    continue;
                }
                Err(e) => return Err(GetError::Backend(e)),
            };
            self.live_count.fetch_add(1, Ordering::Relaxed);
            self.live_bytes.fetch_add(region.len(), Ordering::Relaxed);
            let entry = Arc::new(Entry {
                // The caller's reference is counted in the home slot.
                state: AtomicU64::new(HOMED),
                lru_slot: AtomicU32::new(lru::NIL),
                node: AtomicU32::new(0),
                region,
                transport,
                access,
                id: self.next_id.fetch_add(1, Ordering::Relaxed),
                handle,
                shared: Arc::clone(self),
            });
            if self.commit(&entry, seq, swallow) {
                let reg = Registration::new(&entry);
                self.drain_retired(None);
                self.misses.fetch_add(1, Ordering::Relaxed);
                self.evict_over_limits();
                return Ok(reg);
            }
            // The memory was invalidated while we registered it: the new
            // registration may describe pages that are gone. Undo and retry.
            self.deregister(&entry);
            drop(entry);
            merge = false;
        }
        Err(GetError::InvalidatedDuringRegistration)
    }

    /// Inserts a new entry, swallowing the idle entries it covers when a
    /// merge was planned. False if an invalidation touched the region since
    /// `seq`.
    fn commit(&self, entry: &Arc<Entry<B>>, seq: u64, swallow: bool) -> bool {
        let (first, last) = (entry.region.first, entry.region.last);
        loop {
            self.reserve_slot();
            let mut index = self.write_index();
            if index.invalidated_since(seq, first, last) {
                return false;
            }
            if !index.tree.has_spare_slot() || !index.homes.has_room_for(1) {
                // Only misses insert and they are serialised, so the slot
                // reserved above is still there; stay correct regardless.
                continue;
            }
            if swallow {
                let mut swallowed = 0u64;
                while let Some(id) = find_swallowable(&index, entry) {
                    index.retire(id);
                    swallowed += 1;
                }
                self.merges.fetch_add(swallowed, Ordering::Relaxed);
            }
            let slot = Slot {
                entry: Arc::clone(entry),
                transport: entry.transport,
                access: entry.access,
            };
            match index.tree.insert(first, last, slot) {
                Ok(id) => {
                    entry.node.store(id.raw(), Ordering::Relaxed);
                    // Room was checked above; the clone is an atomic add.
                    let _ = index.homes.insert(
                        first,
                        last,
                        entry.transport,
                        entry.access,
                        1,
                        Arc::clone(entry),
                    );
                    debug_assert_eq!(index.homes.len(), index.tree.len());
                    if let Some([recent, older]) =
                        index.hint(first, self.page_shift, entry.transport)
                    {
                        older.store(recent.load(Ordering::Relaxed), Ordering::Relaxed);
                        recent.store(id.raw(), Ordering::Relaxed);
                    }
                    return true;
                }
                Err(slot) => {
                    // Not reached (a slot was spare); the clone must not be
                    // freed under the lock.
                    drop(index);
                    drop(slot);
                }
            }
        }
    }

    /// Makes sure the index can take one insert without allocating, growing
    /// its storage with no lock held.
    fn reserve_slot(&self) {
        loop {
            let capacity = {
                let index = self.index.read();
                if index.tree.has_spare_slot() && index.homes.has_room_for(1) {
                    return;
                }
                index.tree.capacity()
            };
            let capacity = capacity.saturating_mul(2).max(64);
            let storage = IntervalTree::new_storage(capacity);
            // Twice the arena, so the home table stays at most half full.
            let homes = HomeTable::new_storage(capacity.saturating_mul(2));
            // Two buckets (four cells) per slot; a fresh table starts empty
            // (guesses are rebuilt by the next lookups).
            let mut hints = Vec::new();
            hints.resize_with(capacity.saturating_mul(2).next_power_of_two(), || {
                [AtomicU32::new(u32::MAX), AtomicU32::new(u32::MAX)]
            });
            let (old_storage, old_hints, old_homes) = {
                let mut index = self.write_index();
                let old_storage = index.tree.adopt_storage(storage);
                // Moves the entries over: O(n) under the lock, once per
                // doubling, and nothing allocated or freed.
                let old_homes = index.homes.adopt(homes);
                let old_hints = if hints.len() > index.hints.len() {
                    core::mem::replace(&mut index.hints, hints)
                } else {
                    hints
                };
                (old_storage, old_hints, old_homes)
            };
            drop(old_storage);
            drop(old_hints);
            drop(old_homes);
        }
    }

    /// Collects retired entries a few at a time and deregisters the idle
    /// ones, freeing everything with the lock released.
    ///
    /// `held` is the write lock if the caller holds it: the first batch is
    /// then taken without locking again.
    fn drain_retired(&self, mut held: Option<RwLockWriteGuard<'_, Index<B>>>) {
        loop {
            let mut batch: [Option<(Slot<B>, bool)>; DRAIN_BATCH] = [const { None }; DRAIN_BATCH];
            let mut taken = 0;
            {
                let mut index = match held.take() {
                    Some(guard) => guard,
                    None => self.write_index(),
                };
                // Moving values out of the arena neither allocates nor frees.
                for cell in batch.iter_mut() {
                    match index.tree.take_retired() {
                        Some(item) => {
                            *cell = Some(item);
                            taken += 1;
                        }
                        None => break,
                    }
                }
            }
            for (slot, idle) in batch.iter_mut().filter_map(Option::take) {
                if idle {
                    self.deregister(&slot.entry);
                }
            }
            if taken < DRAIN_BATCH {
                // Empty now; entries retired later are drained by whoever
                // retired them.
                return;
            }
        }
    }

    fn deregister(&self, entry: &Entry<B>) {
        if let Some(backend) = self.backend(entry.transport) {
            backend.deregister(entry.region, &entry.handle);
        }
        self.live_count.fetch_sub(1, Ordering::Relaxed);
        self.live_bytes
            .fetch_sub(entry.region.len(), Ordering::Relaxed);
    }

    /// Gives back one reference (a put). Takes the read lock, so that the
    /// count stays where it is looked up (an entry's count moves out of its
    /// home slot only under the write lock).
    fn release(&self, entry: &Entry<B>) -> Released {
        let index = self.index.read();
        if entry.state.load(Ordering::Acquire) & HOMED == 0 {
            // Out of the index: the count is in the entry, marked gone.
            let old = entry.state.fetch_sub(1, Ordering::AcqRel);
            drop(index);
            if old & REFS_MASK != 1 {
                return Released::Done;
            }
            // Invalidated while in use; this was the last reference.
            self.deregister(entry);
            return Released::Last;
        }
        let Some(found) = index
            .homes
            .locate(entry.region.first, entry.transport, |e| {
                core::ptr::eq(Arc::as_ptr(e), entry)
            })
        else {
            // Not reached: an entry marked as homed has its home.
            return Released::Done;
        };
        let old = found.word.fetch_sub(1, Ordering::AcqRel);
        if old & REFS_MASK != 1 {
            return Released::Done;
        }
        // Idle now: list it as the most recently used. The clone keeps it
        // alive for that once the read lock is released.
        let entry = Arc::clone(found.value);
        drop(index);
        let swept = {
            let mut lru = self.lru.lock();
            if lru.closed {
                return Released::Done;
            }
            let slot = entry.lru_slot.load(Ordering::Relaxed);
            let moved = slot != lru::NIL && lru.list.move_to_back(slot, |e| Arc::ptr_eq(e, &entry));
            debug_assert!(moved || slot == lru::NIL, "stale LRU slot");
            if !moved {
                if let Some(slot) = lru.list.push_back(Arc::clone(&entry)) {
                    entry.lru_slot.store(slot, Ordering::Relaxed);
                }
            }
            // Entries that left the index stay listed until met; sweep them
            // once they could outnumber the live ones.
            let live = self.live_count.load(Ordering::Relaxed);
            if lru.list.len() > 2 * live + 64 {
                let mut gone = Vec::new();
                lru.list
                    .remove_where(|e| e.state.load(Ordering::Acquire) & GONE != 0, &mut gone);
                for e in &gone {
                    e.lru_slot.store(lru::NIL, Ordering::Relaxed);
                }
                gone
            } else {
                Vec::new()
            }
        };
        drop(swept);
        drop(entry);
        self.evict_over_limits();
        Released::Done
    }

    fn over_limits(&self) -> bool {
        self.live_count.load(Ordering::Relaxed) > self.max_count.load(Ordering::Relaxed)
            || self.live_bytes.load(Ordering::Relaxed) > self.max_bytes.load(Ordering::Relaxed)
    }

    /// Deregisters least recently used idle entries while over the limits.
    fn evict_over_limits(&self) {
        while self.over_limits() {
            let front = {
                let lru = self.lru.lock();
                lru.list
                    .front()
                    .map(|(slot, entry)| (slot, Arc::clone(entry)))
            };
            let Some((front_slot, entry)) = front else {
                return;
            };
            let (evicted, in_index) = {
                let mut index = self.write_index();
                // No reference can be taken or given back while we hold the
                // write lock, so an idle entry stays idle until it is gone.
                let id = entry.node_id();
                let in_index = index
                    .tree
                    .get(id)
                    .is_some_and(|slot| Arc::ptr_eq(&slot.entry, &entry));
                if in_index && index.refs(&entry) == 0 {
                    let index = &mut *index;
                    unhome(&mut index.homes, &mut index.retired_hits, &entry);
                    (index.tree.remove(id), true)
                } else {
                    (None, in_index)
                }
            };
            // Out of the list if evicted or no longer in the index. If it is
            // in use, it leaves the list too and comes back at its last put;
            // that is checked again here, under the list lock, since a put
            // may have made it idle (and moved it to the back) meanwhile.
            let unlisted = {
                let mut lru = self.lru.lock();
                let drop_it = evicted.is_some()
                    || !in_index
                    || (!lru.closed && self.index.read().refs(&entry) > 0);
                let is_it = |e: &Arc<Entry<B>>| Arc::ptr_eq(e, &entry);
                let slot = entry.lru_slot.load(Ordering::Relaxed);
                let removed = if drop_it {
                    // Where the entry says it is; failing that, where it was
                    // seen, so that a wrong `lru_slot` cannot keep the front
                    // in place and this loop spinning.
                    lru.list.remove(slot, is_it).or_else(|| {
                        let found = lru.list.remove(front_slot, is_it);
                        debug_assert!(found.is_none(), "stale LRU slot");
                        found
                    })
                } else {
                    None
                };
                if removed.is_some() {
                    entry.lru_slot.store(lru::NIL, Ordering::Relaxed);
                }
                removed
            };
            if let Some(slot) = evicted {
                self.deregister(&entry);
                self.evictions.fetch_add(1, Ordering::Relaxed);
                drop(slot);
            }
            drop(unlisted);
            drop(entry);
        }
    }
}

/// Whether an indexed entry may be merged into a new registration of this
/// transport and access.
fn mergeable<B: RegistrationBackend>(
    index: &Index<B>,
    slot: &Slot<B>,
    transport: TransportId,
    access: Access,
) -> bool {
    slot.transport == transport && slot.access == access && index.refs(&slot.entry) == 0
}

/// Widens `[first, last]` over idle mergeable entries that overlap or touch
/// it, until it stops growing; also says whether there was any such entry
/// (to be swallowed by the new registration). Never returns the whole
/// address space.
fn plan_merge<B: RegistrationBackend>(
    index: &Index<B>,
    first: usize,
    last: usize,
    transport: TransportId,
    access: Access,
) -> (usize, usize, bool) {
    let (mut f, mut l) = (first, last);
    let mut any = false;
    loop {
        let (mut nf, mut nl) = (f, l);
        index.tree.for_each_overlapping(
            f.saturating_sub(1),
            l.saturating_add(1),
            |_, a, b, slot| {
                if mergeable(index, slot, transport, access) {
                    nf = nf.min(a);
                    nl = nl.max(b);
                    any = true;
                }
                true
            },
        );
        if (nf, nl) == (f, l) || (nf == 0 && nl == usize::MAX) {
            return (f, l, any);
        }
        (f, l) = (nf, nl);
    }
}

/// An idle entry the new (merged) entry covers and can swallow.
fn find_swallowable<B: RegistrationBackend>(index: &Index<B>, entry: &Entry<B>) -> Option<NodeId> {
    let mut found = None;
    let (first, last) = (entry.region.first, entry.region.last);
    index
        .tree
        .for_each_overlapping(first, last, |id, a, b, slot| {
            if a >= first && b <= last && mergeable(index, slot, entry.transport, entry.access) {
                found = Some(id);
                return false;
            }
            true
        });
    found
}
