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
//! # Layout of the side tables
//!
//! The heap is cut into *chunks* of 64 minimum blocks (4 KiB by default).
//!
//! - Blocks of a chunk or more are tracked per chunk with one *head* byte
//!   (first chunk of a free block and its order, first chunk of a live block
//!   and its order, inside a block, or split into small blocks) and, per
//!   order, a bitmap of free blocks with summary words and an exact count.
//!   Testing whether a buddy is free is one head byte; splitting and merging
//!   cost one head byte, one counter and at most one bitmap bit per order
//!   crossed.
//! - A chunk split into small blocks keeps two words: which minimum blocks
//!   are used and where live blocks start. Its free blocks are derived from
//!   the used word with a few shifts (free buddies always merge, so the free
//!   blocks are the maximal aligned free runs). Six more bitmaps, one per
//!   small order, say which chunks have a free block of that order. The two
//!   words live in groups of 64 chunks that are allocated when a 256 KiB
//!   region first holds small blocks.
//!
//! Finding a free block of at least order `k` is `trailing_zeros` on a mask
//! of non-empty orders, then the lowest entry of that order's bitmap, which
//! is cached (a cold lookup reads one word per summary level: 3 for 64 MiB,
//! 4 for 16 GiB). The bitmaps may hold stale entries: the head byte or the
//! used word is the truth, entries that lost their block are cleared when a
//! lookup meets them, and summary bits are cleared the same way. Each stale
//! entry is dropped once, so lookups stay O(1) amortized, and a steady
//! alloc/free pair writes no bitmap word at all. An allocation or a free
//! then costs O(1) plus one step per order it splits or merges (O(log n) at
//! most).
//!
//! Freeing needs no size: the head byte remembers the order of a large live
//! block, and the start and used words give the length of a small one. The
//! block handed out last is also remembered with its order, so freeing it
//! (a temporary buffer, the usual alloc/free pair) reads no table: a
//! compare and a push, or a compare alone when the block was *lent* from a
//! free cache (left in its slot until something else changes the caches;
//! see the `cache` module), which keeps the pair off the stack counts. A double free of a cached block is found by looking
//! for its offset in the stack of its order (at most 32 entries by default,
//! and empty in the usual pair).
//!
//! # Metadata cost
//!
//! With `n = heap_size / min_block` minimum blocks, `C = ⌈n / 64⌉` chunks and
//! `G ≤ ⌈C / 64⌉` groups created so far, [`BuddyAllocator::metadata_bytes`]
//! is about
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

mod bitmap;
mod cache;
mod chunk;
mod error;

pub use cache::{CacheLimits, CacheLimitsError};
pub use error::{AllocError, FreeError, Inconsistency, NewError, ReallocError};

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::mem::size_of;

use bitmap::SummaryBitmap;
use cache::{FreeCache, LastBlock};
use chunk::{avail, block_len, exact_free, exact_free_of, run_mask, ChunkBits};
use chunk::{CHUNK_ORDER, SMALL_ORDERS};

/// Minimum blocks per chunk.
const CHUNK_UNITS: u64 = 1 << CHUNK_ORDER;
/// Chunks per lazily allocated group of small-block words.
const GROUP_CHUNKS: usize = 64;
type Group = [ChunkBits; GROUP_CHUNKS];

// Head byte of a chunk: tag in the top two bits, payload in the low six.
const TAG: u8 = 0xC0;
const PAYLOAD: u8 = 0x3F;
/// Not the first chunk of any block.
const INSIDE: u8 = 0x00;
/// First chunk of a free block; payload = order in chunks.
const FREE: u8 = 0x40;
/// First chunk of a live block; payload = order in chunks.
const LIVE: u8 = 0x80;
/// Chunk split into small blocks (payload unused).
const SMALL: u8 = 0xC0;

/// A live block found from its offset.
#[derive(Clone, Copy, Debug)]
enum Block {
    /// Smaller than a chunk: `order` in minimum blocks, `first` unit in chunk.
    Small {
        chunk: usize,
        first: u32,
        order: u32,
    },
    /// A chunk or more: `order` in chunks.
    Big { chunk: usize, order: u32 },
}

impl Block {
    /// Order in minimum blocks.
    fn unit_order(self) -> u32 {
        match self {
            Block::Small { order, .. } => order,
            Block::Big { order, .. } => order + CHUNK_ORDER,
        }
    }
}

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

