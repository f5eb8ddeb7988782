//! A group as set bits over its parent's ranks, with rank and select in
//! constant time and no bit-by-bit scans.
//!
//! Layout (in the spirit of Vigna's rank9): bits are cut into blocks of 512
//! (eight words). Each block stores, next to its words, the members before
//! it and seven packed 9-bit counts of the members before words 1..=7 of
//! the block, so one block fetch (80 bytes) answers both queries.
//!
//! - Rank: the two counts plus one popcount.
//! - Select: a sample gives the block of every `2^s`-th member, `2^s`
//!   being about the members of one block (16 to 256), so the answer is
//!   nearly always in that block or the next: one branch-free step, then
//!   more steps (or a binary search over long spans, in clumpy bitmaps).
//!   A branch-free three-step search over the packed counts finds the word,
//!   and the bit inside it comes from one `pdep` where the processor has a
//!   fast one ([`crate::cpu`]), otherwise from byte popcounts plus a 2 KiB
//!   table.
//! - Walks (the members in order, or a batch of ranks mapped to parent
//!   ranks): from one set bit to the next, or a few on, word by word, with
//!   a select only to start and past long clear stretches.

#![allow(unsafe_code)]

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

const WORD_BITS: usize = 64;
const BLOCK_WORDS: usize = 8;
const BLOCK_BITS: usize = WORD_BITS * BLOCK_WORDS;
/// Select samples are taken every `2^shift` members, with `shift` in this
/// range (see [`sample_shift`]).
const SAMPLE_SHIFTS: (u32, u32) = (4, 8);
/// Sample spans up to this many blocks are stepped through, longer ones
/// binary-searched.
const LINEAR_SPAN: usize = 8;
/// Words a walk looks ahead for the next member before falling back to a
/// select.
const NEAR_WORDS: usize = BLOCK_WORDS;
/// Steps of at most this many members go bit by bit, longer ones count
/// the set bits of whole words.
const BIT_STEPS: u32 = 4;
/// Largest step in members a walk takes from one member to another.
const MAX_STEP: u32 = (NEAR_WORDS * WORD_BITS) as u32;
/// Width of one packed in-block count.
const FIELD_BITS: usize = 9;
const FIELD_MASK: u64 = (1 << FIELD_BITS) - 1;

/// Heap bytes of a bitmap over `len` parent ranks holding `ones` members;
/// the formula the representation choice uses, equal to what
/// [`Bitmap::heap_bytes`] reports once built.
pub(super) const fn heap_bytes(len: usize, ones: usize) -> usize {
    len.div_ceil(BLOCK_BITS) * core::mem::size_of::<Block>()
        + 4 * (ones.div_ceil(1 << sample_shift(len, ones)) + 1)
}

/// Log2 of the members between select samples: about the members of one
/// block, so that two samples are rarely more than a block apart. Sparse
/// bitmaps (rarely chosen below 1/27 density, where dense is smaller) get
/// denser samples, dense ones sparser samples.
const fn sample_shift(len: usize, ones: usize) -> u32 {
    let len = if len == 0 { 1 } else { len };
    let per_block = ones.saturating_mul(BLOCK_BITS) / len;
    let log = if per_block == 0 {
        0
    } else {
        usize::BITS - 1 - per_block.leading_zeros()
    };
    if log < SAMPLE_SHIFTS.0 {
        SAMPLE_SHIFTS.0
    } else if log > SAMPLE_SHIFTS.1 {
        SAMPLE_SHIFTS.1
    } else {
        log
    }
}

/// 512 bits with their counts.
#[derive(Clone, Copy, Default)]
struct Block {
    /// Members before this block.
    before: u64,
    /// Members before word `k` (k = 1..=7) in bits `9(k-1)..9k`.
    counts: u64,
    words: [u64; BLOCK_WORDS],
}

