//! Buddy allocator over the offsets of a symmetric heap.
//!
//! [`BuddyAllocator`] hands out offsets in `[0, heap_size)`; it never reads or
//! writes the heap itself, so the heap may live in memory that remote peers
//! write. All of its state lives in side tables on the host heap.
//!
//! # Blocks
//!
//! Blocks are power-of-two multiples of the minimum block (64 B by default,
//! any power of two when built with [`BuddyAllocator::with_min_block`]),
//! aligned to their own size. The heap need not be a power of two: the part
//! rounded down to the minimum block is covered with the maximal aligned
//! power-of-two blocks (a 4 GiB + 4 KiB heap starts as one 4 GiB and one
//! 4 KiB free block); the remainder smaller than the minimum block is never
//! used. Offsets are `u64`, so heaps past 4 GiB work.
//!
//! A request takes the newest cached block of its order (see below) or else
//! the free block of the smallest order that fits and, among those, the one
//! at the lowest offset. Every decision depends on the call sequence only,
//! so the same sequence of calls gives the same offsets on every process,
//! which is what a symmetric heap needs.
//!
//! # Free caches (deferred coalescing)
//!
//! A freed block is not merged at once: it goes onto a LIFO stack of its
//! order, and the next request of that order takes it back in O(1), without
//! the split and merge cascade (which on an empty heap costs one step per
//! order, so it grows with the heap size). The tables keep counting a
//! cached block as live; the stacks hold only offsets, on the host heap.
//! Cached blocks are merged back (*flushed*):
//!
//! - when a request finds no free block (all stacks, then one more try; so
//!   a request fails only if it fails with every freed block merged);
//! - when a stack is full ([`CacheLimits::blocks_per_order`], 32 by
//!   default): its oldest block, before the new block goes on it;
//! - when the byte bound ([`CacheLimits::max_bytes`], 1/16 of the heap by
//!   default) would be passed: all stacks, before the new block goes on its
//!   stack (a block above the bound merges at once instead);
//! - on [`BuddyAllocator::flush`] and [`BuddyAllocator::set_cache_limits`].
//!
//! The merged result does not depend on the order of the merges, so a flush
//! is deterministic too. [`BuddyAllocator::stats`] counts cached blocks as
//! free *and merged*: its figures are those a flush would leave, and the
//! largest free block is the largest request that succeeds.
//! [`BuddyAllocator::free_blocks`] lists the free blocks of the tables only;
//! after freeing every block, it lists the initial free blocks again once
//! the caches are flushed. Growing in place ([`BuddyAllocator::realloc`])
//! does not take cached buddies.
//!
//! # Costs
//!
//! An allocation or a free costs O(1) amortized plus one step per order it
//! splits or merges (O(log n) at most); a request served from a free cache,
//! and a free that goes onto one, cost O(1). Freeing needs no size: the
//! allocator remembers the order of every live block. Freeing the block
//! handed out last (a temporary buffer, the usual alloc/free pair) reads no
//! table. Freeing a block that is already free, or waiting in a free
//! cache, is reported ([`FreeError::DoubleFree`]).
//!
//! # Metadata cost
//!
//! The side tables see the heap as *chunks* of 64 minimum blocks (4 KiB by
//! default). Blocks smaller than a chunk take two more words per chunk, in
//! *groups* of 64 chunks allocated when a 256 KiB region first holds small
//! blocks. With `n = heap_size / min_block` minimum blocks,
//! `C = ⌈n / 64⌉` chunks and `G ≤ ⌈C / 64⌉` groups created so far,
//! [`BuddyAllocator::metadata_bytes`] is about
//!
//! ```text
//! C             head bytes
//! + 2C / 8      free bitmaps of the large orders
//! + 6C / 8      small-order chunk bitmaps
//! + 8C / 64     group directory
//! (+ 1/63 on the bitmaps for summary words, + a few hundred bytes)
//! ≈ 2.15 C bytes, + 1024 G bytes for the small-block words
//! + 256 B per order (log2 n + 1 orders) for the free-cache stacks.
//! ```
//!
//! With 64 B minimum blocks, a chunk is 4 KiB: the fixed part is 0.053 % of
//! the heap (8.6 MiB for 16 GiB) and the small-block words add at most
//! 0.39 % where small blocks are used: 0.44 % (73 MiB for 16 GiB) in the
//! worst case, with small blocks in every 256 KiB of the heap. A larger
//! minimum block divides all of it in proportion. The free caches add
//! `8 × blocks_per_order` bytes per order (256 B with the default 32; 7.3 KiB
//! for 16 GiB).
//!
//! # Example
//!
//! ```
//! use fireopal_core::buddy::{BuddyAllocator, Realloc};
//!
//! let mut heap = BuddyAllocator::new(1 << 20).unwrap();
//! let a = heap.alloc(100, 8).unwrap(); // a 128 B block
//! let b = heap.alloc(4096, 4096).unwrap();
//! assert_eq!(a, 0);
//! assert_eq!(b % 4096, 0);
//! // Growing into the free buddy keeps the offset.
//! assert!(matches!(heap.realloc(a, 200, 8), Ok(Realloc::InPlace { offset: 0, .. })));
//! heap.free(a).unwrap();
//! // The block waits in the cache of its order; the next 4 KiB request
//! // takes it back.
//! heap.free(b).unwrap();
//! assert_eq!(heap.alloc(4000, 8), Ok(b));
//! heap.free(b).unwrap();
//! // Stats count cached blocks as merged: the whole heap is free.
//! assert_eq!(heap.stats().largest_free_block, 1 << 20);
//! heap.flush();
//! assert_eq!(heap.free_blocks().count(), 1);
//! ```

