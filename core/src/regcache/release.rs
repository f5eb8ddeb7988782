//! Giving references back, and letting registrations go: the put, the LRU
//! list of idle entries, eviction under the limits, and deregistering the
//! entries retired from the index.
//!
//! A put takes the index read lock (a count moves only under the write
//! lock) and one atomic subtract; the last put of an entry then releases
//! the read lock and takes the (separate) LRU lock to move the entry to the
//! back of the list (a doubly linked list in a slab, `O(1)`: the `lru`
//! module). The LRU lock is never requested while an index lock is held
//! (eviction looks at the index while holding the LRU lock, never the other
//! way round), so the two cannot deadlock.
//!
//! Entries unlinked from the index (invalidated, merged away, or at the
//! cache's drop) stay in the tree's arena on a retired list; they are
//! collected a few at a time and the idle ones deregistered, with the lock
//! released for every free and backend call.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use spin::RwLockWriteGuard;

use super::index::{unhome, Entry, Index, Slot, GONE, HOMED, REFS_MASK};
use super::lru;
use super::registration::Released;
use super::{RegistrationBackend, Shared};

/// Retired entries collected per hold of the lock.
const DRAIN_BATCH: usize = 16;

impl<B: RegistrationBackend> Shared<B> {
    /// Collects retired entries a few at a time and deregisters the idle
    /// ones, freeing everything with the lock released.
    ///
    /// `held` is the write lock if the caller holds it: the first batch is
    /// then taken without locking again.
    pub(super) fn drain_retired(&self, mut held: Option<RwLockWriteGuard<'_, Index<B>>>) {
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

    pub(super) fn deregister(&self, entry: &Entry<B>) {
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
    pub(super) fn release(&self, entry: &Entry<B>) -> Released {
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
    pub(super) fn evict_over_limits(&self) {
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
