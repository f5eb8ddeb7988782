//! A group as set bits over its parent's ranks, with rank and select in
//! constant time and no bit-by-bit scans.
//!
//! Layout (in the spirit of Vigna's rank9): bits are cut into blocks of 512
//! (eight words). Per block a `u32` counts the members before the block and
//! a `u64` packs seven 9-bit counts of the members before words 1..=7 of the
//! block. Rank is two table reads and one popcount. Select reads a sample
//! (the block of every 512th member), binary-searches the block counts
//! between two samples (a span of one to a few blocks unless the bitmap is
//! sparse), picks the word from the packed counts with seven comparisons and
//! selects inside the word with byte popcounts and a 2 KiB table.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

const WORD_BITS: usize = 64;
const BLOCK_WORDS: usize = 8;
const BLOCK_BITS: usize = WORD_BITS * BLOCK_WORDS;
/// One select sample per this many members.
const SAMPLE_EVERY: usize = 512;
/// Width of one packed in-block count.
const FIELD_BITS: usize = 9;
const FIELD_MASK: u64 = (1 << FIELD_BITS) - 1;

/// Heap bytes of a bitmap over `len` parent ranks holding `ones` members;
/// the formula the representation choice uses, equal to what
/// [`Bitmap::heap_bytes`] reports once built.
pub(super) const fn heap_bytes(len: usize, ones: usize) -> usize {
    let blocks = len.div_ceil(BLOCK_BITS);
    // Words, block counts (u32), packed word counts (u64), select samples.
    blocks * (BLOCK_WORDS * 8 + 4 + 8) + 4 * (ones.div_ceil(SAMPLE_EVERY) + 1)
}

/// Set bits over `0..len` with rank/select indexes.
pub(super) struct Bitmap {
    /// The bits, padded with zeros to whole blocks.
    words: Box<[u64]>,
    /// Members before each block.
    block_before: Box<[u32]>,
    /// Per block: members before word `k` (k = 1..=7) in bits `9(k-1)..9k`.
    word_before: Box<[u64]>,
    /// Block holding member `j * SAMPLE_EVERY`, then the last block.
    samples: Box<[u32]>,
    ones: u32,
}

impl Bitmap {
    /// Builds the bitmap of `members` (strictly increasing, each `< len`).
    pub(super) fn new(len: u32, members: &[u32]) -> Self {
        let blocks = (len as usize).div_ceil(BLOCK_BITS);
        let mut words = vec![0u64; blocks * BLOCK_WORDS];
        for &m in members {
            if let Some(word) = words.get_mut(m as usize / WORD_BITS) {
                *word |= 1 << (m as usize % WORD_BITS);
            }
        }
        let mut block_before = Vec::with_capacity(blocks);
        let mut word_before = Vec::with_capacity(blocks);
        let mut total = 0u32;
        for block in words.chunks_exact(BLOCK_WORDS) {
            block_before.push(total);
            let mut inside = 0u64;
            let mut packed = 0u64;
            for (k, word) in block.iter().enumerate() {
                if k > 0 {
                    packed |= inside << (FIELD_BITS * (k - 1));
                }
                inside += u64::from(word.count_ones());
            }
            word_before.push(packed);
            // At most 512 per block and the parent is below 2^31 ranks.
            total += inside as u32;
        }
        let mut samples = Vec::with_capacity(members.len().div_ceil(SAMPLE_EVERY) + 1);
        samples.extend(
            members
                .iter()
                .step_by(SAMPLE_EVERY)
                .map(|&m| (m as usize / BLOCK_BITS) as u32),
        );
        samples.push(blocks.saturating_sub(1) as u32);
        Bitmap {
            words: words.into_boxed_slice(),
            block_before: block_before.into_boxed_slice(),
            word_before: word_before.into_boxed_slice(),
            samples: samples.into_boxed_slice(),
            ones: total,
        }
    }

    /// Heap bytes held.
    pub(super) fn heap_bytes(&self) -> usize {
        self.words.len() * 8
            + self.block_before.len() * 4
            + self.word_before.len() * 8
            + self.samples.len() * 4
    }

    /// The member index of parent rank `pos`, or `None` when its bit is
    /// clear (rank: members strictly before `pos`).
    #[inline]
    pub(super) fn rank_if_set(&self, pos: u32) -> Option<u32> {
        let w = pos as usize / WORD_BITS;
        let word = *self.words.get(w)?;
        let bit = 1u64 << (pos as usize % WORD_BITS);
        if word & bit == 0 {
            return None;
        }
        let b = w / BLOCK_WORDS;
        let before_block = *self.block_before.get(b)?;
        let before_word = field(*self.word_before.get(b)?, w % BLOCK_WORDS);
        Some(before_block + before_word + (word & (bit - 1)).count_ones())
    }