// How it is built; each module documents its own part:
// - `layout`: the side tables (head bytes, free bitmaps, small-block words)
//   and finding a live block from its offset;
// - `large` and `small`: the free blocks of a chunk or more, and those
//   below a chunk;
// - `split_merge`: taking a free block (splitting it) and giving one back
//   (merging it with its buddies), in both tiers, and resizing in place;
// - `cache` (the stacks) and `deferred` (when blocks go onto them and when
//   they are flushed): deferred coalescing;
// - `bitmap` and `chunk`: the bitmaps with summary words, and the word
//   arithmetic of a chunk of small blocks;
// - `free_blocks`, `consistency` and `error`: listing free blocks, checking
//   the tables, and the error values.

mod bitmap;
mod cache;
mod chunk;
mod consistency;
mod deferred;
mod error;
mod free_blocks;
mod large;
mod layout;
mod small;
mod split_merge;

pub use cache::{CacheLimits, CacheLimitsError};
pub use error::{AllocError, FreeError, Inconsistency, NewError, ReallocError};
pub use free_blocks::{FreeBlock, FreeBlocks};

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use core::mem::size_of;

use bitmap::SummaryBitmap;
use cache::{FreeCache, LastBlock};
use chunk::{avail, run_mask, ChunkBits};
use chunk::{CHUNK_ORDER, SMALL_ORDERS};
use layout::{CHUNK_UNITS, INSIDE, SMALL};
use small::{Group, GROUP_CHUNKS};

/// What [`BuddyAllocator::realloc`] did.
///
/// The allocator never touches heap memory, so moving the contents is the
/// caller's job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Realloc {
    /// The block was resized where it is; nothing to copy.
    InPlace {
        /// The block's offset (unchanged).
        offset: u64,
        /// The block's size in bytes after the call.
        block_size: u64,
    },
    /// The data must move. `new` is live, `old` is already free: the caller
    /// copies `copy_len` bytes from `old` to `new` before the next call that
    /// allocates (the two blocks do not overlap).
    Moved {
        /// Offset of the block given to `realloc`, now free.
        old: u64,
        /// Offset of the new live block.
        new: u64,
        /// Bytes to copy: the smaller of the old block's size and the new
        /// size asked for.
        copy_len: u64,
    },
}

