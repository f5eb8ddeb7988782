//! Deferred coalescing: per-order LIFO stacks of freed blocks.
//!
//! This module owns the blocks that the caller freed but the buddy tables
//! still hold as live. A free pushes the block's offset onto the stack of
//! its order and an allocation of that order pops it, so a block that is
//! freed and asked for again costs neither a merge nor a split. The stacks
//! live on the host heap, like every other side table; they hold offsets
//! only.
//!
//! The newest block of a stack can be *lent* rather than popped
//! ([`FreeCache::lend`]): handed out while it stays in its slot, with the
//! stack's count unchanged. Given back before anything else touches the
//! stacks ([`FreeCache::give_back`]), nothing has to be written back; any
//! other change first settles the loan (the block leaves its stack then).
//! Every reading method answers as if the loan were settled. This keeps
//! the allocate-then-free pair of a temporary buffer off the stack counts:
//! a pop and a push both read the count the other has just written, and
//! those two store-to-load round trips were the whole cost of the pair
//! (4 ns; 2 ns without them).
//!
//! The stacks are bounded per order ([`CacheLimits::blocks_per_order`]) and
//! in bytes over all orders ([`CacheLimits::max_bytes`]); they take one
//! array of `orders × blocks_per_order` offsets (rounded up to a power of
//! two per order), allocated when the limits are set. Deciding when to flush is the allocator's job; this module only
//! keeps the stacks and their total.

use alloc::vec::Vec;
use core::fmt;
use core::mem::size_of;

/// Bounds of the free caches of a
/// [`BuddyAllocator`](super::BuddyAllocator).
///
/// Every process of a symmetric heap must use the same limits: they decide
/// when blocks merge, and so which offsets later calls return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheLimits {
    /// Freed blocks kept per order. Zero turns the caches off: every free
    /// merges at once.
    pub blocks_per_order: u32,
    /// Bytes kept in freed blocks over all orders. A block larger than
    /// this is never cached.
    pub max_bytes: u64,
}

impl CacheLimits {
    /// Blocks per order kept by default.
    pub const DEFAULT_BLOCKS_PER_ORDER: u32 = 32;
    /// Largest `blocks_per_order` accepted.
    pub const MAX_BLOCKS_PER_ORDER: u32 = 1 << 12;
    /// Default byte bound, as a fraction of the managed heap: 1/16.
    pub const DEFAULT_HEAP_SHIFT: u32 = 4;

    /// The default limits for a heap managing `managed_bytes`: 32 blocks
    /// per order and at most 1/16 of the heap.
    pub fn for_heap(managed_bytes: u64) -> Self {
        Self {
            blocks_per_order: Self::DEFAULT_BLOCKS_PER_ORDER,
            max_bytes: managed_bytes >> Self::DEFAULT_HEAP_SHIFT,
        }
    }

    /// Limits that cache nothing (every free merges at once).
    pub const OFF: Self = Self {
        blocks_per_order: 0,
        max_bytes: 0,
    };
}

/// The stacks, one per order in minimum blocks, in one array, and their
/// total size.
pub(super) struct FreeCache {
    /// Stack of order `k` in `slots[k << stride_shift..][..len[k]]`, oldest
    /// first.
    slots: Vec<u64>,
    /// log2 of the slots per order: `depth` rounded up to a power of two.
    stride_shift: u32,
    /// Blocks in each order's stack.
    len: [u32; 64],
    /// Orders with a stack.
    orders: usize,
    /// Stack bound per order.
    depth: usize,
    /// Byte bound, in minimum blocks.
    max_units: u64,
    /// Minimum blocks in cached blocks, the lent block included.
    units: u64,
    /// Order whose newest block is lent, or [`NOT_LENT`]. The counts above
    /// still include that block.
    lent: u32,
}

/// No block lent.
const NOT_LENT: u32 = u32::MAX;

impl FreeCache {
    /// Empty stacks for orders `0..orders` (at most 64), with no room yet.
    pub(super) fn new(orders: usize) -> Self {
        Self {
            slots: Vec::new(),
            len: [0; 64],
            orders: orders.min(64),
            stride_shift: 0,
            depth: 0,
            max_units: 0,
            units: 0,
            lent: NOT_LENT,
        }
    }

