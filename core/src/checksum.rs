//! Fletcher-64: the checksum the `shm` transport can put on what it
//! writes into shared memory (`btl_shm_checksum`).
//!
//! The algorithm is the textbook one: the input is read as little-endian
//! 32-bit words, the last one padded with zero bytes; `a` sums the words
//! and `b` sums the successive values of `a`, both modulo `2^32 - 1`; the
//! result is `b << 32 | a`. It catches every change of one to four
//! consecutive bytes (a word's change is never a multiple of the modulus,
//! except all zeros against all ones), and through `b` a swap of words.
//! It is a check against stray writes, not against a party that wants to
//! forge bytes: anyone can recompute it.
//!
//! It needs no special instruction to be fast: the sums are split over
//! eight lanes (word `i` goes to lane `i % 8`) that have no chain from one
//! word to the next, and the lanes are merged into the textbook `(a, b)`
//! once per block, when the moduli are taken. On x86-64 the lanes are
//! AVX2 registers where the processor has them (asked once with CPUID),
//! else SSE2 ones (part of the baseline); elsewhere plain integers. [`Fletcher64`] takes its
//! input in pieces of any length and gives the same answer as one call
//! over their concatenation.

// SSE2 and AVX2 loads of the input.
#![allow(unsafe_code)]

/// Modulus of both sums.
const MODULUS: u64 = 0xffff_ffff;
/// Lanes: words summed side by side.
const LANES: usize = 8;
/// Bytes of a row (one word per lane).
const ROW: usize = 4 * LANES;
/// Inputs shorter than this are summed word by word: merging the lanes
/// costs more than it saves below it.
const SHORT: usize = 256;
/// Rows summed before the lanes are reduced: a lane's `a` stays below
/// `rows · 2^32` and its `b` below `rows² · 2^31`, far from overflowing.
const BLOCK_ROWS: usize = 8192;
/// Words summed one at a time before both sums are reduced (the same
/// bound). Short inputs are reduced only when the checksum is taken, so
/// that the few words of a small message cost a few additions.
const SCALAR_RUN: usize = 8192;

/// A Fletcher-64 computation in progress.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fletcher64 {
    /// Sum of the words, reduced at most [`SCALAR_RUN`] words ago.
    a: u64,
    /// Sum of the successive `a`s, reduced when `a` is.
    b: u64,
    /// Words added since the sums were last reduced.
    since: usize,
    /// Bytes of a word not complete yet.
    partial: [u8; 4],
    /// How many of `partial` are filled (0 to 3 between calls).
    filled: usize,
}

impl Fletcher64 {
    /// A computation over no bytes yet.
    pub const fn new() -> Self {
        Self {
            a: 0,
            b: 0,
            since: 0,
            partial: [0; 4],
            filled: 0,
        }
    }

    /// Adds `bytes` to the input.
    #[inline]
    pub fn update(&mut self, bytes: &[u8]) {
        if self.filled == 0 && bytes.len() < SHORT && self.since + SHORT / 4 <= SCALAR_RUN {
            // A short piece (a fragment's header, a small message): word
            // by word, without the machinery of long inputs.
            let mut words = bytes.chunks_exact(4);
            for w in &mut words {
                self.a += u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
                self.b += self.a;
                self.since += 1;
            }
            let tail = words.remainder();
            for (dst, &src) in self.partial.iter_mut().zip(tail) {
                *dst = src;
            }
            self.filled = tail.len();
            return;
        }
        self.update_long(bytes);
    }

    /// [`update`](Self::update) for any input.
    fn update_long(&mut self, mut bytes: &[u8]) {
        if self.filled > 0 {
            while self.filled < 4 {
                let Some((&first, rest)) = bytes.split_first() else {
                    return;
                };
                self.partial[self.filled] = first;
                self.filled += 1;
                bytes = rest;
            }
            self.filled = 0;
            let word = self.partial;
            self.words(&word);
        }
        let whole = bytes.len() / 4 * 4;
        let (words, tail) = bytes.split_at(whole);
        let rows_len = if words.len() < SHORT {
            0
        } else {
            words.len() / ROW * ROW
        };
        let (rows, words) = words.split_at(rows_len);
        for block in rows.chunks(ROW * BLOCK_ROWS) {
            self.rows(block);
        }
        self.words(words);
        self.partial[..tail.len()].copy_from_slice(tail);
        self.filled = tail.len();
    }

