//! Bitmaps with summary words.
//!
//! Level 0 holds one bit per item; bit `i` of level `l + 1` says whether word
//! `i` of level `l` is non-zero. The top level is a single word, so finding
//! the lowest set bit reads one word per level (4 levels cover 2^24 items)
//! and emptiness is one load.

use alloc::vec::Vec;
use core::mem::size_of;

use super::NewError;

/// 64^11 > 2^64: enough levels for any `usize` item count.
const MAX_LEVELS: usize = 11;

/// A set of `usize` below a fixed bound, kept as a bitmap plus summary words.
#[derive(Clone)]
pub(super) struct SummaryBitmap {
    /// All levels one after another, level 0 first.
    words: Vec<u64>,
    /// Index in `words` of each level's first word.
    level_start: [usize; MAX_LEVELS],
    /// Number of levels in use (at least 1).
    levels: usize,
    /// Item bound given at creation.
    bits: usize,
}

impl SummaryBitmap {
    /// An empty set for items `0..bits`.
    pub(super) fn new(bits: usize) -> Result<Self, NewError> {
        let mut level_start = [0; MAX_LEVELS];
        let mut total = 0usize;
        let mut len = bits.div_ceil(64).max(1);
        let mut levels = 0;
        loop {
            level_start[levels] = total;
            total = total.checked_add(len).ok_or(NewError::OutOfMetadata)?;
            levels += 1;
            if len == 1 {
                break;
            }
            len = len.div_ceil(64);
        }
        let mut words = Vec::new();
        words
            .try_reserve_exact(total)
            .map_err(|_| NewError::OutOfMetadata)?;
        words.resize(total, 0);
        Ok(Self {
            words,
            level_start,
            levels,
            bits,
        })
    }

    /// Adds `i` (which must be below the bound).
    #[inline]
    pub(super) fn insert(&mut self, i: usize) {
        let mut idx = i;
        for level in 0..self.levels {
            let w = &mut self.words[self.level_start[level] + idx / 64];
            let was = *w;
            *w = was | 1 << (idx % 64);
            if was != 0 {
                return;
            }
            idx /= 64;
        }
    }

    /// Removes `i`; returns true when the set is empty afterwards.
    #[inline]
    pub(super) fn remove(&mut self, i: usize) -> bool {
        let mut idx = i;
        for level in 0..self.levels {
            let w = &mut self.words[self.level_start[level] + idx / 64];
            *w &= !(1 << (idx % 64));
            if *w != 0 {
                return false;
            }
            idx /= 64;
        }
        true
    }

    /// Whether `i` is in the set (false for items past the bound).
    #[inline]
    pub(super) fn contains(&self, i: usize) -> bool {
        i < self.bits && self.words[i / 64] >> (i % 64) & 1 == 1
    }

    /// The lowest item in the set.
    #[inline]
    pub(super) fn first(&self) -> Option<usize> {
        let mut idx = 0usize;
        for level in (0..self.levels).rev() {
            let w = self.words[self.level_start[level] + idx];
            if w == 0 {
                return None;
            }
            idx = idx * 64 + w.trailing_zeros() as usize;
        }
        Some(idx)
    }

    /// Number of items in the set (walks level 0).
    pub(super) fn count(&self) -> usize {
        let end = if self.levels > 1 {
            self.level_start[1]
        } else {
            self.words.len()
        };
        self.words[..end]
            .iter()
            .map(|w| w.count_ones() as usize)
            .sum()
    }

    /// Whether every summary bit matches its word and no bit lies past the
    /// bound.
    pub(super) fn summaries_agree(&self) -> bool {
        for level in 0..self.levels {
            let start = self.level_start[level];
            let end = if level + 1 < self.levels {
                self.level_start[level + 1]
            } else {
                self.words.len()
            };
            if level + 1 == self.levels {
                break;
            }
            for (i, &w) in self.words[start..end].iter().enumerate() {
                let up = self.words[self.level_start[level + 1] + i / 64] >> (i % 64) & 1;
                if (w != 0) != (up == 1) {
                    return false;
                }
            }
        }
        // Bits past the bound in the last level-0 word.
        let last = self.bits.div_ceil(64).max(1) - 1;
        let used = self.bits - last * 64;
        used >= 64 || self.words[last] >> used == 0
    }

    /// Heap bytes held by the set.
    pub(super) fn heap_bytes(&self) -> usize {
        self.words.capacity() * size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::SummaryBitmap;

    #[test]
    fn first_follows_inserts_and_removes_across_levels() {
        let mut b = SummaryBitmap::new(300_000).expect("small bitmap");
        assert_eq!(b.levels, 4);
        assert_eq!(b.first(), None);
        b.insert(299_999);
        b.insert(4097);
        assert_eq!(b.first(), Some(4097));
        assert!(b.contains(299_999));
        assert!(!b.remove(4097));
        assert_eq!(b.first(), Some(299_999));
        assert!(b.remove(299_999));
        assert_eq!(b.first(), None);
        assert!(b.summaries_agree());
        assert_eq!(b.count(), 0);
    }

    #[test]
    fn zero_sized_set_is_one_empty_word() {
        let b = SummaryBitmap::new(0).expect("empty bitmap");
        assert_eq!(b.first(), None);
        assert!(!b.contains(0));
        assert_eq!(b.heap_bytes(), 8);
    }
}
