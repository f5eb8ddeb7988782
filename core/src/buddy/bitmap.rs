//! Bitmaps with summary words.
//!
//! Level 0 holds one bit per item; bit `i` of level `l + 1` is set whenever
//! word `i` of level `l` is non-zero. The top level is a single word, so
//! finding the lowest item reads one word per level (4 levels cover 2^24
//! items).
//!
//! Summary bits are cleared lazily: removing an item touches level 0 only,
//! and a lookup that meets an empty word clears the stale bit above it and
//! starts again. A free list that flips between empty and non-empty (the
//! usual alloc/free pair) then costs one word write per change instead of
//! one per level. An exact item count answers emptiness, and the lowest
//! item is cached until it is removed, so repeated lookups cost one load.

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
    /// Items in the set.
    len: usize,
    /// The lowest item, when known.
    lowest: Option<usize>,
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
            len: 0,
            lowest: None,
        })
    }

    /// Adds `i` (below the bound); false if it was already there.
    #[inline]
    pub(super) fn insert(&mut self, i: usize) -> bool {
        debug_assert!(i < self.bits);
        let bit = 1 << (i % 64);
        let w = &mut self.words[i / 64];
        let was = *w;
        if was & bit != 0 {
            return false;
        }
        *w = was | bit;
        self.len += 1;
        self.lowest = match self.lowest {
            Some(lowest) if i < lowest => Some(i),
            None if self.len == 1 => Some(i),
            keep => keep,
        };
        if was == 0 {
            self.raise(i / 64);
        }
        true
    }

    /// Sets the summary bits above level-0 word `word`, up to the first one
    /// already set (a non-zero word already has its summary bit).
    #[inline]
    fn raise(&mut self, word: usize) {
        let mut idx = word;
        for level in 1..self.levels {
            let w = &mut self.words[self.level_start[level] + idx / 64];
            let was = *w;
            *w = was | 1 << (idx % 64);
            if was != 0 {
                return;
            }
            idx /= 64;
        }
    }

    /// Removes `i` if it is there; true when that emptied the set.
    #[inline]
    pub(super) fn remove(&mut self, i: usize) -> bool {
        let bit = 1 << (i % 64);
        let Some(w) = self.words.get_mut(i / 64) else {
            return false;
        };
        if i >= self.bits || *w & bit == 0 {
            return false;
        }
        *w &= !bit;
        self.len -= 1;
        if self.lowest == Some(i) {
            self.lowest = None;
        }
        self.len == 0
    }

    /// Whether `i` is in the set (false for items past the bound).
    #[inline]
    pub(super) fn contains(&self, i: usize) -> bool {
        i < self.bits && self.words[i / 64] >> (i % 64) & 1 == 1
    }

    /// The lowest item in the set; clears stale summary bits on the way.
    #[inline]
    pub(super) fn first(&mut self) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        if self.lowest.is_some() {
            return self.lowest;
        }
        'descend: loop {
            let mut idx = 0usize;
            for level in (0..self.levels).rev() {
                let w = self.words[self.level_start[level] + idx];
                if w == 0 {
                    // Only a summary bit can be stale (the top word is
                    // non-zero while the set is not empty).
                    if level + 1 >= self.levels {
                        return None;
                    }
                    let up = self.level_start[level + 1];
                    self.words[up + idx / 64] &= !(1 << (idx % 64));
                    continue 'descend;
                }
                idx = idx * 64 + w.trailing_zeros() as usize;
            }
            self.lowest = Some(idx);
            return Some(idx);
        }
    }

    /// The items in increasing order (walks level 0).
    pub(super) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        let level0 = if self.levels > 1 {
            &self.words[..self.level_start[1]]
        } else {
            &self.words[..]
        };
        level0.iter().enumerate().flat_map(|(i, &w)| {
            let mut rest = w;
            core::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let bit = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                Some(i * 64 + bit)
            })
        })
    }

    /// Number of items in the set.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Whether the count matches level 0, every non-empty word has its
    /// summary bit set, and no bit lies past the bound.
    pub(super) fn is_consistent(&self) -> bool {
        let level0_end = if self.levels > 1 {
            self.level_start[1]
        } else {
            self.words.len()
        };
        let ones: usize = self.words[..level0_end]
            .iter()
            .map(|w| w.count_ones() as usize)
            .sum();
        if ones != self.len {
            return false;
        }
        if let Some(lowest) = self.lowest {
            let below = self.words[..lowest / 64].iter().any(|&w| w != 0)
                || self.words[lowest / 64] & ((1 << (lowest % 64)) - 1) != 0;
            if !self.contains(lowest) || below {
                return false;
            }
        }
        for level in 0..self.levels - 1 {
            let start = self.level_start[level];
            let end = self.level_start[level + 1];
            for (i, &w) in self.words[start..end].iter().enumerate() {
                let up = self.words[self.level_start[level + 1] + i / 64] >> (i % 64) & 1;
                if w != 0 && up == 0 {
                    return false;
                }
            }
        }
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
        assert!(b.insert(299_999));
        assert!(b.insert(4097));
        assert!(!b.insert(4097));
        assert_eq!(b.first(), Some(4097));
        assert!(b.contains(299_999));
        assert!(!b.remove(4097));
        assert_eq!(b.first(), Some(299_999));
        assert!(b.remove(299_999));
        assert!(!b.remove(299_999));
        assert_eq!(b.first(), None);
        assert!(b.is_consistent());
        assert_eq!(b.len(), 0);
    }

    #[test]
    fn stale_summaries_are_skipped_and_cleared() {
        let mut b = SummaryBitmap::new(1 << 20).expect("bitmap");
        b.insert(5);
        b.insert(700_000);
        assert!(!b.remove(5));
        // The summary bits for item 5 are stale now; lookup skips them.
        assert_eq!(b.first(), Some(700_000));
        assert_eq!(b.first(), Some(700_000));
        b.insert(6);
        assert_eq!(b.first(), Some(6));
        assert_eq!(b.iter().collect::<alloc::vec::Vec<_>>(), [6, 700_000]);
        assert!(b.is_consistent());
    }

    #[test]
    fn zero_sized_set_is_one_empty_word() {
        let mut b = SummaryBitmap::new(0).expect("empty bitmap");
        assert_eq!(b.first(), None);
        assert!(!b.contains(0));
        assert_eq!(b.heap_bytes(), 8);
    }
}