    /// Adds one little-endian 64-bit value, as its eight bytes.
    #[inline]
    pub fn update_u64(&mut self, value: u64) {
        if self.filled == 0 && self.since + 2 <= SCALAR_RUN {
            // The two words straight away, the usual case.
            self.a += value & MODULUS;
            self.b += self.a;
            self.a += value >> 32;
            self.b += self.a;
            self.since += 2;
        } else {
            self.update(&value.to_le_bytes());
        }
    }

    /// The checksum of everything added: `b << 32 | a`, the last word
    /// padded with zero bytes.
    #[inline]
    pub fn finish(&self) -> u64 {
        let mut done = *self;
        if done.filled > 0 {
            let mut last = [0u8; 4];
            for (dst, &src) in last.iter_mut().zip(&done.partial).take(done.filled) {
                *dst = src;
            }
            let w = u64::from(u32::from_le_bytes(last));
            done.a += w;
            done.b += done.a;
        }
        done.reduce();
        done.b << 32 | done.a
    }

    /// Takes both sums modulo the modulus.
    #[inline]
    fn reduce(&mut self) {
        self.a %= MODULUS;
        self.b %= MODULUS;
        self.since = 0;
    }

    /// Adds whole words (a multiple of 4 bytes), one at a time.
    fn words(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let room = 4 * (SCALAR_RUN - self.since);
            let (run, rest) = bytes.split_at(room.min(bytes.len()));
            let (mut a, mut b) = (self.a, self.b);
            for w in run.chunks_exact(4) {
                a += u64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
                b += a;
            }
            (self.a, self.b) = (a, b);
            self.since += run.len() / 4;
            if self.since >= SCALAR_RUN {
                self.reduce();
            }
            bytes = rest;
        }
    }

    /// Adds whole rows (a multiple of [`ROW`] bytes, at most a block).
    fn rows(&mut self, bytes: &[u8]) {
        self.reduce();
        let (a, b) = lanes(bytes);
        // Word `k·L + l` of the `n = m·L` words is in lane `l`, weighted
        // `n - k·L - l` in `b`: the rows add `Σ a_l` to `a` and
        // `n·a + L·Σ b_l - Σ l·a_l` to `b`.
        let n = (bytes.len() / 4) as u64;
        // A lane's `a` is below 2^45 and its `b` below 2^57 after a block,
        // so their sums fit without reducing each lane first.
        let (mut sum_a, mut sum_b, mut weighted) = (0u64, 0u64, 0u64);
        for (lane, (a, b)) in a.iter().zip(&b).enumerate() {
            sum_a += a;
            sum_b += b;
            weighted += lane as u64 * a;
        }
        // Each term is below 2^48, and the added modulus keeps the
        // difference positive.
        let b =
            self.b + MODULUS + n % MODULUS * self.a % MODULUS + LANES as u64 * (sum_b % MODULUS)
                - weighted % MODULUS;
        self.b = b % MODULUS;
        self.a = (self.a + sum_a) % MODULUS;
    }
}

/// Per-lane sums of whole rows: lane `l` takes words `l`, `l + L`, …;
/// its `a` sums them, its `b` sums its successive `a`s.
type Lanes = ([u64; LANES], [u64; LANES]);

/// [`Lanes`] without special instructions. Each `u64` of a row holds the
/// words of two lanes, split with a mask and a shift.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn lanes_portable(bytes: &[u8]) -> Lanes {
    let (mut a, mut b) = ([0u64; LANES], [0u64; LANES]);
    for row in bytes.chunks_exact(ROW) {
        for (pair, x) in row.chunks_exact(8).enumerate() {
            let x = u64::from_le_bytes([x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]]);
            for (lane, w) in [(2 * pair, x & MODULUS), (2 * pair + 1, x >> 32)] {
                if let (Some(a), Some(b)) = (a.get_mut(lane), b.get_mut(lane)) {
                    *a += w;
                    *b += *a;
                }
            }
        }
    }
    (a, b)
}

/// [`Lanes`] with AVX2 where the processor has it (nearly twice as fast:
/// one load per row), else SSE2, which every x86-64 processor has.
#[cfg(target_arch = "x86_64")]
fn lanes(bytes: &[u8]) -> Lanes {
    if crate::cpu::has_avx2() {
        // SAFETY: the processor has AVX2 and the system saves its
        // registers (checked just above).
        return unsafe { lanes_avx2(bytes) };
    }
    lanes_sse2(bytes)
}

