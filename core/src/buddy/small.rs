//! Small blocks (below a chunk): the words of each chunk split into small
//! blocks, kept in lazily created groups of 64 chunks, and the per-order
//! bitmaps of chunks that have a free small block.
//!
//! A bitmap may keep a chunk that no longer has a free block of that order:
//! the chunk's used word is the truth, and a lookup drops the stale entries
//! it meets.

use alloc::boxed::Box;
use alloc::vec::Vec;

use super::chunk::{exact_free_of, ChunkBits, SMALL_ORDERS};
use super::layout::SMALL;
use super::{AllocError, BuddyAllocator};

/// Chunks per lazily allocated group of small-block words.
pub(super) const GROUP_CHUNKS: usize = 64;
pub(super) type Group = [ChunkBits; GROUP_CHUNKS];

impl BuddyAllocator {
    #[inline]
    pub(super) fn small_bits(&self, chunk: usize) -> Option<&ChunkBits> {
        group_bits(&self.groups, chunk)
    }

    /// Words of a chunk whose group exists (a chunk in the small tier, or one
    /// passed to `ensure_group`).
    #[inline]
    pub(super) fn small_bits_mut(&mut self, chunk: usize) -> &mut ChunkBits {
        let group = self.groups[chunk / GROUP_CHUNKS]
            .as_deref_mut()
            .expect("small-tier chunk has its group");
        &mut group[chunk % GROUP_CHUNKS]
    }

    /// Creates the group holding `chunk`'s words if it does not exist yet.
    pub(super) fn ensure_group(&mut self, chunk: usize) -> Result<(), AllocError> {
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
    pub(super) fn mark_small_free(&mut self, chunk: usize, orders: u8) {
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
    pub(super) fn unmark_small_free(&mut self, chunk: usize, orders: u8) {
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
    pub(super) fn largest_small_order(&self) -> Option<u32> {
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
pub(super) fn group_bits(groups: &[Option<Box<Group>>], chunk: usize) -> Option<&ChunkBits> {
    groups
        .get(chunk / GROUP_CHUNKS)?
        .as_deref()?
        .get(chunk % GROUP_CHUNKS)
}
