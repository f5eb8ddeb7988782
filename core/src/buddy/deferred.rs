//! The allocator's side of deferred coalescing: freeing into the free
//! caches, retiring a block the caller gave back, and flushing the caches
//! (merging cached blocks back into the tables), with the sizes a flush
//! would leave for `stats`.
//!
//! The stacks themselves are the `cache` module's; this module decides
//! when a block goes onto them and when they are flushed (the rules are in
//! the public documentation of the `buddy` module).

use super::chunk::{block_len, run_mask, CHUNK_ORDER};
use super::layout::{Block, CHUNK_UNITS, FREE, LIVE, PAYLOAD, SMALL, TAG};
use super::{AllocError, BuddyAllocator, FreeError};

impl BuddyAllocator {
    /// The common case of [`free`](Self::free), kept small: a live block
    /// whose stack and the byte bound have room goes onto the stack. `None`
    /// for everything else (errors, flushes, merging), which
    /// [`free_slow`](Self::free_slow) sorts out from the start.
    #[inline(always)]
    fn free_to_cache(&mut self, offset: u64) -> Option<u64> {
        let unit = offset >> self.unit_shift;
        if unit << self.unit_shift != offset || unit >= self.units {
            return None;
        }
        // Below `units`, so the chunk index fits the head table.
        let chunk = (unit >> CHUNK_ORDER) as usize;
        let first = (unit & (CHUNK_UNITS - 1)) as u32;
        let h = *self.head.get(chunk)?;
        let order = if h == SMALL {
            let bits = *self.small_bits(chunk)?;
            if bits.starts >> first & 1 == 0 {
                return None;
            }
            block_len(bits, first).trailing_zeros()
        } else if h & TAG == LIVE && first == 0 {
            u32::from(h & PAYLOAD) + CHUNK_ORDER
        } else {
            return None;
        };
        if self.cache.holds(order, offset) || !self.cache.try_push(order, offset) {
            return None;
        }
        Some(1 << order << self.unit_shift)
    }

    /// [`free`](Self::free) of a block other than the last one handed out.
    #[inline(never)]
    pub(super) fn free_other(&mut self, offset: u64) -> Result<u64, FreeError> {
        match self.free_to_cache(offset) {
            Some(bytes) => Ok(bytes),
            None => self.free_slow(offset),
        }
    }

    /// [`free`](Self::free) when the block does not simply go onto its
    /// stack.
    #[inline(never)]
    pub(super) fn free_slow(&mut self, offset: u64) -> Result<u64, FreeError> {
        self.last.forget(offset);
        let block = self.locate_live(offset)?;
        Ok(self.retire(block, offset))
    }

    /// Allocates a block of `order` from the tables; when none is free,
    /// flushes the caches and tries once more.
    pub(super) fn alloc_uncached(&mut self, order: u32) -> Result<u64, AllocError> {
        // Larger than the heap: no flush can help.
        self.within_heap(order)?;
        match self.alloc_order(order) {
            Err(AllocError::OutOfMemory) if self.cache.blocks() != 0 => {
                self.flush();
                self.alloc_order(order)
            }
            other => other,
        }
    }

    /// Frees a located live block on behalf of the caller: into the cache
    /// of its order when the limits allow (flushing what they ask for),
    /// merged at once otherwise. Returns its size in bytes.
    #[inline]
    pub(super) fn retire(&mut self, block: Block, offset: u64) -> u64 {
        let order = block.unit_order();
        if self.cache.try_push(order, offset) {
            return 1 << order << self.unit_shift;
        }
        self.retire_slow(block, offset)
    }

