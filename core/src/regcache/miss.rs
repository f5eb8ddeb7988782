//! The miss path of the registration cache: registering a new range,
//! merged with idle neighbours, and inserting it.
//!
//! Misses are serialised by a miss lock, held while the backend registers,
//! so that two threads never register the same range twice. The backend is
//! called with no index lock held; the plan (which idle neighbours to
//! merge) is made under the read lock, and the write lock is taken only to
//! insert. Writers take the lock through an upgradeable read, which holds
//! off new readers, so a stream of hits cannot starve an invalidation.
//!
//! An insert never allocates under the lock: the tree's arena, the home
//! table and the hints are grown first, from storage allocated with no lock
//! held, and the old storage is freed after the lock is released.
//!
//! A registration made while an invalidation of the same memory ran is
//! dropped and made again (the pages it describes may be gone): the insert
//! checks the index's recent invalidations since the plan was made.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::home::HomeTable;
use super::index::{Entry, Index, Slot, HOMED};
use super::interval_tree::{IntervalTree, NodeId};
use super::lru;
use super::{Access, GetError, Region, Registration, RegistrationBackend, Shared, TransportId};

/// How a miss registers a range: the transport's backend, or the caller's
/// closure of [`RegCache::get_with`](super::RegCache::get_with).
pub(super) type Register<'a, B> = dyn FnMut(
        &B,
        Region,
        Access,
    ) -> Result<<B as RegistrationBackend>::Handle, <B as RegistrationBackend>::Error>
    + 'a;

/// Times a miss retries when invalidations keep hitting the range being
/// registered.
const MAX_MISS_ATTEMPTS: usize = 4;

impl<B: RegistrationBackend> Shared<B> {
    /// The miss path; see the module documentation. Out of line and cold so
    /// that the hit path inlined into callers stays free of its stack frame
    /// (its spills were stores that held back overlapping hits).
    #[cold]
    #[inline(never)]
    pub(super) fn miss(
        self: &Arc<Self>,
        first: usize,
        last: usize,
        access: Access,
        transport: TransportId,
        register: &mut Register<'_, B>,
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
            let handle = match register(&backend, region, access) {
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