impl Realloc {
    /// Offset of the block that is live after the call.
    pub fn offset(&self) -> u64 {
        match *self {
            Realloc::InPlace { offset, .. } => offset,
            Realloc::Moved { new, .. } => new,
        }
    }
}

/// Occupancy figures of a [`BuddyAllocator`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
    /// Heap size given at creation.
    pub heap_bytes: u64,
    /// Part of the heap that is managed (heap size rounded down to the
    /// minimum block).
    pub managed_bytes: u64,
    /// Bytes in free blocks.
    pub free_bytes: u64,
    /// Size of the largest free block (the largest request that succeeds
    /// with an alignment not above it).
    pub largest_free_block: u64,
    /// Number of live blocks.
    pub live_blocks: u64,
    /// Bytes in live blocks (sizes rounded up to blocks).
    pub live_bytes: u64,
    /// Bytes in freed blocks waiting in the free caches (counted in
    /// `free_bytes` too).
    pub cached_bytes: u64,
}

/// Buddy allocator over the offsets `[0, heap_size)` of a heap it never
/// touches. See the [module documentation](self) for the design and costs.
///
/// Not thread-safe by itself (methods take `&mut self`); it is `Send`, so a
/// host can put it behind its own lock.
pub struct BuddyAllocator {
    heap_size: u64,
    /// log2 of the minimum block.
    unit_shift: u32,
    /// Managed minimum blocks.
    units: u64,
    /// Chunks made only of managed units; the last chunk is partial when
    /// `units` is not a multiple of 64.
    full_chunks: usize,
    /// One head byte per chunk (see `FREE`, `LIVE`, `SMALL`, `INSIDE`).
    head: Vec<u8>,
    /// Per chunk order `k`: free blocks of that order, by `chunk >> k`. A
    /// superset: entries whose head byte no longer says free are dropped
    /// when a lookup meets them.
    big_free: Vec<SummaryBitmap>,
    /// Per chunk order: number of free blocks (exact).
    big_count: Vec<usize>,
    /// Bit `k`: there is a free block of chunk order `k`.
    big_mask: u64,
    /// Per small order `j`: chunks with a free block of exactly order `j`.
    /// A superset too: a chunk is added when it gains a free block of that
    /// order and removed when an allocation takes its last one or the chunk
    /// empties. Merges on free and growth in place leave entries that a
    /// lookup drops when it finds the chunk has no such block (its used word
    /// is the truth).
    small_free: [SummaryBitmap; SMALL_ORDERS],
    /// Bit `j`: `small_free[j]` may hold a chunk with a free block of order
    /// `j` (set whenever one is added; cleared when the set empties).
    small_mask: u8,
    /// Small-block words, one group per 64 chunks, created on first use.
    groups: Vec<Option<Box<Group>>>,
    /// Number of `Some` in `groups`.
    group_count: usize,
    /// Free minimum blocks, not counting cached blocks.
    free_units: u64,
    /// Live blocks, counting cached blocks (the tables see them as live).
    live_blocks: u64,
    /// Freed blocks not merged yet (see [`FreeCache`]).
    cache: FreeCache,
    /// The block handed out last, for `free`.
    last: LastBlock,
}

impl fmt::Debug for BuddyAllocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BuddyAllocator")
            .field("min_block", &self.min_block())
            .field("stats", &self.stats())
            .field("metadata_bytes", &self.metadata_bytes())
            .finish()
    }
}

impl BuddyAllocator {
    /// Minimum block used by [`BuddyAllocator::new`].
    pub const DEFAULT_MIN_BLOCK: u64 = 64;

    /// An allocator for a heap of `heap_size` bytes with 64 B minimum blocks.
    pub fn new(heap_size: u64) -> Result<Self, NewError> {
        Self::with_min_block(heap_size, Self::DEFAULT_MIN_BLOCK)
    }