    /// Sets new bounds for a heap whose minimum block is `1 << unit_shift`
    /// bytes; the stacks must be empty. On error nothing changed.
    pub(super) fn set_limits(
        &mut self,
        limits: CacheLimits,
        unit_shift: u32,
    ) -> Result<(), CacheLimitsError> {
        self.settle();
        debug_assert_eq!(self.units, 0);
        if limits.blocks_per_order > CacheLimits::MAX_BLOCKS_PER_ORDER {
            return Err(CacheLimitsError::TooManyBlocks);
        }
        let depth = limits.blocks_per_order as usize;
        let stride_shift = depth.next_power_of_two().trailing_zeros();
        let len = self.orders << stride_shift;
        let mut slots = Vec::new();
        slots
            .try_reserve_exact(len)
            .map_err(|_| CacheLimitsError::OutOfMetadata)?;
        slots.resize(len, 0);
        self.slots = slots;
        self.stride_shift = stride_shift;
        self.depth = depth;
        self.max_units = limits.max_bytes >> unit_shift;
        Ok(())
    }

    /// The bounds in force, for a heap whose minimum block is
    /// `1 << unit_shift` bytes (the byte bound rounded down to it).
    pub(super) fn limits(&self, unit_shift: u32) -> CacheLimits {
        CacheLimits {
            blocks_per_order: self.depth as u32,
            max_bytes: self.max_units << unit_shift,
        }
    }

    /// Hands out the newest cached block of `order`, leaving it in its
    /// slot until [`give_back`](Self::give_back) or the next change.
    #[inline(always)]
    pub(super) fn lend(&mut self, order: u32) -> Option<u64> {
        self.settle();
        let k = order as usize & 63;
        let n = self.len[k].checked_sub(1)?;
        let offset = *self.slots.get((k << self.stride_shift) + n as usize)?;
        self.lent = order;
        Some(offset)
    }

    /// Takes back the block lent from `order`'s stack; false when none is
    /// (then the caller caches the block as a new one). The caller must
    /// know the block is the one lent: the allocator's [`LastBlock`] does.
    #[inline(always)]
    pub(super) fn give_back(&mut self, order: u32) -> bool {
        if self.lent != order {
            return false;
        }
        self.lent = NOT_LENT;
        true
    }

    /// Takes the lent block, if any, out of its stack for good.
    #[inline(always)]
    pub(super) fn settle(&mut self) {
        if self.lent != NOT_LENT {
            let k = self.lent as usize & 63;
            self.len[k] -= 1;
            self.units -= 1 << k;
            self.lent = NOT_LENT;
        }
    }

    /// Blocks in the stack of `order`, the lent one left out.
    #[inline(always)]
    fn settled_len(&self, order: u32) -> u32 {
        self.len[order as usize & 63] - u32::from(self.lent == order)
    }

    /// Minimum blocks in the lent block (0 if none).
    #[inline(always)]
    fn lent_units(&self) -> u64 {
        if self.lent == NOT_LENT {
            0
        } else {
            1 << (self.lent & 63)
        }
    }

    /// Takes the newest cached block of `order`: a loan settled at once.
    #[inline(always)]
    pub(super) fn pop(&mut self, order: u32) -> Option<u64> {
        let offset = self.lend(order)?;
        self.settle();
        Some(offset)
    }

    /// Whether the block of `order` at `offset` is cached.
    #[inline(always)]
    pub(super) fn holds(&self, order: u32, offset: u64) -> bool {
        self.settled_len(order) != 0 && self.stack(order).contains(&offset)
    }

    /// Caches the block of `order` at `offset` if its stack and the byte
    /// bound have room; false otherwise.
    #[inline(always)]
    pub(super) fn try_push(&mut self, order: u32, offset: u64) -> bool {
        self.settle();
        let k = order as usize & 63;
        let n = self.len[k];
        let units = self.units + (1 << k);
        if n as usize >= self.depth || units > self.max_units {
            return false;
        }
        let Some(slot) = self.slots.get_mut((k << self.stride_shift) + n as usize) else {
            return false;
        };
        *slot = offset;
        self.len[k] = n + 1;
        self.units = units;
        true
    }

    /// Whether a block of `order` can be cached at all under the limits.
    pub(super) fn admits(&self, order: u32) -> bool {
        self.depth != 0 && (order as usize) < self.orders && 1u64 << order <= self.max_units
    }

    /// Whether the stack of `order` is at its bound.
    pub(super) fn is_full(&self, order: u32) -> bool {
        self.settled_len(order) as usize >= self.depth
    }

    /// Takes the oldest cached block of `order` out of its stack (the rest
    /// move down one slot).
    pub(super) fn evict_oldest(&mut self, order: u32) -> Option<u64> {
        self.settle();
        let k = order as usize & 63;
        let n = self.len[k] as usize;
        let start = k << self.stride_shift;
        if n == 0 || start + n > self.slots.len() {
            return None;
        }
        let oldest = self.slots[start];
        self.slots.copy_within(start + 1..start + n, start);
        self.len[k] -= 1;
        self.units -= 1 << k;
        Some(oldest)
    }

    /// Whether `units` more minimum blocks stay within the byte bound.
    pub(super) fn fits(&self, units: u64) -> bool {
        self.units() + units <= self.max_units
    }