/// [`Lanes`] with AVX2: one 32-byte load per row, split into the even
/// and the odd words (lanes 0, 2, 4, 6 and 1, 3, 5, 7) with a mask and a
/// shift, and four additions.
///
/// # Safety
///
/// The processor must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn lanes_avx2(bytes: &[u8]) -> Lanes {
    use core::arch::x86_64::{
        __m256i, _mm256_add_epi64, _mm256_and_si256, _mm256_loadu_si256, _mm256_set1_epi64x,
        _mm256_setzero_si256, _mm256_srli_epi64, _mm256_storeu_si256,
    };
    let mut out = [[0u64; 4]; 4];
    // SAFETY: AVX2 is there (the caller's promise); each load reads one
    // 32-byte row of `bytes` (unaligned loads are allowed), each store
    // one element of `out`. The intrinsics that touch no memory are safe
    // to call on newer compilers, hence the allowance.
    #[allow(unused_unsafe)]
    unsafe {
        let mask = _mm256_set1_epi64x(MODULUS as i64);
        let zero = _mm256_setzero_si256();
        // `a` of the even and odd lanes, then their `b`.
        let mut s = [zero; 4];
        for row in bytes.chunks_exact(ROW) {
            let x = _mm256_loadu_si256(row.as_ptr().cast::<__m256i>());
            s[0] = _mm256_add_epi64(s[0], _mm256_and_si256(x, mask));
            s[1] = _mm256_add_epi64(s[1], _mm256_srli_epi64(x, 32));
            s[2] = _mm256_add_epi64(s[2], s[0]);
            s[3] = _mm256_add_epi64(s[3], s[1]);
        }
        for (dst, v) in out.iter_mut().zip(s) {
            _mm256_storeu_si256(dst.as_mut_ptr().cast::<__m256i>(), v);
        }
    }
    let (mut a, mut b) = ([0u64; LANES], [0u64; LANES]);
    for i in 0..4 {
        a[2 * i] = out[0][i];
        a[2 * i + 1] = out[1][i];
        b[2 * i] = out[2][i];
        b[2 * i + 1] = out[3][i];
    }
    (a, b)
}

/// [`Lanes`] with SSE2: two 16-byte loads per row, each split into low
/// and high words with a mask and a shift, and eight additions, about
/// twice as fast as the portable loop.
#[cfg(target_arch = "x86_64")]
fn lanes_sse2(bytes: &[u8]) -> Lanes {
    use core::arch::x86_64::{
        __m128i, _mm_add_epi64, _mm_and_si128, _mm_loadu_si128, _mm_set1_epi64x, _mm_setzero_si128,
        _mm_srli_epi64, _mm_storeu_si128,
    };
    let mut out = [[0u64; 2]; 8];
    // SAFETY: SSE2 is part of the x86-64 baseline; each load reads 16
    // bytes inside a 32-byte row of `bytes` (unaligned loads are
    // allowed), and each store writes one 16-byte element of `out`.
    unsafe {
        let mask = _mm_set1_epi64x(MODULUS as i64);
        let zero = _mm_setzero_si128();
        // Registers `0..4` hold `a`, `4..8` hold `b`; register `r` of
        // each holds lanes `2r` (low words of the first load) … see the
        // mapping below.
        let mut s = [zero; 8];
        for row in bytes.chunks_exact(ROW) {
            let x = _mm_loadu_si128(row.as_ptr().cast::<__m128i>());
            let y = _mm_loadu_si128(row.as_ptr().add(16).cast::<__m128i>());
            s[0] = _mm_add_epi64(s[0], _mm_and_si128(x, mask));
            s[1] = _mm_add_epi64(s[1], _mm_srli_epi64(x, 32));
            s[2] = _mm_add_epi64(s[2], _mm_and_si128(y, mask));
            s[3] = _mm_add_epi64(s[3], _mm_srli_epi64(y, 32));
            s[4] = _mm_add_epi64(s[4], s[0]);
            s[5] = _mm_add_epi64(s[5], s[1]);
            s[6] = _mm_add_epi64(s[6], s[2]);
            s[7] = _mm_add_epi64(s[7], s[3]);
        }
        for (dst, v) in out.iter_mut().zip(s) {
            _mm_storeu_si128(dst.as_mut_ptr().cast::<__m128i>(), v);
        }
    }
    // Register 0 holds lanes 0 and 2 (the low words of the first load's
    // two `u64`s), register 1 lanes 1 and 3, registers 2 and 3 the same
    // for lanes 4 to 7.
    const LANE_OF: [[usize; 2]; 4] = [[0, 2], [1, 3], [4, 6], [5, 7]];
    let (mut a, mut b) = ([0u64; LANES], [0u64; LANES]);
    for (r, lanes) in LANE_OF.iter().enumerate() {
        for (half, &lane) in lanes.iter().enumerate() {
            a[lane] = out[r][half];
            b[lane] = out[r + 4][half];
        }
    }
    (a, b)
}

