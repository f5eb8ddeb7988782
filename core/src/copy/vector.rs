//! A copy loop of vector loads and stores for a pair whose alignments
//! differ, where `rep movsb` may lose its speed.
//!
//! Unaligned loads from the source, stores aligned on the destination, so
//! that no store straddles two lines. On Zen 3, with the destination 8 to
//! 24 bytes ahead of the source modulo 4 KiB, it ran at 0.98 to 1.12 times
//! an aligned copy from 32 KiB to 512 KiB, where `memcpy` in 2 KiB pieces
//! took 1.1 to 1.2 times and one `rep movsb` 15 to 30 times. AVX2 where
//! the processor has it, else SSE2 (every x86-64 processor), which keeps
//! up from the second-level cache on and takes 1.3 to 2 times as long
//! within the first.
#![allow(unsafe_code)]

use core::arch::x86_64::{
    __m128i, __m256i, _mm256_loadu_si256, _mm256_store_si256, _mm256_storeu_si256, _mm_loadu_si128,
    _mm_store_si128, _mm_storeu_si128,
};

/// Bytes each turn of a loop moves: four 32-byte or eight 16-byte
/// vectors, loaded before any is stored.
pub(super) const STRIDE: usize = 128;

/// Copies `src` into `dst` with the widest vectors the processor has.
///
/// # Panics
///
/// If the lengths differ or are shorter than [`STRIDE`].
#[inline]
pub(super) fn copy(dst: &mut [u8], src: &[u8]) {
    if crate::cpu::has_avx2() {
        copy_avx2(dst, src);
    } else {
        copy_sse2(dst, src);
    }
}

/// [`copy`] with 32-byte vectors.
pub(super) fn copy_avx2(dst: &mut [u8], src: &[u8]) {
    assert!(dst.len() == src.len() && src.len() >= STRIDE);
    assert!(crate::cpu::has_avx2(), "copy_avx2 without AVX2");
    // SAFETY: AVX2 is there (checked above); both slices hold `len >=
    // STRIDE` bytes, and a `&mut` and a `&` slice never overlap.
    unsafe { avx2(dst.as_mut_ptr(), src.as_ptr(), src.len()) }
}

/// [`copy`] with 16-byte vectors.
pub(super) fn copy_sse2(dst: &mut [u8], src: &[u8]) {
    assert!(dst.len() == src.len() && src.len() >= STRIDE);
    // SAFETY: SSE2 is part of x86-64; the lengths as in `copy_avx2`.
    unsafe { sse2(dst.as_mut_ptr(), src.as_ptr(), src.len()) }
}

/// Moves [`STRIDE`] bytes from `$src` to `$dst` (pointers to `$ty`) with
/// `$load` and `$store`, loading every vector before storing any.
macro_rules! stride {
    ($load:ident, $store:ident, $dst:expr, $src:expr, 4) => {{
        let (s, d) = ($src, $dst);
        let (a, b, c, e) = ($load(s), $load(s.add(1)), $load(s.add(2)), $load(s.add(3)));
        $store(d, a);
        $store(d.add(1), b);
        $store(d.add(2), c);
        $store(d.add(3), e);
    }};
    ($load:ident, $store:ident, $dst:expr, $src:expr, 8) => {{
        let (s, d) = ($src, $dst);
        stride!($load, $store, d, s, 4);
        stride!($load, $store, d.add(4), s.add(4), 4);
    }};
}

/// # Safety
///
/// AVX2 is available; `src` and `dst` are valid for `len >= STRIDE` bytes
/// of reads and writes and do not overlap.
#[target_feature(enable = "avx2")]
unsafe fn avx2(dst: *mut u8, src: *const u8, len: usize) {
    type V = __m256i;
    const W: usize = core::mem::size_of::<V>();
    // SAFETY: each stride below lies within `0..len`, and the aligned
    // stores start at a multiple of 32 bytes from the destination's first
    // 32-byte boundary. The first and the last strides are stored unaligned
    // and may overlap the aligned ones, which store the same bytes again;
    // the source is never written, so the order does not matter.
    unsafe {
        let ptrs = |at: usize| (dst.add(at).cast::<V>(), src.add(at).cast::<V>());
        let (d, s) = ptrs(0);
        stride!(_mm256_loadu_si256, _mm256_storeu_si256, d, s, 4);
        // From the destination's first 32-byte boundary on.
        let mut at = (W - dst as usize % W) % W;
        while at + STRIDE <= len {
            let (d, s) = ptrs(at);
            stride!(_mm256_loadu_si256, _mm256_store_si256, d, s, 4);
            at += STRIDE;
        }
        let (d, s) = ptrs(len - STRIDE);
        stride!(_mm256_loadu_si256, _mm256_storeu_si256, d, s, 4);
    }
}

/// # Safety
///
/// `src` and `dst` are valid for `len >= STRIDE` bytes of reads and writes
/// and do not overlap.
unsafe fn sse2(dst: *mut u8, src: *const u8, len: usize) {
    type V = __m128i;
    const W: usize = core::mem::size_of::<V>();
    // SAFETY: as in `avx2`, with 16-byte vectors and boundaries.
    unsafe {
        let ptrs = |at: usize| (dst.add(at).cast::<V>(), src.add(at).cast::<V>());
        let (d, s) = ptrs(0);
        stride!(_mm_loadu_si128, _mm_storeu_si128, d, s, 8);
        let mut at = (W - dst as usize % W) % W;
        while at + STRIDE <= len {
            let (d, s) = ptrs(at);
            stride!(_mm_loadu_si128, _mm_store_si128, d, s, 8);
            at += STRIDE;
        }
        let (d, s) = ptrs(len - STRIDE);
        stride!(_mm_loadu_si128, _mm_storeu_si128, d, s, 8);
    }
}
