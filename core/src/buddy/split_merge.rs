//! Splitting and merging: allocating a block of an order from the tables
//! (splitting a larger free block), giving a block back (merging it with
//! its free buddies), and resizing a live block in place.
//!
//! Blocks below a chunk are split and merged inside their chunk's words;
//! a chunk that empties is merged on as a large block.

use super::chunk::{exact_free_of, run_mask, ChunkBits, CHUNK_ORDER};
use super::layout::{Block, LIVE, SMALL};
use super::small::group_bits;
use super::{AllocError, BuddyAllocator, ReallocError};

impl BuddyAllocator {
    #[inline]
    pub(super) fn alloc_order(&mut self, order: u32) -> Result<u64, AllocError> {
        if order < CHUNK_ORDER {
            return self.alloc_small(order);
        }
        let k = order - CHUNK_ORDER;
        let (chunk, from) = self.find_big(k).ok_or(AllocError::OutOfMemory)?;
        self.take_big(chunk, from, k);
        self.free_units -= 1 << order;
        self.live_blocks += 1;
        Ok(self.offset_of(chunk, 0))
    }

    #[inline]
    fn alloc_small(&mut self, order: u32) -> Result<u64, AllocError> {
        // The free block of order `split` at `first` is cut down to `order`.
        let (chunk, first, split) = match self.small_free_block(order) {
            Some((chunk, free, split)) => {
                if free & (free - 1) == 0 {
                    // It was the chunk's only free block of that order.
                    self.unmark_small_free(chunk, 1 << split);
                }
                (chunk, free.trailing_zeros(), split)
            }
            None => {
                let (chunk, from) = self.find_big(0).ok_or(AllocError::OutOfMemory)?;
                self.ensure_group(chunk)?;
                self.take_big(chunk, from, 0);
                self.head[chunk] = SMALL;
                (chunk, 0, CHUNK_ORDER)
            }
        };
        let bits = self.small_bits_mut(chunk);
        bits.used |= run_mask(first, 1 << order);
        bits.starts |= 1 << first;
        // The split leaves its right halves, of orders `order..split`, free.
        self.mark_small_free(chunk, ((1u32 << split) - (1u32 << order)) as u8);
        self.free_units -= 1 << order;
        self.live_blocks += 1;
        Ok(self.offset_of(chunk, first))
    }

    /// Lowest chunk with a free small block of the smallest order at least
    /// `order`, as (chunk, starts of its free blocks of that order, the
    /// order); drops stale bitmap entries met.
    #[inline]
    fn small_free_block(&mut self, order: u32) -> Option<(usize, u64, u32)> {
        let mut fits = self.small_mask >> order;
        while fits != 0 {
            let j = order + fits.trailing_zeros();
            let set = &mut self.small_free[j as usize];
            while let Some(chunk) = set.first() {
                if self.head[chunk] == SMALL {
                    if let Some(bits) = group_bits(&self.groups, chunk) {
                        let free = exact_free_of(bits.used, j);
                        if free != 0 {
                            return Some((chunk, free, j));
                        }
                    }
                }
                set.remove(chunk);
            }
            self.small_mask &= !(1 << j);
            fits &= fits - 1;
        }
        None
    }

    /// Frees a located live block; returns its size in bytes.
    #[inline]
    pub(super) fn release(&mut self, block: Block) -> u64 {
        match block {
            Block::Small {
                chunk,
                first,
                order,
            } => {
                let bits = self.small_bits_mut(chunk);
                bits.used &= !run_mask(first, 1 << order);
                bits.starts &= !(1 << first);
                let used = bits.used;
                // Merge with free buddies inside the chunk: the merged block
                // is new, the buddies it absorbed are gone.
                let (mut at, mut merged) = (first, order);
                while merged < CHUNK_ORDER {
                    let buddy = at ^ (1 << merged);
                    if used & run_mask(buddy, 1 << merged) != 0 {
                        break;
                    }
                    at &= !(1 << merged);
                    merged += 1;
                }
                let absorbed = ((1u32 << merged) - (1u32 << order)) as u8;
                if merged == CHUNK_ORDER {
                    self.unmark_small_free(chunk, absorbed);
                    self.release_big(chunk, 0);
                } else {
                    // Entries for the absorbed orders may go stale: the
                    // chunk can still have other free blocks of them, and
                    // checking costs more here than a lookup dropping them.
                    self.mark_small_free(chunk, 1 << merged);
                }
            }
            Block::Big { chunk, order } => self.release_big(chunk, order),
        }
        let units = 1u64 << block.unit_order();
        self.free_units += units;
        self.live_blocks -= 1;
        units << self.unit_shift
    }

    /// Shrinks a live block in place to `order` (not above its order).
    pub(super) fn shrink(&mut self, block: Block, order: u32) -> Result<(), ReallocError> {
        match block {
            Block::Small {
                chunk,
                first,
                order: old,
            } => {
                let bits = self.small_bits_mut(chunk);
                bits.used &= !run_mask(first + (1 << order), (1 << old) - (1 << order));
                // The tail halves, of orders `order..old`, are free now.
                self.mark_small_free(chunk, ((1u32 << old) - (1u32 << order)) as u8);
            }
            Block::Big { chunk, order: old } if order >= CHUNK_ORDER => {
                let k = order - CHUNK_ORDER;
                for i in k..old {
                    self.push_free_big(chunk + (1 << i), i);
                }
                self.head[chunk] = LIVE | k as u8;
            }
            Block::Big { chunk, order: old } => {
                self.ensure_group(chunk)
                    .map_err(|_| ReallocError::OutOfMetadata)?;
                for i in 0..old {
                    self.push_free_big(chunk + (1 << i), i);
                }
                let used = run_mask(0, 1 << order);
                *self.small_bits_mut(chunk) = ChunkBits { used, starts: 1 };
                self.head[chunk] = SMALL;
                self.mark_small_free(chunk, ((1u32 << CHUNK_ORDER) - (1u32 << order)) as u8);
            }
        }
        self.free_units += (1 << block.unit_order()) - (1u64 << order);
        Ok(())
    }

    /// Grows a live block in place to `order` (above its order) when its
    /// buddies up to that order are free; false (nothing changed) otherwise.
    pub(super) fn grow(&mut self, block: Block, order: u32) -> bool {
        match block {
            Block::Small {
                chunk,
                first,
                order: old,
            } if order < CHUNK_ORDER => {
                let len = 1u32 << order;
                if first % len != 0 {
                    return false;
                }
                let extra = run_mask(first + (1 << old), len - (1 << old));
                let bits = self.small_bits_mut(chunk);
                if bits.used & extra != 0 {
                    return false;
                }
                // The buddies taken go stale in the small-order bitmaps.
                bits.used |= extra;
            }
            Block::Small {
                chunk,
                first,
                order: old,
            } => {
                let k = order - CHUNK_ORDER;
                let alone = self.small_bits_mut(chunk).used == run_mask(0, 1 << old);
                if first != 0 || !alone || !self.buddies_free(chunk, 0, k) {
                    return false;
                }
                *self.small_bits_mut(chunk) = ChunkBits::default();
                self.take_buddies(chunk, 0, k);
                self.head[chunk] = LIVE | k as u8;
            }
            Block::Big { chunk, order: old } => {
                let k = order - CHUNK_ORDER;
                if !self.buddies_free(chunk, old, k) {
                    return false;
                }
                self.take_buddies(chunk, old, k);
                self.head[chunk] = LIVE | k as u8;
            }
        }
        self.free_units -= (1u64 << order) - (1 << block.unit_order());
        true
    }
}