/// Set bits over `0..len` with rank/select indexes.
pub(super) struct Bitmap {
    /// The bits, padded with zeros to whole blocks.
    blocks: Box<[Block]>,
    /// Block holding member `j << sample_shift`, then the last block.
    samples: Box<[u32]>,
    sample_shift: u32,
    ones: u32,
}

impl Bitmap {
    /// Builds the bitmap of `members` (strictly increasing, each `< len`).
    pub(super) fn new(len: u32, members: &[u32]) -> Self {
        let count = (len as usize).div_ceil(BLOCK_BITS);
        let mut blocks = vec![Block::default(); count];
        for &m in members {
            let m = m as usize;
            if let Some(block) = blocks.get_mut(m / BLOCK_BITS) {
                if let Some(word) = block.words.get_mut(m % BLOCK_BITS / WORD_BITS) {
                    *word |= 1 << (m % WORD_BITS);
                }
            }
        }
        let mut total = 0u64;
        for block in &mut blocks {
            block.before = total;
            let mut inside = 0u64;
            for (k, word) in block.words.iter().enumerate() {
                if k > 0 {
                    block.counts |= inside << (FIELD_BITS * (k - 1));
                }
                inside += u64::from(word.count_ones());
            }
            total += inside;
        }
        let shift = sample_shift(len as usize, members.len());
        let mut samples = Vec::with_capacity(members.len().div_ceil(1 << shift) + 1);
        samples.extend(
            members
                .iter()
                .step_by(1 << shift)
                .map(|&m| (m as usize / BLOCK_BITS) as u32),
        );
        samples.push(count.saturating_sub(1) as u32);
        Bitmap {
            blocks: blocks.into_boxed_slice(),
            samples: samples.into_boxed_slice(),
            sample_shift: shift,
            // The parent has fewer than 2^31 ranks.
            ones: total as u32,
        }
    }

    /// Heap bytes held.
    pub(super) fn heap_bytes(&self) -> usize {
        self.blocks.len() * core::mem::size_of::<Block>() + self.samples.len() * 4
    }

    /// The member index of parent rank `pos`, or `None` when its bit is
    /// clear (rank: members strictly before `pos`).
    #[inline]
    pub(super) fn rank_if_set(&self, pos: u32) -> Option<u32> {
        let pos = pos as usize;
        let block = self.blocks.get(pos / BLOCK_BITS)?;
        let k = pos % BLOCK_BITS / WORD_BITS;
        let word = *block.words.get(k)?;
        let bit = 1u64 << (pos % WORD_BITS);
        if word & bit == 0 {
            return None;
        }
        Some(block.before as u32 + field(block.counts, k) + (word & (bit - 1)).count_ones())
    }

    /// The parent rank of member `r` (select), or `None` past the last one.
    ///
    /// Not inlined: the walk up a group's parents stays a tight loop for
    /// the other representations (one call here costs about 1 ns of the
    /// 10 a select takes; inlined, its two paths made every walk, dense
    /// ones included, save and restore registers).
    #[inline(never)]
    pub(super) fn select(&self, r: u32) -> Option<u32> {
        #[cfg(target_arch = "x86_64")]
        if crate::cpu::has_fast_pdep() {
            // SAFETY: the processor has BMI2 and POPCNT (`has_fast_pdep`).
            return unsafe { self.select_bmi2(r) };
        }
        self.select_with(r, select_in_word)
    }

    /// [`select`](Self::select) compiled for BMI2 and POPCNT.
    ///
    /// # Safety
    ///
    /// The processor must have BMI2 and POPCNT.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "bmi2,popcnt")]
    unsafe fn select_bmi2(&self, r: u32) -> Option<u32> {
        // A closure, not the function itself: functions with target
        // features are not `Fn`; the closure inherits this one's features.
        self.select_with(r, |word, k| select_in_word_bmi2(word, k))
    }