    /// [`retire`](Self::retire) when the block does not fit the cache as it
    /// is: flush what the limits ask for, then cache or merge it.
    #[cold]
    fn retire_slow(&mut self, block: Block, offset: u64) -> u64 {
        let order = block.unit_order();
        if self.cache.admits(order) {
            // The oldest block makes room: merging the whole stack would
            // split it all again when a burst of frees is slightly longer
            // than the stack.
            if self.cache.is_full(order) {
                if let Some(oldest) = self.cache.evict_oldest(order) {
                    if let Ok(old) = self.locate(oldest) {
                        self.release(old);
                    }
                }
            }
            // Everything, not just what the block needs: that would flush
            // again at the next miss of another order.
            if !self.cache.fits(1 << order) {
                self.flush();
            }
            if self.cache.try_push(order, offset) {
                return 1 << order << self.unit_shift;
            }
        }
        self.release(block)
    }

    /// Merges the cached blocks of `order` back, oldest first.
    pub(super) fn flush_order(&mut self, order: u32) {
        let n = self.cache.clear(order);
        for i in 0..n {
            let Some(&offset) = self.cache.stack_slots(order, n).get(i) else {
                break;
            };
            // Cached blocks are live in the tables (checked by
            // `check_consistency`), so this always finds one.
            if let Ok(block) = self.locate(offset) {
                self.release(block);
            }
        }
    }

    /// Units of the largest block that some cached block would end up in
    /// after a flush (0 when nothing is cached).
    pub(super) fn largest_cached_merge(&self) -> u64 {
        let mut largest = None;
        for order in 0..self.cache.orders() as u32 {
            for &offset in self.cache.stack(order) {
                let top = self.merged_order(offset >> self.unit_shift, order);
                largest = largest.max(Some(top));
            }
        }
        largest.map_or(0, |order| 1 << order)
    }

    /// Order of the block that the cached block of `order` at `unit` would
    /// merge into if the caches were flushed.
    fn merged_order(&self, mut unit: u64, mut order: u32) -> u32 {
        while order < 63 && 2u64 << order <= self.units {
            let buddy = unit ^ (1 << order);
            if !self.free_after_flush(buddy, order) {
                break;
            }
            unit &= !(1 << order);
            order += 1;
        }
        order
    }

    /// Whether the aligned region of `order` at `unit`, the buddy of a
    /// cached block or of a block it merged into, would be one free block
    /// after a flush: it is a free or cached block, or both of its halves
    /// are such regions. (No block larger than the region covers it: that
    /// block would cover its cached buddy too.) The recursion only goes
    /// down through split regions, so it visits O(cached blocks × depth)
    /// regions before an answer.
    fn free_after_flush(&self, unit: u64, order: u32) -> bool {
        let Ok(chunk) = usize::try_from(unit >> CHUNK_ORDER) else {
            return false;
        };
        let Some(&h) = self.head.get(chunk) else {
            return false;
        };
        if h & TAG == SMALL {
            if order <= CHUNK_ORDER {
                let Some(bits) = self.small_bits(chunk) else {
                    return false;
                };
                let region = run_mask((unit & (CHUNK_UNITS - 1)) as u32, 1 << order);
                return bits.used & !self.cached_units_in(chunk) & region == 0;
            }
        } else {
            let Some(k) = order.checked_sub(CHUNK_ORDER) else {
                return false;
            };
            let payload = u32::from(h & PAYLOAD);
            match h & TAG {
                FREE if payload == k => return true,
                LIVE if payload == k => return self.cache.holds(order, unit << self.unit_shift),
                FREE | LIVE if payload < k => {}
                _ => return false,
            }
        }
        let half = 1u64 << (order - 1);
        self.free_after_flush(unit, order - 1) && self.free_after_flush(unit + half, order - 1)
    }

    /// Units of `chunk` in cached small blocks.
    fn cached_units_in(&self, chunk: usize) -> u64 {
        let mut mask = 0;
        for order in 0..CHUNK_ORDER {
            for &offset in self.cache.stack(order) {
                let unit = offset >> self.unit_shift;
                if unit >> CHUNK_ORDER == chunk as u64 {
                    mask |= run_mask((unit & (CHUNK_UNITS - 1)) as u32, 1 << order);
                }
            }
        }
        mask
    }
}
