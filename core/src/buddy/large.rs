//! Large blocks (a chunk or more): their free lists, one bitmap with
//! summary words and an exact count per chunk order, and the head bytes
//! that say which chunk starts a free or live block of which order.
//!
//! A bitmap may keep an entry whose block was taken: the head byte is the
//! truth, and a lookup drops the stale entries it meets.

use super::layout::{FREE, INSIDE, LIVE};
use super::BuddyAllocator;

impl BuddyAllocator {
    #[inline]
    pub(super) fn push_free_big(&mut self, chunk: usize, k: u32) {
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
    pub(super) fn find_big(&mut self, k: u32) -> Option<(usize, u32)> {
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
    pub(super) fn take_big(&mut self, chunk: usize, from: u32, to: u32) {
        self.pop_free_big(chunk, from);
        for i in (to..from).rev() {
            self.push_free_big(chunk + (1 << i), i);
        }
        self.head[chunk] = LIVE | to as u8;
    }

    /// Returns the block of order `k` at `chunk` to free space, merging
    /// with free buddies.
    #[inline]
    pub(super) fn release_big(&mut self, mut chunk: usize, mut k: u32) {
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
    pub(super) fn buddies_free(&self, chunk: usize, from: u32, to: u32) -> bool {
        chunk & ((1 << to) - 1) == 0
            && (from..to).all(|i| self.head.get(chunk + (1 << i)) == Some(&(FREE | i as u8)))
    }

    pub(super) fn take_buddies(&mut self, chunk: usize, from: u32, to: u32) {
        for i in from..to {
            self.pop_free_big(chunk + (1 << i), i);
        }
    }
}