    /// Select, with `in_word` finding the bit inside the word.
    #[inline(always)]
    fn select_with(&self, r: u32, in_word: impl Fn(u64, u32) -> Option<u32>) -> Option<u32> {
        if r >= self.ones {
            return None;
        }
        let j = (r >> self.sample_shift) as usize;
        let lo = *self.samples.get(j)? as usize;
        let hi = *self.samples.get(j + 1)? as usize;
        // The last block in lo..=hi with at most r members before it.
        let target = u64::from(r);
        let mut b = lo;
        if hi.checked_sub(lo)? <= LINEAR_SPAN {
            // The first step is a coin flip at density 1/2: take it without
            // a branch; further steps are rare and predictable.
            let next = (lo + 1).min(hi);
            let past = self.blocks.get(next)?.before <= target;
            b += usize::from(past & (next > lo));
            // Counts grow, so this fails at once when the step was not taken.
            let mut next = lo + 2;
            while next <= hi && self.blocks.get(next)?.before <= target {
                b = next;
                next += 1;
            }
        } else {
            let span = self.blocks.get(lo + 1..=hi)?;
            b += span.partition_point(|block| block.before <= target);
        }
        let block = self.blocks.get(b)?;
        let inside = (target - block.before) as u32;
        // Counts grow with k: binary search for the last word whose count
        // of earlier members is <= inside, without branches.
        let mut k = 0;
        let mut before = 0;
        for step in [4, 2, 1] {
            let count = ((block.counts >> (FIELD_BITS * (k + step - 1))) & FIELD_MASK) as u32;
            let take = count <= inside;
            k += usize::from(take) * step;
            before = if take { count } else { before };
        }
        let bit = in_word(*block.words.get(k)?, inside.checked_sub(before)?)?;
        Some(((b * BLOCK_WORDS + k) * WORD_BITS) as u32 + bit)
    }
}

/// A place in a walk over the set bits: member `r`, at parent rank `pos`.
#[derive(Clone, Copy)]
struct Cursor {
    r: u32,
    pos: u32,
}

impl Bitmap {
    /// Word `w` of the bits.
    #[inline]
    fn word(&self, w: usize) -> Option<u64> {
        self.blocks
            .get(w / BLOCK_WORDS)?
            .words
            .get(w % BLOCK_WORDS)
            .copied()
    }

    /// A cursor at member `r` (by select).
    fn cursor_at(&self, r: u32) -> Option<Cursor> {
        Some(Cursor {
            r,
            pos: self.select(r)?,
        })
    }

    /// Moves `cursor` to member `r`, stepping over the set bits between
    /// when `r` lies within [`MAX_STEP`] members and [`NEAR_WORDS`] words
    /// of it, either way; `None` (and the cursor unmoved) otherwise, for a
    /// select instead.
    #[inline(always)]
    fn step_to(&self, cursor: &mut Cursor, r: u32) -> Option<u32> {
        let forward = r > cursor.r;
        let d = if forward { r - cursor.r } else { cursor.r - r };
        if d == 0 || d > MAX_STEP {
            return None;
        }
        let mut left = d;
        let mut w = cursor.pos as usize / WORD_BITS;
        let bit = cursor.pos as usize % WORD_BITS;
        // The set bits of the cursor's word beyond it in the walk's
        // direction (two shifts: nothing lies above bit 63).
        let mut rest = self.word(w)?
            & if forward {
                u64::MAX << bit << 1
            } else {
                !(u64::MAX << bit)
            };
        for _ in 0..=NEAR_WORDS {
            if left <= BIT_STEPS {
                // A few members on: one set bit at a time.
                while rest != 0 {
                    let found = if forward {
                        rest.trailing_zeros()
                    } else {
                        63 - rest.leading_zeros()
                    };
                    left -= 1;
                    if left == 0 {
                        let pos = (w * WORD_BITS) as u32 + found;
                        *cursor = Cursor { r, pos };
                        return Some(pos);
                    }
                    rest &= !(1 << found);
                }
            } else {
                let count = rest.count_ones();
                if left <= count {
                    let k = if forward { left - 1 } else { count - left };
                    let pos = (w * WORD_BITS) as u32 + select_in_word(rest, k)?;
                    *cursor = Cursor { r, pos };
                    return Some(pos);
                }
                left -= count;
            }
            w = if forward { w + 1 } else { w.checked_sub(1)? };
            rest = self.word(w)?;
        }
        None
    }

