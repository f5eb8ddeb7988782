//! Where large payloads fall relative to 64-byte boundaries.
//!
//! The kernel copies a payload twice on its way through a socket: from
//! the sender's memory into socket pages, and from those pages into the
//! receiver's memory. Both copies use `rep movsb` on current x86 kernels,
//! and on some processors (AMD Zen 3 among them) that instruction runs
//! several times slower when the destination lies a few words past the
//! source modulo 64: a 1 MiB loopback ping-pong took 230 µs with source,
//! socket pages and destination in step and 700 to 900 µs with a 16-byte
//! skew on either copy. A skew of 0, 32 or 48 bytes runs at full speed.
//!
//! Socket pages are filled from where the previous write of the burst
//! left off (a page no longer in use starts again at offset 0), so the
//! sender places a payload by padding the frame in front of it
//! ([`FrameHeader::pad`](fireopal_core::wire::tcp::frame::FrameHeader)), and
//! cuts its writes at 64-byte boundaries of the burst so that a page
//! reused between two writes does not move the rest. The receiver reads
//! into 64-byte aligned buffers ([`AlignedBuf`]).

use fireopal_core::wire::tcp::frame::PAYLOAD_ALIGN;

/// Payloads shorter than this are not padded: their copies are short
/// enough that the skew costs less than the padding.
pub(crate) const MIN_ALIGNED_PAYLOAD: usize = 2048;

/// Skews (destination minus source, modulo [`PAYLOAD_ALIGN`]) that copy
/// at full speed, best first.
const FAST_SKEWS: [usize; 3] = [0, 32, 48];

fn fast(skew: usize) -> bool {
    FAST_SKEWS.contains(&(skew % PAYLOAD_ALIGN))
}

/// Padding for a payload of `len` bytes read from address `src`, whose
/// frame headers end `at` bytes into the current burst of writes, and
/// which the receiver copies to an address congruent to `dst` (0 for the
/// receiver's own aligned buffers).
pub(crate) fn payload_pad(at: usize, len: usize, src: usize, dst: usize) -> u8 {
    if len < MIN_ALIGNED_PAYLOAD {
        return 0;
    }
    let a = PAYLOAD_ALIGN;
    let (src, dst) = (src % a, dst % a);
    // The page offset `p` of the payload: a fast skew from the source
    // into the pages and from the pages into the destination.
    let p = FAST_SKEWS
        .iter()
        .map(|x| (dst + a - x) % a)
        .find(|p| fast(p + a - src))
        .unwrap_or(src);
    // Below PAYLOAD_ALIGN (64), so it fits.
    ((p + a - at % a) % a) as u8
}

/// The most bytes of a write that starts `at` bytes into its burst and may
/// take up to `chunk` bytes, so that it ends on a 64-byte boundary of the
/// burst (`chunk` when that leaves nothing).
pub(crate) fn piece_limit(at: usize, chunk: usize) -> usize {
    let at = at % PAYLOAD_ALIGN;
    let end = at.saturating_add(chunk) / PAYLOAD_ALIGN * PAYLOAD_ALIGN;
    if end > at {
        end - at
    } else {
        chunk
    }
}

/// A byte buffer whose first byte is 64-byte aligned.
#[derive(Debug, Default)]
pub(crate) struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// `len` zero bytes.
    pub(crate) fn zeroed(len: usize) -> Self {
        let mut b = Self::default();
        b.resize(len);
        b
    }

    /// Bytes usable.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes reserved, alignment slack included.
    pub(crate) fn capacity(&self) -> usize {
        self.storage.capacity()
    }

    /// Grows (never shrinks) to at least `len` usable bytes; the contents
    /// are not kept when the storage moves.
    pub(crate) fn resize(&mut self, len: usize) {
        if len <= self.len {
            return;
        }
        if len + PAYLOAD_ALIGN > self.storage.len() {
            self.storage = vec![0; len + PAYLOAD_ALIGN];
            let addr = self.storage.as_ptr() as usize;
            self.start = (PAYLOAD_ALIGN - addr % PAYLOAD_ALIGN) % PAYLOAD_ALIGN;
        }
        self.len = len;
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pad_puts_the_payload_at_a_fast_skew_from_source_and_destination() {
        for at in 0..200 {
            for src in (0..64).step_by(16) {
                for dst in (0..64).step_by(16) {
                    let pad = usize::from(payload_pad(at, 1 << 20, src, dst));
                    assert!(pad < PAYLOAD_ALIGN);
                    let p = (at + pad) % 64;
                    assert!(fast(p + 64 - src), "at {at} src {src} dst {dst}: p {p}");
                    assert!(fast(dst + 64 - p), "at {at} src {src} dst {dst}: p {p}");
                }
            }
        }
    }

    #[test]
    fn aligned_source_and_destination_need_no_skew() {
        assert_eq!(payload_pad(64, 1 << 20, 4096, 0), 0);
        assert_eq!(payload_pad(40, 1 << 20, 0, 0), 24);
        assert_eq!(payload_pad(40, 1 << 20, 16, 16), 40);
    }

    #[test]
    fn small_payloads_are_not_padded() {
        assert_eq!(payload_pad(40, MIN_ALIGNED_PAYLOAD - 1, 0, 0), 0);
    }

    #[test]
    fn pieces_end_on_boundaries_of_the_burst() {
        assert_eq!(piece_limit(0, 61440), 61440);
        assert_eq!(piece_limit(40, 61440), 61440 - 40);
        assert_eq!(piece_limit(40, 30), 24);
        assert_eq!(piece_limit(10, 30), 30);
        assert_eq!(piece_limit(0, 0), 0);
        assert_eq!(piece_limit(10, usize::MAX), usize::MAX / 64 * 64 - 10);
    }

    #[test]
    fn aligned_buffers_start_on_a_boundary_and_grow() {
        let mut b = AlignedBuf::zeroed(100);
        assert_eq!(b.as_ptr() as usize % PAYLOAD_ALIGN, 0);
        assert_eq!(b.len(), 100);
        b[99] = 7;
        b.resize(50);
        assert_eq!(b.len(), 100);
        b.resize(1 << 20);
        assert_eq!(b.len(), 1 << 20);
        assert_eq!(b.as_ptr() as usize % PAYLOAD_ALIGN, 0);
    }
}
