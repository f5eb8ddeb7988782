//! The hit path of the registration cache.
//!
//! A hit takes only the index read lock and allocates nothing: it first
//! probes the home table; failing that it tries a hint, checks that node
//! against the request, and otherwise walks the tree and updates the hint
//! (see the `index` module). The reference count and the hit counter share
//! one word of the home slot, taken with one atomic add, so lookups do not
//! wait for each other; a slot's hits move to the cache-wide counter long
//! before that field could wrap.

use alloc::sync::Arc;
use core::sync::atomic::{AtomicU64, Ordering};

use super::index::{Entry, Index, Slot, HIT_ONE, REFS_MASK};
use super::{Access, GetError, Registration, RegistrationBackend, Shared, TransportId};

/// More references than this on one entry are refused rather than risk the
/// count running into the fields above it.
const MAX_REFS: u64 = 1 << 23;
/// A slot's hit field is moved to the cache-wide counter when it reaches
/// this, long before it could wrap (the field holds 16 bits).
const HIT_HARVEST: u64 = 1 << 15;

impl<B: RegistrationBackend> Shared<B> {
    /// The hit path: read lock, find, one atomic add.
    #[inline(always)]
    pub(super) fn lookup(
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
}
