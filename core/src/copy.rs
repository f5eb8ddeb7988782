//! Bulk byte copies that keep their speed whatever the two buffers'
//! alignment.
//!
//! `memcpy` implementations switch to the `rep movsb` instruction for
//! medium sizes (glibc from a few KiB up to a large fraction of the last
//! level cache). On some processors that instruction slows down by an
//! order of magnitude when the destination sits a few bytes after the
//! source (AMD Zen 3 with fast short `rep movsb`: a 64 KiB copy with the
//! destination 16 bytes ahead moves about 3 GB/s instead of 40; Zen 4
//! does the same for 1 to 15 bytes, and keeps its speed at 16). A
//! transport's payload lands at whatever offset its headers leave, so
//! that case is common.
//!
//! The slowdown follows where the destination falls relative to the
//! source modulo 4 KiB, not modulo a line: it comes when the destination
//! lies a few bytes ahead (Zen 4 takes 17 times as long at 8 bytes, 1.05
//! times at 16; Zen 3 takes 14 to 20 times from 8 to 28 bytes and keeps
//! its speed from 32 bytes ahead, and at any distance behind).
//!
//! [`copy_bytes`] copies a pair whose alignments differ, from
//! [`LOOP_FROM`] to [`LOOP_BELOW`] bytes, with the destination less than
//! 128 bytes ahead modulo 4 KiB, with a loop of vector loads and stores
//! aligned on the destination (x86-64). On Zen 3 the loop kept within a
//! few percent of an aligned copy from 32 KiB to 512 KiB at 8 to 24 bytes
//! ahead. Further ahead than a stride the loop's loads would wait behind
//! its own stores to the same offsets modulo 4 KiB. Every other pair goes
//! in one `memcpy`, which on Zen 3 is level with 2 KiB pieces or faster
//! from 32 KiB to 512 KiB at 16 bytes behind and from 144 to 3000 bytes
//! ahead (`scripts/copy_skew.c`: 1.07 to 1.40 times their speed at 256
//! KiB; within a few percent from Rust), and on Zen 4 took half the
//! pieces' time or less even at 16 bytes ahead. Above [`LOOP_BELOW`]
//! `memcpy` leaves `rep movsb` for other loops by itself.

/// Longest misaligned copy left to one `memcpy` whatever the distance:
/// under every `rep movsb` threshold in use, so `memcpy` copies it with
/// its own vector loop.
pub const LOOP_FROM: usize = 2048;

/// Longest misaligned copy made by the vector loop: glibc stops using
/// `rep movsb` at about the size of a core's second-level cache (512 KiB
/// on the processors above).
pub const LOOP_BELOW: usize = 512 << 10;

/// Longest copy made inline, in two overlapping moves, rather than by a
/// call to `memcpy`: for a message's header or a short payload the call
/// and `memcpy`'s choice of method cost more than the copy.
pub const SHORT: usize = 32;

/// Copies `src` into `dst`, like `dst.copy_from_slice(src)`, at full
/// speed for any pair of alignments.
///
/// # Panics
///
/// If the two slices differ in length, as `copy_from_slice` does.
///
/// ```
/// let src: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
/// let mut dst = vec![0u8; 10_016];
/// fireopal_core::copy::copy_bytes(&mut dst[16..], &src);
/// assert_eq!(&dst[16..], &src[..]);
/// ```
#[inline(always)]
pub fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_bytes: lengths differ");
    if src.len() <= SHORT {
        return copy_short(dst, src);
    }
    copy_long(dst, src);
}

/// [`copy_bytes`] above [`SHORT`] bytes: out of line, so that a short
/// copy, the commonest on a message's path, costs no call and no saved
/// registers.
#[inline(never)]
fn copy_long(dst: &mut [u8], src: &[u8]) {
    // How far the destination lies ahead of the source modulo a page;
    // modulo a line, how far apart their alignments are.
    let ahead = (dst.as_ptr() as usize).wrapping_sub(src.as_ptr() as usize) % 4096;
    if src.len() <= LOOP_FROM || src.len() >= LOOP_BELOW || ahead % 64 == 0 {
        dst.copy_from_slice(src);
        return;
    }
    copy_misaligned(dst, src, ahead);
}

/// A copy whose alignments differ, the destination `ahead` bytes past the
/// source modulo 4 KiB: by the vector loop (x86-64) when that is less than
/// a stride, else by one `memcpy`.
#[inline]
fn copy_misaligned(dst: &mut [u8], src: &[u8], ahead: usize) {
    #[cfg(target_arch = "x86_64")]
    if ahead < vector::STRIDE && src.len() >= vector::STRIDE {
        vector::copy(dst, src);
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ahead;
    dst.copy_from_slice(src);
}

#[cfg(target_arch = "x86_64")]
mod vector;

/// [`copy_bytes`] for at most [`SHORT`] bytes: the first and the last
/// `N` bytes, for the largest `N` of 16, 8, 4 that fits, which together
/// cover every byte.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n >= 16 {
        copy_ends::<16>(dst, src);
    } else if n >= 8 {
        copy_ends::<8>(dst, src);
    } else if n >= 4 {
        copy_ends::<4>(dst, src);
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    }
}