    /// Empties the stack of `order` and returns how many blocks it held;
    /// they stay readable in [`stack_slots`](Self::stack_slots) until the
    /// next push of that order.
    pub(super) fn clear(&mut self, order: u32) -> usize {
        self.settle();
        let k = order as usize & 63;
        let n = core::mem::take(&mut self.len[k]);
        self.units -= u64::from(n) << k;
        n as usize
    }

    /// The first `n` slots of the stack of `order` (see
    /// [`clear`](Self::clear)).
    #[inline]
    pub(super) fn stack_slots(&self, order: u32, n: usize) -> &[u64] {
        let start = (order as usize & 63) << self.stride_shift;
        self.slots.get(start..start + n).unwrap_or(&[])
    }

    /// Number of orders with a stack.
    pub(super) fn orders(&self) -> usize {
        self.orders
    }

    /// The cached blocks of `order`, oldest first.
    #[inline]
    pub(super) fn stack(&self, order: u32) -> &[u64] {
        self.stack_slots(order, self.settled_len(order) as usize)
    }

    /// Minimum blocks held in cached blocks.
    pub(super) fn units(&self) -> u64 {
        self.units - self.lent_units()
    }

    /// Number of cached blocks.
    pub(super) fn blocks(&self) -> u64 {
        let lent = u64::from(self.lent != NOT_LENT);
        self.len.iter().map(|&n| u64::from(n)).sum::<u64>() - lent
    }

    /// Whether the total matches the stacks and the stacks their bounds,
    /// and a lent block is in its stack.
    pub(super) fn is_consistent(&self) -> bool {
        if self.lent != NOT_LENT && self.len.get(self.lent as usize).is_none_or(|&n| n == 0) {
            return false;
        }
        let mut units = 0u64;
        for (k, &n) in self.len.iter().enumerate() {
            if n as usize > self.depth || (k >= self.orders && n != 0) {
                return false;
            }
            units += u64::from(n) << k;
        }
        units == self.units && units <= self.max_units
    }

    /// Heap bytes held by the stacks.
    pub(super) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * size_of::<u64>()
    }
}

/// Why [`BuddyAllocator::set_cache_limits`](super::BuddyAllocator::set_cache_limits)
/// refused new limits. The caches are flushed but the old limits stay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheLimitsError {
    /// More blocks per order than the allocator accepts (4096).
    TooManyBlocks,
    /// The stacks could not be allocated.
    OutOfMetadata,
}

impl fmt::Display for CacheLimitsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooManyBlocks => f.write_str("more than 4096 cached blocks per order"),
            Self::OutOfMetadata => f.write_str("cannot allocate the free cache stacks"),
        }
    }
}

impl core::error::Error for CacheLimitsError {}

/// No block: offsets are below the managed size, so never `u64::MAX`.
const NO_BLOCK: u64 = u64::MAX;

/// The block handed out last, with its order, so that `free` of it skips
/// the tables.
///
/// Most blocks of a symmetric heap that are freed soon are freed right
/// after they were handed out (temporary buffers), and for them this turns
/// `free` into a compare and a push, or into a compare alone when the block
/// was lent from a free cache and nothing changed since
/// ([`FreeCache::give_back`]: a block lent is always the one recorded here,
/// because only `alloc` lends and records it at once, and every other way
/// a block is handed out settles the loan first). It also takes the lookup of the order
/// off the chain from `alloc` to `free` to the next `alloc`: the order is
/// known before the offset is. The entry is always right: it is written
/// when a block is handed out and removed when that block is freed or
/// resized, so a hit is a live block the caller has not freed.
pub(super) struct LastBlock {
    offset: u64,
    order: u32,
}

impl LastBlock {
    /// No block.
    pub(super) fn new() -> Self {
        Self {
            offset: NO_BLOCK,
            order: 0,
        }
    }

    /// Records that the block of `order` at `offset` was handed out.
    #[inline(always)]
    pub(super) fn remember(&mut self, offset: u64, order: u32) {
        self.offset = offset;
        self.order = order;
    }

    /// The order of the block at `offset` if it is the one recorded; the
    /// record is cleared.
    #[inline(always)]
    pub(super) fn take(&mut self, offset: u64) -> Option<u32> {
        if self.offset != offset {
            return None;
        }
        self.offset = NO_BLOCK;
        Some(self.order)
    }

    /// Clears the record if it is the block at `offset`.
    #[inline]
    pub(super) fn forget(&mut self, offset: u64) {
        if self.offset == offset {
            self.offset = NO_BLOCK;
        }
    }

    /// The recorded block, as (offset, order).
    pub(super) fn get(&self) -> Option<(u64, u32)> {
        (self.offset != NO_BLOCK).then_some((self.offset, self.order))
    }
}