    /// An allocator for a heap of `heap_size` bytes whose smallest block is
    /// `min_block` bytes (a power of two). Everything starts free.
    pub fn with_min_block(heap_size: u64, min_block: u64) -> Result<Self, NewError> {
        if !min_block.is_power_of_two() {
            return Err(NewError::InvalidMinBlock);
        }
        let unit_shift = min_block.trailing_zeros();
        let units = heap_size >> unit_shift;
        let full_chunks =
            usize::try_from(units >> CHUNK_ORDER).map_err(|_| NewError::OutOfMetadata)?;
        let tail = (units & (CHUNK_UNITS - 1)) as u32;
        let chunks = full_chunks
            .checked_add(usize::from(tail != 0))
            .ok_or(NewError::OutOfMetadata)?;

        let mut head = Vec::new();
        head.try_reserve_exact(chunks)
            .map_err(|_| NewError::OutOfMetadata)?;
        head.resize(chunks, INSIDE);

        let big_orders = (usize::BITS - full_chunks.leading_zeros()) as usize;
        let mut big_free = Vec::new();
        big_free
            .try_reserve_exact(big_orders)
            .map_err(|_| NewError::OutOfMetadata)?;
        for k in 0..big_orders {
            big_free.push(SummaryBitmap::new(full_chunks >> k)?);
        }
        let mut big_count = Vec::new();
        big_count
            .try_reserve_exact(big_orders)
            .map_err(|_| NewError::OutOfMetadata)?;
        big_count.resize(big_orders, 0);
        let small = || SummaryBitmap::new(chunks);
        let small_free = [small()?, small()?, small()?, small()?, small()?, small()?];

        let unit_orders = (u64::BITS - units.leading_zeros()) as usize;
        let mut cache = FreeCache::new(unit_orders);
        cache
            .set_limits(CacheLimits::for_heap(units << unit_shift), unit_shift)
            .map_err(|_| NewError::OutOfMetadata)?;

        let mut groups = Vec::new();
        let group_slots = chunks.div_ceil(GROUP_CHUNKS);
        groups
            .try_reserve_exact(group_slots)
            .map_err(|_| NewError::OutOfMetadata)?;
        groups.resize_with(group_slots, || None);

        let mut heap = Self {
            heap_size,
            unit_shift,
            units,
            full_chunks,
            head,
            big_free,
            big_count,
            big_mask: 0,
            small_free,
            small_mask: 0,
            groups,
            group_count: 0,
            free_units: units,
            live_blocks: 0,
            cache,
            last: LastBlock::new(),
        };
        // Largest roots first, so each is aligned to its size.
        let mut c = 0usize;
        for k in (0..big_orders as u32).rev() {
            if full_chunks >> k & 1 == 1 {
                heap.push_free_big(c, k);
                c += 1 << k;
            }
        }
        if tail != 0 {
            // The units past the end form a filler block that is never freed.
            heap.ensure_group(full_chunks)
                .map_err(|_| NewError::OutOfMetadata)?;
            let used = !run_mask(0, tail);
            *heap.small_bits_mut(full_chunks) = ChunkBits {
                used,
                starts: 1 << tail,
            };
            heap.head[full_chunks] = SMALL;
            heap.mark_small_free(full_chunks, avail(used));
        }
        Ok(heap)
    }

    /// Heap size given at creation.
    pub fn heap_size(&self) -> u64 {
        self.heap_size
    }

    /// Smallest block, in bytes.
    #[inline]
    pub fn min_block(&self) -> u64 {
        1 << self.unit_shift
    }

    /// Bytes under management: the heap size rounded down to the minimum
    /// block.
    #[inline]
    pub fn managed_bytes(&self) -> u64 {
        self.units << self.unit_shift
    }