/// Copies the first and the last `N` bytes of `src` (`N <= len <= 2N`).
#[inline(always)]
fn copy_ends<const N: usize>(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    let mut head = [0u8; N];
    let mut tail = [0u8; N];
    head.copy_from_slice(&src[..N]);
    tail.copy_from_slice(&src[n - N..]);
    dst[..N].copy_from_slice(&head);
    dst[n - N..].copy_from_slice(&tail);
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    #[test]
    fn short_copies_take_every_byte_and_no_other() {
        let src: Vec<u8> = (0..SHORT as u8 + 1)
            .map(|i| i.wrapping_mul(37) ^ 0x5A)
            .collect();
        for len in 0..=SHORT + 1 {
            for skew in [0usize, 1, 3, 8, 13] {
                let mut dst = vec![0xAAu8; len + 32];
                copy_bytes(&mut dst[skew..skew + len], &src[..len]);
                assert_eq!(&dst[skew..skew + len], &src[..len], "len {len}");
                assert!(dst[..skew].iter().all(|&b| b == 0xAA));
                assert!(dst[skew + len..].iter().all(|&b| b == 0xAA));
            }
        }
    }

    #[test]
    fn copies_every_byte_at_every_skew_and_length() {
        let src: Vec<u8> = (0..3 * LOOP_FROM + 77).map(|i| (i * 7 + 3) as u8).collect();
        for skew in [0usize, 1, 8, 16, 48, 63] {
            for len in [
                0,
                1,
                LOOP_FROM - 1,
                LOOP_FROM,
                LOOP_FROM + 1,
                3 * LOOP_FROM + 77,
            ] {
                let mut dst = vec![0xAAu8; len + 64];
                copy_bytes(&mut dst[skew..skew + len], &src[..len]);
                assert_eq!(&dst[skew..skew + len], &src[..len]);
                assert!(dst[..skew].iter().all(|&b| b == 0xAA));
                assert!(dst[skew + len..].iter().all(|&b| b == 0xAA));
            }
        }
    }

    #[test]
    fn misaligned_copies_take_every_byte() {
        let len = 3 * (16 << 10) + 77;
        let src: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();
        for skew in [1usize, 8, 16, 33, 63] {
            for n in [(16 << 10) - 1, 16 << 10, len] {
                let mut dst = vec![0xAAu8; n + 64];
                let ahead =
                    (dst[skew..].as_ptr() as usize).wrapping_sub(src.as_ptr() as usize) % 4096;
                copy_misaligned(&mut dst[skew..skew + n], &src[..n], ahead);
                assert_eq!(&dst[skew..skew + n], &src[..n], "{n} at {skew}");
                assert!(dst[..skew].iter().all(|&b| b == 0xAA));
                assert!(dst[skew + n..].iter().all(|&b| b == 0xAA));
                let mut dst = vec![0xAAu8; n + 64];
                copy_bytes(&mut dst[skew..skew + n], &src[..n]);
                assert_eq!(&dst[skew..skew + n], &src[..n]);
            }
        }
    }

    /// Both vector loops, whatever the processor picks: every length from
    /// one stride to a few past an aligned run, at skews on both sides of
    /// the 16- and 32-byte boundaries, touching no byte outside.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vector_loops_take_every_byte_and_no_other() {
        let longest = 5 * vector::STRIDE + 3;
        let src: Vec<u8> = (0..longest + 64).map(|i| (i * 29 + 11) as u8).collect();
        // AVX2 where the processor has it; SSE2 always.
        for avx2 in [false, true] {
            for from in [0usize, 1, 16, 31] {
                for skew in [0usize, 1, 8, 15, 16, 17, 31, 32, 48, 63] {
                    for len in vector::STRIDE..=longest {
                        let mut dst = vec![0xAAu8; len + 128];
                        let src = &src[from..from + len];
                        vector::copy_with(&mut dst[skew..skew + len], src, avx2);
                        assert_eq!(&dst[skew..skew + len], src, "avx2 {avx2}: {len} at {skew}");
                        assert!(dst[..skew].iter().all(|&b| b == 0xAA), "avx2 {avx2}");
                        assert!(dst[skew + len..].iter().all(|&b| b == 0xAA), "avx2 {avx2}");
                    }
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "lengths differ")]
    fn refuses_slices_of_different_lengths() {
        let mut dst = [0u8; 4];
        copy_bytes(&mut dst, &[1, 2, 3]);
    }
}
