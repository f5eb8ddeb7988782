//! A first-fit allocator of byte ranges in a fixed span, used for the
//! staging buffers of rendezvous sends. Free ranges are kept in address
//! order and merged with their neighbours when freed, so the lowest free
//! addresses are reused first (they are the ones still in cache).

use alloc::collections::BTreeMap;

/// Free ranges of a span `[0, size)`, handed out in multiples of a
/// granule.
#[derive(Debug, Clone)]
pub struct RangeAllocator {
    size: u64,
    granule: u64,
    /// Free ranges: start → length.
    free: BTreeMap<u64, u64>,
    used: u64,
}

impl RangeAllocator {
    /// An allocator of `size` bytes (rounded down to the granule), all
    /// free; `granule` must be a power of two.
    pub fn new(size: u64, granule: u64) -> Option<Self> {
        if !granule.is_power_of_two() {
            return None;
        }
        let size = size & !(granule - 1);
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(0, size);
        }
        Some(Self {
            size,
            granule,
            free,
            used: 0,
        })
    }

    /// Bytes of the span.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes handed out and not freed.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Whether nothing is handed out.
    pub fn is_idle(&self) -> bool {
        self.used == 0
    }

    /// Bytes an allocation of `len` takes.
    pub fn rounded(&self, len: u64) -> Option<u64> {
        let g = self.granule - 1;
        Some(len.max(1).checked_add(g)? & !g)
    }

    /// The lowest free range of at least `len` bytes; returns its start
    /// and the rounded length to pass to [`free`](Self::free).
    pub fn alloc(&mut self, len: u64) -> Option<(u64, u64)> {
        let need = self.rounded(len)?;
        let (&start, &have) = self.free.iter().find(|(_, &l)| l >= need)?;
        self.free.remove(&start);
        if have > need {
            self.free.insert(start + need, have - need);
        }
        self.used += need;
        Some((start, need))
    }

    /// Gives back `[start, start + len)`, a range returned by
    /// [`alloc`](Self::alloc). Returns false (and changes nothing) when
    /// the range is not wholly handed out.
    pub fn free(&mut self, start: u64, len: u64) -> bool {
        let Some(end) = start.checked_add(len) else {
            return false;
        };
        if len == 0 || end > self.size || len > self.used {
            return false;
        }
        let before = self.free.range(..=start).next_back().map(|(&s, &l)| (s, l));
        if before.is_some_and(|(s, l)| s + l > start) {
            return false;
        }
        let after = self.free.range(start..).next().map(|(&s, &l)| (s, l));
        if after.is_some_and(|(s, _)| s < end) {
            return false;
        }
        let mut new_start = start;
        let mut new_len = len;
        if let Some((s, l)) = before.filter(|&(s, l)| s + l == start) {
            self.free.remove(&s);
            new_start = s;
            new_len += l;
        }
        if let Some((s, l)) = after.filter(|&(s, _)| s == end) {
            self.free.remove(&s);
            new_len += l;
        }
        self.free.insert(new_start, new_len);
        self.used -= len;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    #[test]
    fn first_fit_and_merge() {
        let mut a = RangeAllocator::new(1024, 64).unwrap();
        let x = a.alloc(10).unwrap();
        let y = a.alloc(100).unwrap();
        let z = a.alloc(64).unwrap();
        assert_eq!((x, y, z), ((0, 64), (64, 128), (192, 64)));
        assert!(a.free(y.0, y.1));
        assert!(!a.free(y.0, y.1), "double free refused");
        assert_eq!(a.alloc(64), Some((64, 64)), "lowest fit reused");
        assert!(a.free(64, 64));
        assert!(a.free(x.0, x.1));
        assert!(a.free(z.0, z.1));
        assert!(a.is_idle());
        assert_eq!(a.alloc(1024), Some((0, 1024)));
        assert_eq!(a.alloc(1), None);
        assert!(!a.free(0, 2048));
        assert!(RangeAllocator::new(100, 3).is_none());
    }

    proptest! {
        #[test]
        fn never_hands_out_overlapping_ranges(ops in proptest::collection::vec((any::<bool>(), 1u64..300), 1..200)) {
            let mut a = RangeAllocator::new(4096, 64).unwrap();
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (alloc, n) in ops {
                if alloc || live.is_empty() {
                    if let Some((s, l)) = a.alloc(n) {
                        prop_assert!(l >= n && s + l <= 4096 && s % 64 == 0);
                        for &(t, m) in &live {
                            prop_assert!(s + l <= t || t + m <= s);
                        }
                        live.push((s, l));
                    }
                } else {
                    let (s, l) = live.swap_remove(n as usize % live.len());
                    prop_assert!(a.free(s, l));
                }
                prop_assert_eq!(a.used(), live.iter().map(|x| x.1).sum::<u64>());
            }
            for (s, l) in live.drain(..) {
                prop_assert!(a.free(s, l));
            }
            prop_assert_eq!(a.alloc(4096), Some((0, 4096)));
        }
    }
}
