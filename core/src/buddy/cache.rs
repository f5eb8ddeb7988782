//! Deferred coalescing: per-order LIFO stacks of freed blocks.
//!
//! This module owns the blocks that the caller freed but the buddy tables
//! still hold as live. A free pushes the block's offset onto the stack of
//! its order and an allocation of that order pops it, so a block that is
//! freed and asked for again costs neither a merge nor a split. The stacks
//! live on the host heap, like every other side table; they hold offsets
//! only.
//!
//! The stacks are bounded per order ([`CacheLimits::blocks_per_order`]) and
//! in bytes over all orders ([`CacheLimits::max_bytes`]). Deciding when to
//! flush is the allocator's job; this module only keeps the stacks and
//! their totals.

use alloc::vec::Vec;
use core::mem::size_of;

use super::NewError;

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
    pub const DEFAULT_BLOCKS_PER_ORDER: u32 = 16;
    /// Default byte bound, as a fraction of the managed heap: 1/16.
    pub const DEFAULT_HEAP_SHIFT: u32 = 4;

    /// The default limits for a heap managing `managed_bytes`: 16 blocks
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

/// The stacks, one per order in minimum blocks, and their totals.
pub(super) struct FreeCache {
    /// Per order: offsets of cached blocks, oldest first.
    stacks: Vec<Vec<u64>>,
    /// Stack bound per order.
    depth: usize,
    /// Byte bound, in minimum blocks.
    max_units: u64,
    /// Minimum blocks in cached blocks.
    units: u64,
    /// Cached blocks.
    blocks: u64,
}

impl FreeCache {
    /// Empty stacks for orders `0..orders`, bounded by `limits` for a heap
    /// whose minimum block is `1 << unit_shift` bytes.
    pub(super) fn new(
        orders: usize,
        limits: CacheLimits,
        unit_shift: u32,
    ) -> Result<Self, NewError> {
        let mut stacks = Vec::new();
        stacks
            .try_reserve_exact(orders)
            .map_err(|_| NewError::OutOfMetadata)?;
        stacks.resize_with(orders, Vec::new);
        let mut cache = Self {
            stacks,
            depth: 0,
            max_units: 0,
            units: 0,
            blocks: 0,
        };
        cache.set_limits(limits, unit_shift);
        Ok(cache)
    }

    /// Sets new bounds; the stacks must be empty.
    pub(super) fn set_limits(&mut self, limits: CacheLimits, unit_shift: u32) {
        debug_assert_eq!(self.blocks, 0);
        self.depth = limits.blocks_per_order as usize;
        self.max_units = limits.max_bytes >> unit_shift;
        for stack in &mut self.stacks {
            // Capacity is taken again on first use, up to the new depth.
            stack.shrink_to(self.depth);
        }
    }

    /// The bounds in force, for a heap whose minimum block is
    /// `1 << unit_shift` bytes (the byte bound rounded down to it).
    pub(super) fn limits(&self, unit_shift: u32) -> CacheLimits {
        CacheLimits {
            blocks_per_order: u32::try_from(self.depth).unwrap_or(u32::MAX),
            max_bytes: self.max_units << unit_shift,
        }
    }

    /// Takes the newest cached block of `order`.
    #[inline(always)]
    pub(super) fn pop(&mut self, order: u32) -> Option<u64> {
        let offset = self.stacks.get_mut(order as usize)?.pop()?;
        self.units -= 1 << order;
        self.blocks -= 1;
        Some(offset)
    }

    /// Whether the block of `order` at `offset` is cached.
    #[inline(always)]
    pub(super) fn holds(&self, order: u32, offset: u64) -> bool {
        self.stacks
            .get(order as usize)
            .is_some_and(|stack| stack.contains(&offset))
    }

    /// Whether a block of `order` can be cached at all under the limits.
    #[inline(always)]
    pub(super) fn admits(&self, order: u32) -> bool {
        self.depth != 0 && (order as usize) < self.stacks.len() && 1u64 << order <= self.max_units
    }

    /// Whether the stack of `order` is at its bound.
    #[inline(always)]
    pub(super) fn is_full(&self, order: u32) -> bool {
        self.stacks
            .get(order as usize)
            .is_none_or(|stack| stack.len() >= self.depth)
    }

    /// Whether `units` more minimum blocks stay within the byte bound.
    #[inline(always)]
    pub(super) fn fits(&self, units: u64) -> bool {
        self.units + units <= self.max_units
    }

    /// Caches the block of `order` at `offset`; false when the stack is
    /// full or cannot get room (the caller then merges the block).
    #[inline(always)]
    pub(super) fn push(&mut self, order: u32, offset: u64) -> bool {
        let Some(stack) = self.stacks.get_mut(order as usize) else {
            return false;
        };
        if stack.len() >= self.depth {
            return false;
        }
        if stack.len() == stack.capacity()
            && stack.try_reserve_exact(self.depth - stack.len()).is_err()
        {
            return false;
        }
        stack.push(offset);
        self.units += 1 << order;
        self.blocks += 1;
        true
    }

    /// Empties the stack of `order` and hands it out (oldest first); give
    /// it back with [`restore`](Self::restore) to keep its capacity.
    pub(super) fn take(&mut self, order: u32) -> Vec<u64> {
        let Some(stack) = self.stacks.get_mut(order as usize) else {
            return Vec::new();
        };
        let stack = core::mem::take(stack);
        self.units -= (stack.len() as u64) << order;
        self.blocks -= stack.len() as u64;
        stack
    }

    /// Puts back the storage of a stack emptied by [`take`](Self::take).
    pub(super) fn restore(&mut self, order: u32, mut stack: Vec<u64>) {
        stack.clear();
        if let Some(slot) = self.stacks.get_mut(order as usize) {
            if slot.capacity() == 0 {
                *slot = stack;
            }
        }
    }

    /// Number of orders with a stack.
    pub(super) fn orders(&self) -> usize {
        self.stacks.len()
    }

    /// The cached blocks of `order`, oldest first.
    pub(super) fn stack(&self, order: u32) -> &[u64] {
        self.stacks.get(order as usize).map_or(&[], Vec::as_slice)
    }

    /// Minimum blocks held in cached blocks.
    pub(super) fn units(&self) -> u64 {
        self.units
    }

    /// Number of cached blocks.
    pub(super) fn blocks(&self) -> u64 {
        self.blocks
    }

    /// Whether the totals match the stacks and the stacks their bounds.
    pub(super) fn is_consistent(&self) -> bool {
        let mut units = 0u64;
        let mut blocks = 0u64;
        for (k, stack) in self.stacks.iter().enumerate() {
            if stack.len() > self.depth {
                return false;
            }
            blocks += stack.len() as u64;
            units += (stack.len() as u64) << k;
        }
        units == self.units && blocks == self.blocks && units <= self.max_units
    }

    /// Heap bytes held by the stacks.
    pub(super) fn heap_bytes(&self) -> usize {
        self.stacks.capacity() * size_of::<Vec<u64>>()
            + self
                .stacks
                .iter()
                .map(|s| s.capacity() * size_of::<u64>())
                .sum::<usize>()
    }
}