    /// The parent rank of member `r` (select), or `None` past the last one.
    #[inline]
    pub(super) fn select(&self, r: u32) -> Option<u32> {
        if r >= self.ones {
            return None;
        }
        let j = r as usize / SAMPLE_EVERY;
        let lo = *self.samples.get(j)? as usize;
        let hi = *self.samples.get(j + 1)? as usize;
        // Last block whose count of earlier members is <= r.
        let span = self.block_before.get(lo..=hi)?;
        let b = lo + span.partition_point(|&c| c <= r).checked_sub(1)?;
        let inside = r.checked_sub(*self.block_before.get(b)?)?;
        let packed = *self.word_before.get(b)?;
        // Counts grow with k, so the words at or below `inside` are a prefix.
        let mut k = 0;
        for i in 0..BLOCK_WORDS - 1 {
            k += usize::from(((packed >> (FIELD_BITS * i)) & FIELD_MASK) as u32 <= inside);
        }
        let in_word = inside.checked_sub(field(packed, k))?;
        let w = b * BLOCK_WORDS + k;
        let bit = select_in_word(*self.words.get(w)?, in_word)?;
        Some((w * WORD_BITS) as u32 + bit)
    }
}

/// Members before word `k` of a block, from its packed counts.
#[inline]
fn field(packed: u64, k: usize) -> u32 {
    if k == 0 {
        0
    } else {
        ((packed >> (FIELD_BITS * (k - 1))) & FIELD_MASK) as u32
    }
}

/// Position of the `k`-th (from 0) set bit of `word`; `None` if it has no
/// more than `k` set bits.
#[inline]
fn select_in_word(word: u64, k: u32) -> Option<u32> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    if k >= word.count_ones() {
        return None;
    }
    // Popcount of each byte, then running sums: byte i = ones in bytes 0..=i.
    let mut s = word - ((word >> 1) & 0x5555_5555_5555_5555);
    s = (s & 0x3333_3333_3333_3333) + ((s >> 2) & 0x3333_3333_3333_3333);
    s = (s + (s >> 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    let sums = s.wrapping_mul(ONES);
    // High bit of byte i set iff sums_i <= k; no borrow crosses bytes since
    // every sums_i <= 64 < 128 + k.
    let at_or_below = ((u64::from(k) * ONES | HIGHS) - sums) & HIGHS;
    let shift = at_or_below.count_ones() * 8;
    let before = ((sums << 8) >> shift) & 0xFF;
    let byte = ((word >> shift) & 0xFF) as usize;
    let in_byte = (u64::from(k) - before) as usize;
    let bit = *SELECT_IN_BYTE.get(byte * 8 + in_byte)?;
    Some(shift + u32::from(bit))
}

/// `SELECT_IN_BYTE[b * 8 + j]`: position of the `j`-th set bit of byte `b`
/// (8 when `b` has fewer set bits).
static SELECT_IN_BYTE: [u8; 256 * 8] = select_in_byte_table();

const fn select_in_byte_table() -> [u8; 256 * 8] {
    let mut table = [8u8; 256 * 8];
    let mut b = 0;
    while b < 256 {
        let mut j = 0;
        let mut bit = 0;
        while bit < 8 {
            if (b >> bit) & 1 == 1 {
                table[b * 8 + j] = bit as u8;
                j += 1;
            }
            bit += 1;
        }
        b += 1;
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny xorshift so the checks cover irregular bit patterns.
    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    #[test]
    fn select_in_word_matches_a_plain_scan() {
        let mut state = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..2000 {
            let word = xorshift(&mut state) & xorshift(&mut state);
            let positions: Vec<u32> = (0..64).filter(|&i| word >> i & 1 == 1).collect();
            for (k, &p) in positions.iter().enumerate() {
                assert_eq!(select_in_word(word, k as u32), Some(p));
            }
            assert_eq!(select_in_word(word, positions.len() as u32), None);
        }
        assert_eq!(select_in_word(u64::MAX, 63), Some(63));
        assert_eq!(select_in_word(0, 0), None);
    }

    #[test]
    fn rank_and_select_agree_with_the_member_list() {
        let mut state = 0x1234_5678_9ABC_DEF1;
        // Densities from sparse to full, lengths around block edges.
        for &(len, keep_in_256) in &[
            (0u32, 128u64),
            (1, 256),
            (511, 3),
            (512, 256),
            (513, 200),
            (5000, 1),
            (20_000, 20),
            (20_000, 250),
        ] {
            let members: Vec<u32> = (0..len)
                .filter(|_| xorshift(&mut state) % 256 < keep_in_256)
                .collect();
            let bits = Bitmap::new(len, &members);
            assert_eq!(bits.heap_bytes(), heap_bytes(len as usize, members.len()));
            for (r, &m) in members.iter().enumerate() {
                assert_eq!(bits.select(r as u32), Some(m));
            }
            assert_eq!(bits.select(members.len() as u32), None);
            let mut next = 0;
            for pos in 0..len {
                let expected = match members.get(next) {
                    Some(&m) if m == pos => {
                        next += 1;
                        Some(next as u32 - 1)
                    }
                    _ => None,
                };
                assert_eq!(bits.rank_if_set(pos), expected);
            }
            assert_eq!(bits.rank_if_set(len + 1000), None);
        }
    }
}
