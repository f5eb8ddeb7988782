//! Word arithmetic for blocks smaller than a chunk.
//!
//! A chunk is 64 minimum blocks ("units"). Inside a chunk that holds small
//! blocks, two words say everything: `used` (unit belongs to a live block, or
//! lies past the end of the heap) and `starts` (a live block begins at this
//! unit). Because free buddies always merge, the free blocks of the chunk are
//! exactly the maximal aligned power-of-two runs of unused units, so they are
//! computed from `used` with a few shifts instead of being stored.

/// log2 of the units in a chunk.
pub(super) const CHUNK_ORDER: u32 = 6;

/// Number of orders below a chunk (0..=5).
pub(super) const SMALL_ORDERS: usize = CHUNK_ORDER as usize;

/// Units of one chunk that holds small blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct ChunkBits {
    /// Bit `u`: unit `u` is in a live block or past the end of the heap.
    pub(super) used: u64,
    /// Bit `u`: a live block (or the past-the-end filler) starts at unit `u`.
    pub(super) starts: u64,
}

/// Bit `u` set where `u` is a multiple of `2^order`.
const ALIGNED: [u64; SMALL_ORDERS] = [
    !0,
    0x5555_5555_5555_5555,
    0x1111_1111_1111_1111,
    0x0101_0101_0101_0101,
    0x0001_0001_0001_0001,
    0x0000_0001_0000_0001,
];

/// `runs[j]` bit `u`: units `u .. u + 2^j` are all unused and `u` is aligned
/// to `2^j`; `runs[6]` is 1 when the whole chunk is unused.
#[inline]
pub(super) fn free_runs(used: u64) -> [u64; SMALL_ORDERS + 1] {
    let mut runs = [0; SMALL_ORDERS + 1];
    let mut r = !used;
    runs[0] = r;
    for j in 1..SMALL_ORDERS {
        r = r & (r >> (1 << (j - 1))) & ALIGNED[j];
        runs[j] = r;
    }
    runs[SMALL_ORDERS] = r & (r >> 32) & 1;
    runs
}

/// Starts of the free blocks of exactly order `j` (< 6): aligned free runs
/// whose parent run is not free as a whole.
#[inline]
pub(super) fn exact_free(runs: &[u64; SMALL_ORDERS + 1], j: usize) -> u64 {
    let parent = runs[j + 1];
    runs[j] & !(parent | parent << (1u32 << j))
}

/// Bit `j` set when the chunk has a free block of exactly order `j`.
#[inline]
pub(super) fn avail(used: u64) -> u8 {
    let runs = free_runs(used);
    let mut mask = 0u8;
    for j in 0..SMALL_ORDERS {
        if exact_free(&runs, j) != 0 {
            mask |= 1 << j;
        }
    }
    mask
}

/// Mask of `len` units from unit `first` (`first + len <= 64`).
#[inline]
pub(super) fn run_mask(first: u32, len: u32) -> u64 {
    if len == 0 {
        0
    } else if len >= 64 {
        !0
    } else {
        ((1u64 << len) - 1) << first
    }
}

/// Length in units of the live block starting at unit `first`: up to the next
/// block start or unused unit.
#[inline]
pub(super) fn block_len(bits: ChunkBits, first: u32) -> u32 {
    if first >= 63 {
        return 1;
    }
    let boundaries = (bits.starts | !bits.used) >> (first + 1);
    boundaries.trailing_zeros().min(63 - first) + 1
}

#[cfg(test)]
mod tests {
    use super::{avail, block_len, exact_free, free_runs, run_mask, ChunkBits};

    #[test]
    fn free_blocks_of_a_partly_used_chunk() {
        // Units 0..5 usable, 5..64 past the end (as for a 5-unit heap tail).
        let used = !run_mask(0, 5);
        let runs = free_runs(used);
        assert_eq!(exact_free(&runs, 2), 1);
        assert_eq!(exact_free(&runs, 1), 0);
        assert_eq!(exact_free(&runs, 0), 1 << 4);
        assert_eq!(avail(used), 0b101);
    }

    #[test]
    fn whole_free_chunk_has_no_small_free_block() {
        assert_eq!(free_runs(0)[6], 1);
        assert_eq!(avail(0), 0);
        assert_eq!(avail(1), 0b11_1111);
    }

    #[test]
    fn block_length_stops_at_next_start_or_free_unit() {
        let bits = ChunkBits {
            used: run_mask(0, 4) | run_mask(8, 8) | 1 << 63,
            starts: 1 | 1 << 2 | 1 << 8 | 1 << 63,
        };
        assert_eq!(block_len(bits, 0), 2);
        assert_eq!(block_len(bits, 2), 2);
        assert_eq!(block_len(bits, 8), 8);
        assert_eq!(block_len(bits, 63), 1);
        let whole = ChunkBits {
            used: !0,
            starts: 1,
        };
        assert_eq!(block_len(whole, 0), 64);
    }
}