    /// Allocates a block of at least `size` bytes whose offset is a multiple
    /// of `align` (a power of two) and returns its offset.
    ///
    /// The block is `size` rounded up to a power of two, at least the minimum
    /// block and at least `align` (a buddy block is aligned to its size).
    /// Alignment is of offsets: the heap base must be aligned at least as
    /// much for addresses to be. Errors are checked in this order: zero size,
    /// alignment, then room.
    ///
    /// The newest cached block of the block's order is taken first; without
    /// one, the lowest free block of the smallest fitting order is split.
    /// When nothing fits, the caches are flushed and the request tried once
    /// more, so `OutOfMemory` means the request does not fit even with every
    /// freed block merged.
    #[inline]
    pub fn alloc(&mut self, size: u64, align: u64) -> Result<u64, AllocError> {
        let order = self.order_for(size, align)?;
        let offset = match self.cache.lend(order) {
            Some(offset) => offset,
            None => self.alloc_uncached(order)?,
        };
        self.last.remember(offset, order);
        Ok(offset)
    }

    /// Frees the live block at `offset` and returns its size in bytes.
    ///
    /// The block goes onto the free cache of its order without merging;
    /// when that stack is full its oldest block is merged first, and when
    /// the byte bound would be passed all cached blocks are (a block above
    /// the byte bound merges at once). See [`flush`](Self::flush).
    #[inline]
    pub fn free(&mut self, offset: u64) -> Result<u64, FreeError> {
        if let Some(order) = self.last.take(offset) {
            if self.cache.give_back(order) || self.cache.try_push(order, offset) {
                return Ok(1 << order << self.unit_shift);
            }
            return self.free_slow(offset);
        }
        self.free_other(offset)
    }

    /// Merges every cached block back into the free blocks.
    ///
    /// Afterwards [`free_blocks`](Self::free_blocks) lists all free space,
    /// maximally merged: once every live block is freed and the caches
    /// flushed, it lists the initial free blocks again. The result does not
    /// depend on the order of the merges, and [`stats`](Self::stats) is the
    /// same before and after.
    pub fn flush(&mut self) {
        for order in 0..self.cache.orders() as u32 {
            self.flush_order(order);
        }
    }

    /// The bounds of the free caches in force.
    pub fn cache_limits(&self) -> CacheLimits {
        self.cache.limits(self.unit_shift)
    }

    /// Flushes the caches, then sets new bounds for them
    /// ([`CacheLimits::OFF`] turns them off). The defaults are
    /// [`CacheLimits::for_heap`] of the managed size.
    pub fn set_cache_limits(&mut self, limits: CacheLimits) -> Result<(), CacheLimitsError> {
        self.flush();
        self.cache.set_limits(limits, self.unit_shift)
    }

    /// Size in bytes of the live block at `offset`, or `None` when no live
    /// block starts there.
    pub fn block_size(&self, offset: u64) -> Option<u64> {
        let block = self.locate_live(offset).ok()?;
        Some(1 << block.unit_order() << self.unit_shift)
    }

