//! The index of the registration cache: everything behind its index lock,
//! and the entries it holds.
//!
//! Entries are indexed by an interval tree (an AVL tree ordered by start
//! address, each node carrying the largest end address below it: the
//! `interval_tree` module), which holds overlapping and identical ranges
//! and answers "which entries touch this range" in `O(log n + k)` for `k`
//! answers, and "which entry covers this range" by one descent in the
//! usual case.
//!
//! In front of the tree sits the *home table* (the `home` module): an
//! open-addressed hash table (linear probing, at most half full, 32-byte
//! slots) in which every entry of the tree has exactly one slot, keyed by
//! the first page of its region and its transport, holding the region,
//! transport, access and reference count next to a pointer to the entry.
//! A lookup whose first byte lies in the first page of a covering
//! registration (the common case: a buffer looked up again, registered
//! rounded down from its own start) is answered from one slot without
//! touching the tree. Neighbouring pages have neighbouring slots, so
//! lookups in address order stay on the same cache lines. Other lookups
//! (inside a registration that starts on an earlier page, such as a merged
//! one) go to a hint table and then to the tree. The home table grows with
//! the tree's arena, from storage allocated with no lock held.
//!
//! A hint is a two-cell bucket, chosen by page and transport, naming the
//! nodes that served the last hits there. Hints are only guesses, checked
//! against the node on use, so a lookup updates them with relaxed stores
//! under the read lock.
//!
//! # Reference counts
//!
//! While an entry is in the index its reference count lives in its home
//! slot, in one word with the transport, the access rights and a hit
//! counter, so that a hit reads and writes a single 32-byte slot and never
//! touches the entry itself (a `Registration` is a counted pointer to the
//! entry, not an `Arc`; the `registration` module gives the argument). When
//! the entry leaves the index (invalidated, evicted, merged away), the
//! count moves into the entry, marked gone, and the put that brings it to
//! zero deregisters it.
//!
//! # Recent invalidations
//!
//! The index remembers the last few invalidated ranges, so that a miss can
//! tell whether the memory it registered was invalidated while the backend
//! ran (see the `miss` module).

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::home::{self, HomeTable};
use super::interval_tree::{IntervalTree, NodeId};
use super::{Access, Region, RegistrationBackend, RegistrationInfo, Shared, TransportId};

// While an entry is in the index its reference count and hits live in the
// word of its home slot (see `home`), and its own state word holds only
// HOMED. When it leaves the index the count moves into its state word,
// marked GONE.
/// Mask of a reference count (in a home slot's word or an entry's state).
pub(super) const REFS_MASK: u64 = home::REFS_MASK;
/// Entry state flag: the entry has left the index (invalidated, evicted,
/// merged away, or the cache was dropped); the low bits are its reference
/// count. Whoever brings that count to zero deregisters it.
pub(super) const GONE: u64 = 1 << 24;
/// Entry state flag: the entry is in the index and its count lives in its
/// home slot.
pub(super) const HOMED: u64 = 1 << 62;
/// One hit in a home slot's word.
pub(super) const HIT_ONE: u64 = home::HIT_ONE;
/// Invalidations remembered so that a registration made while one ran can
/// be checked against it.
pub(super) const RECENT_INVALIDATIONS: usize = 8;

/// One registration, shared by the index, the LRU list and its users.
///
/// Owned through `Arc`s by the tree, its home slot and the LRU list; a
/// [`Registration`](super::Registration) holds a plain pointer, kept valid
/// by the count it adds to (see the `registration` module). When an entry leaves the index while
/// in use, its home slot's `Arc` passes to its users, and the last of them
/// gives it back.
pub(super) struct Entry<B: RegistrationBackend> {
    /// [`HOMED`] while in the index; then [`GONE`] and the reference count.
    pub(super) state: AtomicU64,
    /// Its slot in the LRU list, or `lru::NIL`; only touched under the LRU
    /// lock.
    pub(super) lru_slot: AtomicU32,
    /// Its node in the index, while it is there.
    pub(super) node: AtomicU32,
    pub(super) region: Region,
    pub(super) transport: TransportId,
    pub(super) access: Access,
    pub(super) id: u64,
    pub(super) handle: B::Handle,
    pub(super) shared: Arc<Shared<B>>,
}

/// What the index holds per node: the entry, with the fields a lookup
/// filters on kept inline so that rejected nodes cost no extra cache miss.
pub(super) struct Slot<B: RegistrationBackend> {
    pub(super) entry: Arc<Entry<B>>,
    pub(super) transport: TransportId,
    pub(super) access: Access,
}

/// Everything behind the index lock.
pub(super) struct Index<B: RegistrationBackend> {
    pub(super) tree: IntervalTree<Slot<B>>,
    /// Number of invalidations so far.
    pub(super) invalidation_seq: u64,
    /// The last few invalidated ranges, by `seq % RECENT_INVALIDATIONS`.
    pub(super) recent: [(usize, usize); RECENT_INVALIDATIONS],
    /// Hits taken on entries that have left the index.
    pub(super) retired_hits: u64,
    /// Lookup hints: by page and transport, a bucket of two nodes that
    /// served the last hits there (most recent first). Only guesses, checked
    /// against the node on use, so they are written with relaxed stores
    /// under the read lock. Sized with the arena (a power of two), grown
    /// with it.
    pub(super) hints: Vec<[AtomicU32; 2]>,
    /// Every entry in the tree, by first page and transport: where a hit
    /// looks first (see the `home` module).
    pub(super) homes: HomeTable<Arc<Entry<B>>>,
}

impl<B: RegistrationBackend> Index<B> {
    /// Whether an invalidation after `since` may have touched
    /// `[first, last]`.
    pub(super) fn invalidated_since(&self, since: u64, first: usize, last: usize) -> bool {
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
    pub(super) fn hint(
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

    pub(super) fn note_invalidation(&mut self, first: usize, last: usize) {
        let at = (self.invalidation_seq % RECENT_INVALIDATIONS as u64) as usize;
        self.recent[at] = (first, last);
        self.invalidation_seq += 1;
    }

    /// Unlinks a node, marks its entry gone and returns whether the caller
    /// now owns its deregistration (it was idle).
    pub(super) fn retire(&mut self, id: NodeId) -> bool {
        let Some(slot) = self.tree.get(id) else {
            return false;
        };
        let idle = unhome(&mut self.homes, &mut self.retired_hits, &slot.entry) == 0;
        self.tree.retire(id, idle);
        idle
    }

    /// References held on an indexed or gone entry.
    pub(super) fn refs(&self, entry: &Arc<Entry<B>>) -> u64 {
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
pub(super) fn unhome<B: RegistrationBackend>(
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

impl<B: RegistrationBackend> Entry<B> {
    pub(super) fn info(&self, refs: u64) -> RegistrationInfo {
        RegistrationInfo {
            id: self.id,
            region: self.region,
            transport: self.transport,
            access: self.access,
            refs: (refs & REFS_MASK) as u32,
        }
    }

    pub(super) fn node_id(&self) -> NodeId {
        NodeId::from_raw(self.node.load(Ordering::Relaxed))
    }
}
