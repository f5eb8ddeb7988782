//! A copy loop of vector loads and stores for a pair whose alignments
//! differ, where `rep movsb` may lose its speed.
//!
//! Unaligned loads from the source, stores aligned on the destination, so
//! that no store straddles two lines; each stride is loaded before the one
//! ahead of it is stored. A load waits behind an earlier store to the same
//! offset modulo 4 KiB, which this order avoids only while the destination
//! lies less than a stride ahead, so [`copy_bytes`](super::copy_bytes)
//! brings only such pairs here. On Zen 3, with the destination 8 to
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
    copy_with(dst, src, true);
}

/// [`copy`] with 32-byte vectors when `avx2` and the processor has them,
/// else with 16-byte ones.
#[inline]
pub(super) fn copy_with(dst: &mut [u8], src: &[u8], avx2: bool) {
    assert!(dst.len() == src.len() && src.len() >= STRIDE);
    let (d, s, len) = (dst.as_mut_ptr(), src.as_ptr(), src.len());
    if avx2 && crate::cpu::has_avx2() {
        // SAFETY: AVX2 is there (checked above); both slices hold `len >=
        // STRIDE` bytes, and a `&mut` and a `&` slice never overlap.
        unsafe { self::avx2(d, s, len) }
    } else {
        // SAFETY: SSE2 is part of x86-64; the lengths as above.
        unsafe { sse2(d, s, len) }
    }
}

/// Loads the [`STRIDE`] bytes at `$src` (a pointer to vectors) with
/// `$load`, as an array of vectors.
macro_rules! load_stride {
    ($load:ident, $src:expr, 4) => {{
        let s = $src;
        [$load(s), $load(s.add(1)), $load(s.add(2)), $load(s.add(3))]
    }};
    ($load:ident, $src:expr, 8) => {{
        let s = $src;
        [
            $load(s),
            $load(s.add(1)),
            $load(s.add(2)),
            $load(s.add(3)),
            $load(s.add(4)),
            $load(s.add(5)),
            $load(s.add(6)),
            $load(s.add(7)),
        ]
    }};
}

/// Stores an array of vectors at `$dst` with `$store`.
macro_rules! store_stride {
    ($store:ident, $dst:expr, $v:expr) => {{
        let d = $dst;
        for (k, v) in $v.into_iter().enumerate() {
            $store(d.add(k), v);
        }
    }};
}

/// Defines a copy loop over vectors of type `$v`: the first and the last
/// [`STRIDE`] bytes stored unaligned, the strides between them aligned on
/// the destination. Each stride is loaded before the one ahead of it is
/// stored, so that no load waits behind a store to the same offset modulo
/// 4 KiB when the destination lies up to a stride ahead of the source.
macro_rules! copy_loop {
    ($(#[$attr:meta])* $name:ident, $v:ty, $load:ident, $store_u:ident, $store_a:ident, $n:tt) => {
        $(#[$attr])*
        unsafe fn $name(dst: *mut u8, src: *const u8, len: usize) {
            const W: usize = core::mem::size_of::<$v>();
            // SAFETY: each stride below lies within `0..len`, and the
            // aligned stores start at a multiple of `W` bytes from the
            // destination's first `W`-byte boundary. The first and the
            // last strides are stored unaligned and may overlap the
            // aligned ones, which store the same bytes again; the source
            // is never written, so the order does not matter.
            unsafe {
                let d = |at: usize| dst.add(at).cast::<$v>();
                let s = |at: usize| src.add(at).cast::<$v>();
                store_stride!($store_u, d(0), load_stride!($load, s(0), $n));
                let mut at = (W - dst as usize % W) % W;
                if at + STRIDE <= len {
                    let mut held = load_stride!($load, s(at), $n);
                    while at + 2 * STRIDE <= len {
                        let next = load_stride!($load, s(at + STRIDE), $n);
                        store_stride!($store_a, d(at), held);
                        held = next;
                        at += STRIDE;
                    }
                    store_stride!($store_a, d(at), held);
                }
                let last = len - STRIDE;
                store_stride!($store_u, d(last), load_stride!($load, s(last), $n));
            }
        }
    };
}

copy_loop!(
    /// # Safety
    ///
    /// AVX2 is available; `src` and `dst` are valid for `len >= STRIDE`
    /// bytes of reads and writes and do not overlap.
    #[target_feature(enable = "avx2")]
    avx2,
    __m256i,
    _mm256_loadu_si256,
    _mm256_storeu_si256,
    _mm256_store_si256,
    4
);

copy_loop!(
    /// # Safety
    ///
    /// `src` and `dst` are valid for `len >= STRIDE` bytes of reads and
    /// writes and do not overlap.
    sse2,
    __m128i,
    _mm_loadu_si128,
    _mm_storeu_si128,
    _mm_store_si128,
    8
);
