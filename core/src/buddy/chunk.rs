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

/// Bit `u` set where `u` is a multiple of `2^order`, for orders 1..=5.
const ALIGNED_1: u64 = 0x5555_5555_5555_5555;
const ALIGNED_2: u64 = 0x1111_1111_1111_1111;
const ALIGNED_3: u64 = 0x0101_0101_0101_0101;
const ALIGNED_4: u64 = 0x0001_0001_0001_0001;
const ALIGNED_5: u64 = 0x0000_0001_0000_0001;

/// Per small order `j`, the starts of the free blocks of exactly order `j`.
///
/// `r_j` bit `u`: units `u .. u + 2^j` are all unused and `u` is aligned to
/// `2^j`. A free block of exactly order `j` is such a run whose parent run
/// (`r_{j+1}`, spread over both halves) is not free as a whole. Written out
/// without loops: this is the hot path of every small allocation.
#[inline(always)]
pub(super) fn exact_free(used: u64) -> [u64; SMALL_ORDERS] {
    let r0 = !used;
    let r1 = r0 & (r0 >> 1) & ALIGNED_1;
    let r2 = r1 & (r1 >> 2) & ALIGNED_2;
    let r3 = r2 & (r2 >> 4) & ALIGNED_3;
    let r4 = r3 & (r3 >> 8) & ALIGNED_4;
    let r5 = r4 & (r4 >> 16) & ALIGNED_5;
    let r6 = r5 & (r5 >> 32) & 1;
    [
        r0 & !(r1 | r1 << 1),
        r1 & !(r2 | r2 << 2),
        r2 & !(r3 | r3 << 4),
        r3 & !(r4 | r4 << 8),
        r4 & !(r5 | r5 << 16),
        r5 & !(r6 | r6 << 32),
    ]
}

/// Starts of the free blocks of exactly order `j` (< 6): the same as
/// `exact_free(used)[j]`, computing only the runs it needs.
#[inline(always)]
pub(super) fn exact_free_of(used: u64, j: u32) -> u64 {
    let r0 = !used;
    let r1 = r0 & (r0 >> 1) & ALIGNED_1;
    if j == 0 {
        return r0 & !(r1 | r1 << 1);
    }
    let r2 = r1 & (r1 >> 2) & ALIGNED_2;
    if j == 1 {
        return r1 & !(r2 | r2 << 2);
    }
    let r3 = r2 & (r2 >> 4) & ALIGNED_3;
    if j == 2 {
        return r2 & !(r3 | r3 << 4);
    }
    let r4 = r3 & (r3 >> 8) & ALIGNED_4;
    if j == 3 {
        return r3 & !(r4 | r4 << 8);
    }
    let r5 = r4 & (r4 >> 16) & ALIGNED_5;
    if j == 4 {
        return r4 & !(r5 | r5 << 16);
    }
    let r6 = r5 & (r5 >> 32) & 1;
    r5 & !(r6 | r6 << 32)
}

/// Bit `j` set when the chunk has a free block of exactly order `j`.
#[inline(always)]
pub(super) fn avail(used: u64) -> u8 {
    let e = exact_free(used);
    u8::from(e[0] != 0)
        | u8::from(e[1] != 0) << 1
        | u8::from(e[2] != 0) << 2
        | u8::from(e[3] != 0) << 3
        | u8::from(e[4] != 0) << 4
        | u8::from(e[5] != 0) << 5
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
    use super::{avail, block_len, exact_free, run_mask, ChunkBits};

    #[test]
    fn free_blocks_of_a_partly_used_chunk() {
        // Units 0..5 usable, 5..64 past the end (as for a 5-unit heap tail).
        let used = !run_mask(0, 5);
        assert_eq!(exact_free(used), [1 << 4, 0, 1, 0, 0, 0]);
        assert_eq!(avail(used), 0b101);
    }

    #[test]
    fn whole_free_chunk_has_no_small_free_block() {
        assert_eq!(exact_free(0), [0; 6]);
        assert_eq!(avail(0), 0);
        assert_eq!(exact_free(1), [2, 4, 1 << 4, 1 << 8, 1 << 16, 1 << 32]);
        assert_eq!(avail(1), 0b11_1111);
    }

    #[test]
    fn exact_free_matches_a_direct_definition() {
        // Every run of exactly order j is free, aligned, and its parent is not.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let used = x & x.rotate_left(7);
            let e = exact_free(used);
            for (j, &mask) in e.iter().enumerate() {
                assert_eq!(super::exact_free_of(used, j as u32), mask);
                let len = 1u32 << j;
                for u in (0..64).step_by(len as usize) {
                    let free = used & run_mask(u, len) == 0;
                    let parent = u & !(2 * len - 1);
                    let parent_free = used & run_mask(parent, 2 * len) == 0;
                    assert_eq!(mask >> u & 1 == 1, free && !parent_free, "j={j} u={u}");
                }
            }
        }
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