/// One free block, as listed by [`BuddyAllocator::free_blocks`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FreeBlock {
    /// Offset of the block.
    pub offset: u64,
    /// Size of the block in bytes (a power of two).
    pub size: u64,
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
        FreeBlocks {
            heap: self,
            next_chunk: 0,
            chunk: 0,
            pending: [0; SMALL_ORDERS],
        }
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

    /// Walks every side table and checks that they agree (for tests and
    /// debugging; costs time proportional to the heap size).
    pub fn check_consistency(&self) -> Result<(), Inconsistency> {
        let bad = |what, chunk| Err(Inconsistency { what, chunk });
        let mut big_counts = vec![0usize; self.big_free.len()];
        let mut small_orders = 0u8;
        let mut free_units = 0u64;
        let mut live = 0u64;
        let tail = (self.units & (CHUNK_UNITS - 1)) as u32;
        let mut c = 0usize;
        while c < self.head.len() {
            let h = self.head[c];
            let payload = u32::from(h & PAYLOAD);
            match h & TAG {
                FREE | LIVE => {
                    if payload as usize >= self.big_free.len() {
                        return bad("block order beyond the heap", Some(c));
                    }
                    let len = 1usize << payload;
                    if c % len != 0 || c + len > self.full_chunks {
                        return bad("large block misaligned or past the end", Some(c));
                    }
                    for i in c..c + len {
                        if i > c && self.head[i] != INSIDE {
                            return bad("block head inside another block", Some(i));
                        }
                        if self
                            .small_bits(i)
                            .is_some_and(|b| *b != ChunkBits::default())
                        {
                            return bad("stale small-block words", Some(i));
                        }
                    }
                    if h & TAG == FREE {
                        if !self.big_free[payload as usize].contains(c >> payload) {
                            return bad("free block missing from its bitmap", Some(c));
                        }
                        if self.head.get(c ^ len) == Some(&h) {
                            return bad("free buddies not merged", Some(c));
                        }
                        big_counts[payload as usize] += 1;
                        free_units += (len as u64) << CHUNK_ORDER;
                    } else {
                        live += 1;
                    }
                    c += len;
                }
                SMALL => {
                    let Some(&bits) = self.small_bits(c) else {
                        return bad("small chunk without its words", Some(c));
                    };
                    if bits.used == 0 || bits.starts & !bits.used != 0 {
                        return bad("small chunk empty or with a start on a free unit", Some(c));
                    }
                    if payload != 0 {
                        return bad("small chunk head with a payload", Some(c));
                    }
                    let orders = avail(bits.used);
                    for (j, set) in self.small_free.iter().enumerate() {
                        if orders >> j & 1 == 1 && !set.contains(c) {
                            return bad("small-order bitmap misses the chunk", Some(c));
                        }
                    }
                    small_orders |= orders;
                    let filler = (c == self.full_chunks && tail != 0).then_some(tail);
                    let mut covered = 0u64;
                    let mut starts = bits.starts;
                    while starts != 0 {
                        let first = starts.trailing_zeros();
                        starts &= starts - 1;
                        let len = block_len(bits, first);
                        if Some(first) == filler {
                            if first + len != 64 {
                                return bad("filler block does not reach the chunk end", Some(c));
                            }
                        } else if !len.is_power_of_two() || first % len != 0 {
                            return bad("small block not an aligned power of two", Some(c));
                        } else {
                            live += 1;
                        }
                        covered |= run_mask(first, len);
                    }
                    if covered != bits.used {
                        return bad("used units outside any block", Some(c));
                    }
                    if filler.is_some_and(|t| bits.used & !run_mask(0, t) != !run_mask(0, t)) {
                        return bad("filler units marked free", Some(c));
                    }
                    free_units += u64::from((!bits.used).count_ones());
                    c += 1;
                }
                _ => return bad("chunk belongs to no block", Some(c)),
            }
        }
        for (k, set) in self.big_free.iter().enumerate() {
            if !set.is_consistent()
                || set.len() < big_counts[k]
                || self.big_count[k] != big_counts[k]
            {
                return bad("large-order bitmap or count out of date", None);
            }
            if (self.big_mask >> k & 1 == 1) != (big_counts[k] > 0) {
                return bad("large-order mask out of date", None);
            }
        }
        if self.big_mask >> self.big_free.len() != 0 {
            return bad("large-order mask has orders past the heap", None);
        }
        if self.small_free.iter().any(|set| !set.is_consistent()) {
            return bad("small-order bitmap summaries out of date", None);
        }
        if small_orders & !self.small_mask != 0 {
            return bad("small-order mask misses an order", None);
        }
        if free_units != self.free_units || live != self.live_blocks {
            return bad("free or live counters out of date", None);
        }
        if self.groups.iter().filter(|g| g.is_some()).count() != self.group_count {
            return bad("group count out of date", None);
        }
        if !self.cache.is_consistent() {
            return bad("free cache totals or bounds out of date", None);
        }
        for order in 0..self.cache.orders() as u32 {
            let stack = self.cache.stack(order);
            for (i, &offset) in stack.iter().enumerate() {
                let chunk = usize::try_from(offset >> self.unit_shift >> CHUNK_ORDER).ok();
                let live = self.locate(offset).is_ok_and(|b| b.unit_order() == order);
                if !live || stack[..i].contains(&offset) {
                    return bad("cached block not a live block of its order", chunk);
                }
            }
        }
        if let Some((offset, order)) = self.last.get() {
            let chunk = usize::try_from(offset >> self.unit_shift >> CHUNK_ORDER).ok();
            let live = self
                .locate_live(offset)
                .is_ok_and(|b| b.unit_order() == order);
            if !live {
                return bad("last block not live or of another order", chunk);
            }
        }
        Ok(())
    }

    // ---- sizes and offsets ----

    /// Order (in minimum blocks, below 64) of the block serving `size` at
    /// `align`; whether it fits the heap is [`within_heap`](Self::within_heap).
    #[inline]
    fn order_for(&self, size: u64, align: u64) -> Result<u32, AllocError> {
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        if !align.is_power_of_two() {
            return Err(AllocError::InvalidAlignment);
        }
        // A block is a power of two at least the size, the alignment (it
        // is aligned to its size) and the minimum block.
        let need = size.max(align).max(self.min_block());
        let bytes_order = u64::BITS - (need - 1).leading_zeros();
        if bytes_order >= u64::BITS {
            return Err(AllocError::OutOfMemory);
        }
        // Below 64; larger than the heap is checked where the caches miss
        // (a cached block of the order proves it fits).
        Ok(bytes_order - self.unit_shift)
    }

    /// `order` if a block of it fits the managed heap at all.
    #[inline]
    fn within_heap(&self, order: u32) -> Result<u32, AllocError> {
        if 1u64 << order > self.units {
            return Err(AllocError::OutOfMemory);
        }
        Ok(order)
    }

    #[inline]
    fn offset_of(&self, chunk: usize, first: u32) -> u64 {
        ((chunk as u64) << CHUNK_ORDER | u64::from(first)) << self.unit_shift
    }

    /// The live block starting at `offset`, or why there is none.
    #[inline]
    fn locate(&self, offset: u64) -> Result<Block, FreeError> {
        if offset >= self.managed_bytes() {
            return Err(FreeError::OutOfRange);
        }
        if offset & (self.min_block() - 1) != 0 {
            return Err(FreeError::InvalidOffset);
        }
        let unit = offset >> self.unit_shift;
        let chunk = usize::try_from(unit >> CHUNK_ORDER).map_err(|_| FreeError::OutOfRange)?;
        let first = (unit & (CHUNK_UNITS - 1)) as u32;
        let h = *self.head.get(chunk).ok_or(FreeError::OutOfRange)?;
        match h & TAG {
            SMALL => {
                let bits = *self.small_bits(chunk).ok_or(FreeError::InvalidOffset)?;
                if bits.starts >> first & 1 == 1 {
                    let order = block_len(bits, first).trailing_zeros();
                    Ok(Block::Small {
                        chunk,
                        first,
                        order,
                    })
                } else if bits.used >> first & 1 == 1 {
                    Err(FreeError::InvalidOffset)
                } else {
                    Err(FreeError::DoubleFree)
                }
            }
            LIVE if first == 0 => Ok(Block::Big {
                chunk,
                order: u32::from(h & PAYLOAD),
            }),
            LIVE => Err(FreeError::InvalidOffset),
            FREE => Err(FreeError::DoubleFree),
            _ => Err(self.classify_inside(chunk)),
        }
    }

    /// For a chunk inside a large block: is that block live or free?
    fn classify_inside(&self, chunk: usize) -> FreeError {
        match self.covering_block(chunk) {
            Some((_, h)) if h & TAG == FREE => FreeError::DoubleFree,
            _ => FreeError::InvalidOffset,
        }
    }

    /// First chunk and head byte of the large block covering a chunk whose
    /// head byte says "inside".
    fn covering_block(&self, chunk: usize) -> Option<(usize, u8)> {
        (1..usize::BITS).find_map(|k| {
            let base = chunk & !((1usize << k) - 1);
            let h = *self.head.get(base)?;
            let covers = u32::from(h & PAYLOAD) >= k && matches!(h & TAG, LIVE | FREE);
            covers.then_some((base, h))
        })
    }

    /// The live block starting at `offset` that the caller has not freed
    /// (the tables still count cached blocks as live).
    #[inline]
    fn locate_live(&self, offset: u64) -> Result<Block, FreeError> {
        match self.locate(offset) {
            Ok(block) if self.cache.holds(block.unit_order(), offset) => Err(FreeError::DoubleFree),
            Ok(block) => Ok(block),
            Err(FreeError::InvalidOffset) => Err(self.classify_in_live(offset)),
            Err(e) => Err(e),
        }
    }

    /// For an offset that is not the start of a live block of the tables:
    /// whether it lies inside a cached block (free space for the caller).
    #[cold]
    fn classify_in_live(&self, offset: u64) -> FreeError {
        if offset & (self.min_block() - 1) != 0 {
            return FreeError::InvalidOffset;
        }
        let unit = offset >> self.unit_shift;
        let Ok(chunk) = usize::try_from(unit >> CHUNK_ORDER) else {
            return FreeError::InvalidOffset;
        };
        let first = (unit & (CHUNK_UNITS - 1)) as u32;
        let containing = match self.head.get(chunk).map(|&h| (h, h & TAG)) {
            Some((_, SMALL)) => self.small_bits(chunk).and_then(|&bits| {
                let starts = bits.starts & run_mask(0, first + 1);
                if bits.used >> first & 1 == 0 || starts == 0 {
                    return None;
                }
                let start = 63 - starts.leading_zeros();
                let order = block_len(bits, start).trailing_zeros();
                Some((self.offset_of(chunk, start), order))
            }),
            Some((h, LIVE)) => Some((
                self.offset_of(chunk, 0),
                u32::from(h & PAYLOAD) + CHUNK_ORDER,
            )),
            Some((_, INSIDE)) => self
                .covering_block(chunk)
                .filter(|&(_, h)| h & TAG == LIVE)
                .map(|(base, h)| {
                    (
                        self.offset_of(base, 0),
                        u32::from(h & PAYLOAD) + CHUNK_ORDER,
                    )
                }),
            _ => None,
        };
        match containing {
            Some((start, order)) if self.cache.holds(order, start) => FreeError::DoubleFree,
            _ => FreeError::InvalidOffset,
        }
    }

    // ---- the free caches ----

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
    fn free_other(&mut self, offset: u64) -> Result<u64, FreeError> {
        match self.free_to_cache(offset) {
            Some(bytes) => Ok(bytes),
            None => self.free_slow(offset),
        }
    }

    /// [`free`](Self::free) when the block does not simply go onto its
    /// stack.
    #[inline(never)]
    fn free_slow(&mut self, offset: u64) -> Result<u64, FreeError> {
        self.last.forget(offset);
        let block = self.locate_live(offset)?;
        Ok(self.retire(block, offset))
    }

    /// Allocates a block of `order` from the tables; when none is free,
    /// flushes the caches and tries once more.
    fn alloc_uncached(&mut self, order: u32) -> Result<u64, AllocError> {
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
    fn retire(&mut self, block: Block, offset: u64) -> u64 {
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
    fn flush_order(&mut self, order: u32) {
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
    fn largest_cached_merge(&self) -> u64 {
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

    // ---- allocation and release ----

    #[inline]
    fn alloc_order(&mut self, order: u32) -> Result<u64, AllocError> {
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
    fn release(&mut self, block: Block) -> u64 {
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
    fn shrink(&mut self, block: Block, order: u32) -> Result<(), ReallocError> {
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
    fn grow(&mut self, block: Block, order: u32) -> bool {
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

    // ---- large blocks (a chunk or more) ----

    #[inline]
    fn push_free_big(&mut self, chunk: usize, k: u32) {
        self.head[chunk] = FREE | k as u8;
        self.big_free[k as usize].insert(chunk >> k);
        self.big_count[k as usize] += 1;
        self.big_mask |= 1 << k;
    }

    /// Marks the free block at `chunk` taken; its bitmap entry goes stale.
    #[inline]
    fn pop_free_big(&mut self, chunk: usize, k: u32) {
        self.head[chunk] = INSIDE;
        let count = &mut self.big_count[k as usize];
        *count -= 1;
        if *count == 0 {
            self.big_mask &= !(1 << k);
        }
    }

    /// Lowest free block of the smallest chunk order at least `k`.
    #[inline]
    fn find_big(&mut self, k: u32) -> Option<(usize, u32)> {
        let fits = self.big_mask.checked_shr(k)?;
        if fits == 0 {
            return None;
        }
        let from = k + fits.trailing_zeros();
        let set = &mut self.big_free[from as usize];
        loop {
            let index = set.first()?;
            let chunk = index << from;
            if self.head[chunk] == FREE | from as u8 {
                return Some((chunk, from));
            }
            set.remove(index);
        }
    }

    /// Takes the free block of order `from` at `chunk`, splits it down to
    /// order `to` and marks that part live.
    #[inline]
    fn take_big(&mut self, chunk: usize, from: u32, to: u32) {
        self.pop_free_big(chunk, from);
        for i in (to..from).rev() {
            self.push_free_big(chunk + (1 << i), i);
        }
        self.head[chunk] = LIVE | to as u8;
    }

    /// Returns the block of order `k` at `chunk` to free space, merging
    /// with free buddies.
    #[inline]
    fn release_big(&mut self, mut chunk: usize, mut k: u32) {
        loop {
            let buddy = chunk ^ (1 << k);
            if self.head.get(buddy) != Some(&(FREE | k as u8)) {
                break;
            }
            self.pop_free_big(buddy, k);
            self.head[chunk] = INSIDE;
            chunk &= buddy;
            k += 1;
        }
        self.push_free_big(chunk, k);
    }

    /// Whether `chunk` is aligned to order `to` and its right buddies of
    /// orders `from..to` are free blocks.
    fn buddies_free(&self, chunk: usize, from: u32, to: u32) -> bool {
        chunk & ((1 << to) - 1) == 0
            && (from..to).all(|i| self.head.get(chunk + (1 << i)) == Some(&(FREE | i as u8)))
    }

    fn take_buddies(&mut self, chunk: usize, from: u32, to: u32) {
        for i in from..to {
            self.pop_free_big(chunk + (1 << i), i);
        }
    }

    // ---- small blocks (below a chunk) ----

    #[inline]
    fn small_bits(&self, chunk: usize) -> Option<&ChunkBits> {
        group_bits(&self.groups, chunk)
    }

    /// Words of a chunk whose group exists (a chunk in the small tier, or one
    /// passed to `ensure_group`).
    #[inline]
    fn small_bits_mut(&mut self, chunk: usize) -> &mut ChunkBits {
        let group = self.groups[chunk / GROUP_CHUNKS]
            .as_deref_mut()
            .expect("small-tier chunk has its group");
        &mut group[chunk % GROUP_CHUNKS]
    }

    /// Creates the group holding `chunk`'s words if it does not exist yet.
    fn ensure_group(&mut self, chunk: usize) -> Result<(), AllocError> {
        let slot = self
            .groups
            .get_mut(chunk / GROUP_CHUNKS)
            .ok_or(AllocError::OutOfMetadata)?;
        if slot.is_none() {
            let mut words = Vec::new();
            words
                .try_reserve_exact(GROUP_CHUNKS)
                .map_err(|_| AllocError::OutOfMetadata)?;
            words.resize(GROUP_CHUNKS, ChunkBits::default());
            let group: Box<Group> = words
                .into_boxed_slice()
                .try_into()
                .map_err(|_| AllocError::OutOfMetadata)?;
            *slot = Some(group);
            self.group_count += 1;
        }
        Ok(())
    }

    /// Records that `chunk` gained free blocks of the small orders in
    /// `orders`.
    #[inline(always)]
    fn mark_small_free(&mut self, chunk: usize, orders: u8) {
        let mut todo = orders;
        while todo != 0 {
            self.small_free[todo.trailing_zeros() as usize].insert(chunk);
            todo &= todo - 1;
        }
        self.small_mask |= orders;
    }

    /// Records that `chunk` has no free block left of the small orders in
    /// `orders`.
    #[inline(always)]
    fn unmark_small_free(&mut self, chunk: usize, orders: u8) {
        let mut todo = orders;
        while todo != 0 {
            let j = todo.trailing_zeros();
            if self.small_free[j as usize].remove(chunk) {
                self.small_mask &= !(1 << j);
            }
            todo &= todo - 1;
        }
    }

    /// Largest order with a free small block (walks the small bitmaps).
    fn largest_small_order(&self) -> Option<u32> {
        (0..SMALL_ORDERS as u32).rev().find(|&j| {
            self.small_mask >> j & 1 == 1
                && self.small_free[j as usize].iter().any(|chunk| {
                    self.head.get(chunk) == Some(&SMALL)
                        && group_bits(&self.groups, chunk)
                            .is_some_and(|bits| exact_free_of(bits.used, j) != 0)
                })
        })
    }
}

/// Words of `chunk`, if its group exists.
#[inline]
fn group_bits(groups: &[Option<Box<Group>>], chunk: usize) -> Option<&ChunkBits> {
    groups
        .get(chunk / GROUP_CHUNKS)?
        .as_deref()?
        .get(chunk % GROUP_CHUNKS)
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