    /// Resizes the live block at `offset` to hold `new_size` bytes at an
    /// offset that is a multiple of `align`.
    ///
    /// In place when the block shrinks (the freed tail becomes free blocks)
    /// or when the buddies it needs to grow into are free; otherwise a new
    /// block is allocated while the old one is still live, then the old one
    /// is freed (into the free cache, as by [`free`](Self::free)), and
    /// [`Realloc::Moved`] tells the caller what to copy. Cached blocks are
    /// not free space for growing in place. On error no block changed (a
    /// failed move may have flushed the caches, as a failed
    /// [`alloc`](Self::alloc) does). A `new_size` of zero is an error
    /// ([`ReallocError::ZeroSize`]): use [`free`](Self::free) to release.
    pub fn realloc(
        &mut self,
        offset: u64,
        new_size: u64,
        align: u64,
    ) -> Result<Realloc, ReallocError> {
        // The block recorded as handed out last changes below: no block may
        // stay lent from a free cache without being the recorded one.
        self.cache.settle();
        let order = self.order_for(new_size, align);
        if let Err(e @ (AllocError::ZeroSize | AllocError::InvalidAlignment)) = order {
            return Err(e.into());
        }
        let block = self.locate_live(offset).map_err(ReallocError::Offset)?;
        let order = self.within_heap(order?)?;
        // Its order changes or it is freed; entered again below.
        self.last.forget(offset);
        if offset & (align - 1) == 0 {
            let in_place = if order <= block.unit_order() {
                self.shrink(block, order)?;
                true
            } else {
                self.grow(block, order)
            };
            if in_place {
                self.last.remember(offset, order);
                return Ok(Realloc::InPlace {
                    offset,
                    block_size: 1 << order << self.unit_shift,
                });
            }
        }
        let new = match self.cache.pop(order) {
            Some(new) => new,
            None => self.alloc_uncached(order)?,
        };
        self.last.remember(new, order);
        let old_size = self.retire(block, offset);
        Ok(Realloc::Moved {
            old: offset,
            new,
            copy_len: old_size.min(new_size),
        })
    }

    /// Current occupancy, counting cached blocks as free and as merged:
    /// the figures are those [`flush`](Self::flush) would leave, and
    /// `largest_free_block` is the largest request that succeeds.
    ///
    /// O(1) when the caches are empty and a chunk-sized block (64 minimum
    /// blocks) is free. Otherwise finding the largest free block walks the
    /// small-block bitmaps, and each cached block is followed up through
    /// the buddies it would merge with (bounded by the cache limits, not
    /// the heap size).
    pub fn stats(&self) -> Stats {
        let free_units = self.free_units + self.cache.units();
        let largest_units = if self.big_mask != 0 {
            1 << (63 - self.big_mask.leading_zeros() + CHUNK_ORDER)
        } else {
            self.largest_small_order().map_or(0, |j| 1 << j)
        };
        let largest_units = largest_units.max(self.largest_cached_merge());
        Stats {
            heap_bytes: self.heap_size,
            managed_bytes: self.managed_bytes(),
            free_bytes: free_units << self.unit_shift,
            largest_free_block: largest_units << self.unit_shift,
            live_blocks: self.live_blocks - self.cache.blocks(),
            live_bytes: (self.units - free_units) << self.unit_shift,
            cached_bytes: self.cache.units() << self.unit_shift,
        }
    }

    /// Bytes of host memory held by the allocator's side tables (the formula
    /// is in the [module documentation](self)).
    pub fn metadata_bytes(&self) -> usize {
        let bitmaps: usize = self
            .big_free
            .iter()
            .chain(self.small_free.iter())
            .map(SummaryBitmap::heap_bytes)
            .sum();
        size_of::<Self>()
            + self.head.capacity()
            + self.big_free.capacity() * size_of::<SummaryBitmap>()
            + self.big_count.capacity() * size_of::<usize>()
            + bitmaps
            + self.groups.capacity() * size_of::<Option<Box<Group>>>()
            + self.group_count * size_of::<Group>()
            + self.cache.heap_bytes()
    }

    /// The free blocks in offset order, not counting cached blocks (which
    /// [`cached_blocks`](Self::cached_blocks) lists); call
    /// [`flush`](Self::flush) first for all free space.
    pub fn free_blocks(&self) -> FreeBlocks<'_> {
        FreeBlocks::new(self)
    }

    /// The blocks waiting in the free caches: by order from the smallest,
    /// then oldest first within an order (the next allocation of an order
    /// takes the last one listed).
    pub fn cached_blocks(&self) -> impl Iterator<Item = FreeBlock> + '_ {
        (0..self.cache.orders() as u32).flat_map(move |order| {
            let size = 1u64 << order << self.unit_shift;
            self.cache
                .stack(order)
                .iter()
                .map(move |&offset| FreeBlock { offset, size })
        })
    }
}