    /// Parent rank of member `r`: stepped to from `cursor` when near, else
    /// a select that moves the cursor there.
    #[inline(always)]
    fn walk_to(&self, cursor: &mut Option<Cursor>, r: u32) -> Option<u32> {
        if let Some(pos) = cursor.as_mut().and_then(|c| self.step_to(c, r)) {
            return Some(pos);
        }
        let at = self.cursor_at(r)?;
        *cursor = Some(at);
        Some(at.pos)
    }

    /// Writes the parent ranks of members `start, start + 1, …` into `out`
    /// (all members): one select, then each set bit in turn, word by word
    /// (a select again past more than [`NEAR_WORDS`] clear words, so a
    /// batch never scans far for its next member).
    pub(super) fn fill(&self, start: u32, out: &mut [u32]) {
        let Some(first) = self.select(start) else {
            return;
        };
        let mut w = first as usize / WORD_BITS;
        // The set bits from `first` on.
        let Some(mut word) = self
            .word(w)
            .map(|word| word & (u64::MAX << (first as usize % WORD_BITS)))
        else {
            return;
        };
        for (slot, r) in out.iter_mut().zip(start..) {
            let mut clear = 0;
            while word == 0 {
                w += 1;
                clear += 1;
                if clear > NEAR_WORDS {
                    // Far away: find member `r` directly.
                    let Some(pos) = self.select(r) else {
                        return;
                    };
                    w = pos as usize / WORD_BITS;
                    let Some(at) = self.word(w) else {
                        return;
                    };
                    word = at & (u64::MAX << (pos as usize % WORD_BITS));
                    break;
                }
                let Some(next) = self.word(w) else {
                    return;
                };
                word = next;
            }
            *slot = (w * WORD_BITS) as u32 + word.trailing_zeros();
            word &= word - 1;
        }
    }

    /// Replaces each of `ranks` (members) by its parent rank: stepping
    /// from the rank before when this one lies near it, either way (as in
    /// a run or a stride over the bitmap), a select elsewhere.
    pub(super) fn map_in_place(&self, ranks: &mut [u32]) {
        let mut cursor = None;
        for slot in ranks {
            if let Some(pos) = self.walk_to(&mut cursor, *slot) {
                *slot = pos;
            }
        }
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
/// more than `k` set bits. Uses no `count_ones`: without the POPCNT
/// instruction (the default x86-64 target) that is a long software routine.
#[inline]
fn select_in_word(word: u64, k: u32) -> Option<u32> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // Popcount of each byte, then running sums: byte i = ones in bytes 0..=i.
    let mut s = word - ((word >> 1) & 0x5555_5555_5555_5555);
    s = (s & 0x3333_3333_3333_3333) + ((s >> 2) & 0x3333_3333_3333_3333);
    s = (s + (s >> 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    let sums = s.wrapping_mul(ONES);
    let k = u64::from(k);
    if k >= sums >> 56 {
        return None;
    }
    // High bit of byte i set iff sums_i > k; no borrow crosses bytes since
    // every sums_i <= 64 < 128 + k. Byte 7 qualifies, so this is non-zero
    // and its lowest set bit marks the byte holding the answer.
    let above = !(((k * ONES) | HIGHS) - sums) & HIGHS;
    let shift = above.trailing_zeros() - 7;
    let before = ((sums << 8) >> shift) & 0xFF;
    let byte = ((word >> shift) & 0xFF) as usize;
    let bit = *SELECT_IN_BYTE.get(byte * 8 + (k - before) as usize)?;
    Some(shift + u32::from(bit))
}

/// [`select_in_word`] with one `pdep`: depositing `1 << k` into the set
/// bits of `word` leaves exactly the `k`-th of them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2,popcnt")]
#[inline]
fn select_in_word_bmi2(word: u64, k: u32) -> Option<u32> {
    let one = 1u64.checked_shl(k)?;
    // SAFETY: `pdep` needs BMI2, which this function is compiled for and
    // only called where present.
    #[allow(unused_unsafe)]
    let bit = unsafe { core::arch::x86_64::_pdep_u64(one, word) };
    (bit != 0).then(|| bit.trailing_zeros())
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
                assert_eq!(select_in_word_hw(word, k as u32), Some(p));
            }
            assert_eq!(select_in_word(word, positions.len() as u32), None);
            assert_eq!(select_in_word_hw(word, positions.len() as u32), None);
        }
        for (word, k, expected) in [(u64::MAX, 63, Some(63)), (0, 0, None), (u64::MAX, 64, None)] {
            assert_eq!(select_in_word(word, k), expected);
            assert_eq!(select_in_word_hw(word, k), expected);
        }
    }