#[cfg(not(target_arch = "x86_64"))]
fn lanes(bytes: &[u8]) -> Lanes {
    lanes_portable(bytes)
}

/// The Fletcher-64 checksum of `bytes`.
pub fn fletcher64(bytes: &[u8]) -> u64 {
    let mut f = Fletcher64::new();
    f.update(bytes);
    f.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// The definition, one word at a time, reducing at every step.
    fn reference(bytes: &[u8]) -> u64 {
        let (mut a, mut b) = (0u64, 0u64);
        for w in bytes.chunks(4) {
            let mut word = [0u8; 4];
            word[..w.len()].copy_from_slice(w);
            a = (a + u64::from(u32::from_le_bytes(word))) % MODULUS;
            b = (b + a) % MODULUS;
        }
        b << 32 | a
    }

    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn known_vectors() {
        // The published Fletcher-64 values (little-endian words).
        assert_eq!(fletcher64(b"abcde"), 0xc8c6_c527_6463_62c6);
        assert_eq!(fletcher64(b"abcdef"), 0xc8c7_2b27_6463_c8c6);
        assert_eq!(fletcher64(b"abcdefgh"), 0x312e_2b28_ccca_c8c6);
        assert_eq!(fletcher64(b""), 0);
        assert_eq!(
            fletcher64(&[0xff; 4]),
            0,
            "all ones is zero modulo 2^32 - 1"
        );
    }

    #[test]
    fn lanes_and_blocks_agree_with_the_definition() {
        for len in (0..300).chain([4095, 4096, 4097, ROW * BLOCK_ROWS * 2 + 37]) {
            let bytes = noise(len, len as u64 + 1);
            assert_eq!(fletcher64(&bytes), reference(&bytes), "{len} bytes");
        }
        // Words near the modulus stress the reductions.
        let high = [0xfeu8; ROW * BLOCK_ROWS + 12];
        assert_eq!(fletcher64(&high), reference(&high));
    }

    #[test]
    fn the_portable_lanes_agree_with_the_fast_ones() {
        let bytes = noise(ROW * 300, 11);
        assert_eq!(lanes_portable(&bytes), lanes(&bytes));
        #[cfg(target_arch = "x86_64")]
        assert_eq!(lanes_portable(&bytes), lanes_sse2(&bytes));
    }

    #[test]
    fn pieces_give_the_answer_of_the_whole() {
        let bytes = noise(1000, 7);
        for cuts in [
            [0, 0, 1000],
            [1, 2, 3],
            [3, 35, 999],
            [7, 64, 700],
            [33, 66, 67],
        ] {
            let mut f = Fletcher64::new();
            f.update(&bytes[..cuts[0]]);
            f.update(&bytes[cuts[0]..cuts[1]]);
            f.update(&bytes[cuts[1]..cuts[2]]);
            f.update(&bytes[cuts[2]..]);
            assert_eq!(f.finish(), fletcher64(&bytes), "{cuts:?}");
        }
        let mut f = Fletcher64::new();
        f.update_u64(0x0807_0605_0403_0201);
        assert_eq!(f.finish(), fletcher64(&[1, 2, 3, 4, 5, 6, 7, 8]));
        // Many small pieces, past the point where the sums are reduced.
        let long = [0xffu8; 8 * SCALAR_RUN + 24];
        let mut f = Fletcher64::new();
        for piece in long.chunks(8) {
            f.update_u64(u64::from_le_bytes(piece.try_into().unwrap()));
        }
        f.update(&[]);
        assert_eq!(f.finish(), reference(&long));
        let mut f = Fletcher64::new();
        for piece in long.chunks(5) {
            f.update(piece);
        }
        assert_eq!(f.finish(), reference(&long));
    }

    #[test]
    fn any_changed_byte_is_caught() {
        let bytes = noise(200, 3);
        let sum = fletcher64(&bytes);
        for i in 0..bytes.len() {
            for flip in [1u8, 0x80, 0xff] {
                let mut bad = bytes.clone();
                bad[i] ^= flip;
                assert_ne!(fletcher64(&bad), sum, "byte {i} ^ {flip:#x}");
            }
        }
        let mut swapped = bytes.clone();
        swapped.swap(0, 4);
        if bytes[0] != bytes[4] {
            assert_ne!(fletcher64(&swapped), sum);
        }
    }
}
