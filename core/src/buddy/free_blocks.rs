//! Listing the free blocks: [`FreeBlock`] and the [`FreeBlocks`] iterator.

use super::chunk::{exact_free, CHUNK_ORDER, SMALL_ORDERS};
use super::layout::{FREE, LIVE, PAYLOAD, SMALL, TAG};
use super::BuddyAllocator;

/// One free block, as listed by [`BuddyAllocator::free_blocks`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FreeBlock {
    /// Offset of the block.
    pub offset: u64,
    /// Size of the block in bytes (a power of two).
    pub size: u64,
}

/// Iterator over the free blocks of a [`BuddyAllocator`] in offset order,
/// from [`BuddyAllocator::free_blocks`].
#[derive(Debug)]
pub struct FreeBlocks<'a> {
    heap: &'a BuddyAllocator,
    /// Next chunk whose head to read.
    next_chunk: usize,
    /// Small chunk whose free blocks are in `pending`.
    chunk: usize,
    /// Per small order, free block starts of `chunk` not yet yielded.
    pending: [u64; SMALL_ORDERS],
}

impl<'a> FreeBlocks<'a> {
    /// Starts at the first chunk of `heap`.
    pub(super) fn new(heap: &'a BuddyAllocator) -> Self {
        FreeBlocks {
            heap,
            next_chunk: 0,
            chunk: 0,
            pending: [0; SMALL_ORDERS],
        }
    }
}

impl Iterator for FreeBlocks<'_> {
    type Item = FreeBlock;

    fn next(&mut self) -> Option<FreeBlock> {
        let shift = self.heap.unit_shift;
        loop {
            let starts = self.pending.iter().fold(0, |acc, m| acc | m);
            if starts != 0 {
                let first = starts.trailing_zeros();
                let order = self.pending.iter().position(|m| m >> first & 1 == 1)?;
                self.pending[order] &= !(1 << first);
                return Some(FreeBlock {
                    offset: self.heap.offset_of(self.chunk, first),
                    size: 1 << order << shift,
                });
            }
            let c = self.next_chunk;
            let h = *self.heap.head.get(c)?;
            let order = u32::from(h & PAYLOAD);
            match h & TAG {
                FREE => {
                    self.next_chunk += 1 << order;
                    return Some(FreeBlock {
                        offset: self.heap.offset_of(c, 0),
                        size: 1 << (order + CHUNK_ORDER) << shift,
                    });
                }
                LIVE => self.next_chunk += 1 << order,
                SMALL => {
                    if let Some(bits) = self.heap.small_bits(c) {
                        self.pending = exact_free(bits.used);
                    }
                    self.chunk = c;
                    self.next_chunk += 1;
                }
                _ => self.next_chunk += 1,
            }
        }
    }
}