    /// The BMI2 variant where the processor has it, else the portable one
    /// again.
    fn select_in_word_hw(word: u64, k: u32) -> Option<u32> {
        #[cfg(target_arch = "x86_64")]
        if crate::cpu::has_fast_pdep() {
            // SAFETY: checked just above.
            return unsafe { select_in_word_bmi2(word, k) };
        }
        select_in_word(word, k)
    }

    /// Both select paths of a bitmap, where the processor has both.
    fn select_both(bits: &Bitmap, r: u32) -> Option<u32> {
        let portable = bits.select_with(r, select_in_word);
        assert_eq!(bits.select(r), portable, "select paths disagree at {r}");
        portable
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
                assert_eq!(select_both(&bits, r as u32), Some(m));
            }
            assert_eq!(select_both(&bits, members.len() as u32), None);
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

    #[test]
    fn walks_agree_with_select_in_any_order() {
        let mut state = 0x0BAD_5EED_1234_5678;
        // Dense, sparse and clumpy bitmaps (long clear stretches force the
        // fall back to select).
        for &(len, keep_in_256, clump) in &[
            (3000u32, 128u64, 1u32),
            (3000, 250, 1),
            (20_000, 3, 1),
            (20_000, 200, 2048),
            (1, 256, 1),
        ] {
            let members: Vec<u32> = (0..len)
                .filter(|p| (p / clump) % 2 == 0 && xorshift(&mut state) % 256 < keep_in_256)
                .collect();
            let bits = Bitmap::new(len, &members);
            let n = members.len() as u32;
            // fill from every start, in chunks crossing words and blocks.
            for start in (0..n).step_by(37) {
                let count = (n - start).min(700) as usize;
                let mut out = vec![u32::MAX; count];
                bits.fill(start, &mut out);
                assert_eq!(out, members[start as usize..][..count]);
            }
            // map_in_place on runs, strides both ways, and random ranks.
            let mut orders: Vec<Vec<u32>> = vec![
                (0..n).collect(),
                (0..n).rev().collect(),
                (0..n).step_by(3).collect(),
                (0..n).rev().step_by(5).collect(),
                (0..n).step_by(600).collect(),
            ];
            orders.push(
                (0..n.min(2000))
                    .map(|_| (xorshift(&mut state) % u64::from(n.max(1))) as u32)
                    .filter(|_| n > 0)
                    .collect(),
            );
            for ranks in orders {
                let mut mapped = ranks.clone();
                bits.map_in_place(&mut mapped);
                let want: Vec<u32> = ranks.iter().map(|&r| members[r as usize]).collect();
                assert_eq!(mapped, want);
            }
        }
    }
}
