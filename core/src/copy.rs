//! Bulk byte copies that keep their speed whatever the two buffers'
//! alignment.
//!
//! `memcpy` implementations switch to the `rep movsb` instruction for
//! medium sizes (glibc from a few KiB up to a large fraction of the last
//! level cache). On some processors that instruction slows down by an
//! order of magnitude when the destination sits a few bytes after the
//! source modulo 64 (AMD Zen 3 with fast short `rep movsb`: a 64 KiB copy
//! with the destination 16 bytes further into its cache line than the
//! source moves about 2 GB/s instead of 40). A transport's payload lands
//! at whatever offset its headers leave, so that case is common.
//! [`copy_bytes`] copies such pairs in pieces short enough for the vector
//! loop, and everything else in one `memcpy`. Above [`PIECEWISE_BELOW`]
//! `memcpy` leaves `rep movsb` for other loops by itself, and one call is
//! faster.

/// Bytes per piece when the alignments differ: under every `rep movsb`
/// threshold in use, and long enough that the call per piece costs
/// nothing measurable.
pub const PIECE: usize = 2048;

/// Longest copy made in pieces: glibc stops using `rep movsb` at about the
/// size of a core's second-level cache (512 KiB on the processors above).
pub const PIECEWISE_BELOW: usize = 512 << 10;

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
#[inline]
pub fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_bytes: lengths differ");
    if src.len() <= SHORT {
        return copy_short(dst, src);
    }
    let skew = (dst.as_ptr() as usize).wrapping_sub(src.as_ptr() as usize) % 64;
    if src.len() <= PIECE || src.len() >= PIECEWISE_BELOW || skew == 0 {
        dst.copy_from_slice(src);
        return;
    }
    for (d, s) in dst.chunks_mut(PIECE).zip(src.chunks(PIECE)) {
        d.copy_from_slice(s);
    }
}

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
        let src: Vec<u8> = (0..3 * PIECE + 77).map(|i| (i * 7 + 3) as u8).collect();
        for skew in [0usize, 1, 8, 16, 48, 63] {
            for len in [0, 1, PIECE - 1, PIECE, PIECE + 1, 3 * PIECE + 77] {
                let mut dst = vec![0xAAu8; len + 64];
                copy_bytes(&mut dst[skew..skew + len], &src[..len]);
                assert_eq!(&dst[skew..skew + len], &src[..len]);
                assert!(dst[..skew].iter().all(|&b| b == 0xAA));
                assert!(dst[skew + len..].iter().all(|&b| b == 0xAA));
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
