//! The buffers of one `sendmsg` ([`Gather`]), and the bounds-checked
//! copies to and from memory the host handed in as [`MemRegion`]s.

use std::io;
use std::marker::PhantomData;

use fireopal_abi::btl::MemRegion;

pub(super) fn check_range(region: &MemRegion, offset: usize, len: usize) -> io::Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= region.len() => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "range outside the memory region",
        )),
    }
}

/// Most buffers one `sendmsg` takes from the module (Linux allows 1024).
pub(crate) const MAX_IOV: usize = 64;

/// Up to `N` buffers, and at most `limit` bytes, gathered for one
/// `sendmsg`, borrowed for `'a`.
pub(crate) struct Gather<'a, const N: usize = MAX_IOV> {
    iov: [libc::iovec; N],
    count: usize,
    total: usize,
    limit: usize,
    _borrow: PhantomData<&'a [u8]>,
}

impl<const N: usize> std::fmt::Debug for Gather<'_, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gather")
            .field("count", &self.count)
            .field("total", &self.total)
            .finish()
    }
}

impl<'a, const N: usize> Gather<'a, N> {
    /// The buffers gathered so far, for `sendmsg`.
    pub(super) fn iovecs(&self) -> &[libc::iovec] {
        &self.iov[..self.count]
    }

    /// No buffers, no byte limit.
    pub(crate) fn new() -> Self {
        Self::with_limit(usize::MAX)
    }

    /// No buffers; at most `limit` bytes will be gathered (0: no limit).
    pub(crate) fn with_limit(limit: usize) -> Self {
        Self {
            iov: [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; N],
            count: 0,
            total: 0,
            limit: if limit == 0 { usize::MAX } else { limit },
            _borrow: PhantomData,
        }
    }

    /// Whether nothing more fits.
    pub(crate) fn is_full(&self) -> bool {
        self.count == N || self.total >= self.limit
    }

    /// Bytes gathered.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// Appends `len` bytes at `ptr`, or as many as the byte limit allows;
    /// true only if all of them were appended.
    fn push_raw(&mut self, ptr: *const u8, len: usize) -> bool {
        if len == 0 {
            return true;
        }
        let room = self.limit.saturating_sub(self.total);
        if room == 0 {
            return false;
        }
        let Some(slot) = self.iov.get_mut(self.count) else {
            return false;
        };
        let take = len.min(room);
        *slot = libc::iovec {
            iov_base: ptr.cast_mut().cast(),
            iov_len: take,
        };
        self.count += 1;
        self.total += take;
        take == len
    }

    /// Appends `bytes` (or the part the byte limit allows); false when
    /// not all of it fit.
    pub(crate) fn push(&mut self, bytes: &'a [u8]) -> bool {
        self.push_raw(bytes.as_ptr(), bytes.len())
    }

    /// Appends `len` bytes of `region` from `offset` (bounds-checked; or
    /// the part the byte limit allows); the region must stay live until
    /// the send returns. False when not all of it fit, or out of range.
    pub(crate) fn push_region(&mut self, region: &MemRegion, offset: usize, len: usize) -> bool {
        if check_range(region, offset, len).is_err() {
            return false;
        }
        self.push_raw(region.as_ptr().wrapping_add(offset), len)
    }
}

/// Copies `src` into `region` at `offset` (bounds-checked).
pub(crate) fn copy_to_region(region: &MemRegion, offset: usize, src: &[u8]) -> io::Result<()> {
    check_range(region, offset, src.len())?;
    // SAFETY: the destination range is inside the region (checked) and
    // writable per `MemRegion::new`'s contract while the region is live;
    // `src` is a Rust slice, so it cannot be that region's memory mutably
    // borrowed elsewhere; `copy` tolerates overlap anyway.
    unsafe {
        std::ptr::copy(
            src.as_ptr(),
            region.as_ptr().wrapping_add(offset),
            src.len(),
        );
    }
    Ok(())
}

/// Copies `len` bytes of `region` from `offset` into a new vector
/// (bounds-checked).
pub(crate) fn copy_from_region(
    region: &MemRegion,
    offset: usize,
    len: usize,
) -> io::Result<Vec<u8>> {
    check_range(region, offset, len)?;
    let mut out = Vec::with_capacity(len);
    // SAFETY: the source range is inside the region (checked) and readable
    // per `MemRegion::new`'s contract while the region is live; the
    // destination has capacity `len` and does not overlap it.
    unsafe {
        std::ptr::copy_nonoverlapping(region.as_ptr().wrapping_add(offset), out.as_mut_ptr(), len);
        out.set_len(len);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_copies_are_bounds_checked() {
        let mut mem = vec![0u8; 8];
        // SAFETY: `mem` outlives every use of the region below.
        let region = unsafe { MemRegion::new(mem.as_mut_ptr(), mem.len()) };
        copy_to_region(&region, 2, b"abc").unwrap();
        assert!(copy_to_region(&region, 6, b"abc").is_err());
        assert!(copy_to_region(&region, usize::MAX, b"a").is_err());
        assert_eq!(copy_from_region(&region, 2, 3).unwrap(), b"abc");
        assert!(copy_from_region(&region, 7, 2).is_err());
        let mut g = Gather::<2>::new();
        assert!(!g.push_region(&region, 4, 5));
        assert!(g.push_region(&region, 4, 4));
        assert_eq!(g.total(), 4);
        assert_eq!(mem[2..5], *b"abc");
    }

    #[test]
    fn gather_stops_at_its_byte_limit() {
        let mut g = Gather::<4>::with_limit(10);
        assert!(g.push(b"abcd"));
        assert!(!g.push(b"efghijkl"), "cut at the limit");
        assert_eq!(g.total(), 10);
        assert!(g.is_full());
        assert!(!g.push(b"m"));
        assert_eq!(g.total(), 10);
        let mut unlimited = Gather::<1>::with_limit(0);
        assert!(unlimited.push(&[0; 1000]));
    }

    #[test]
    fn gather_holds_at_most_max_iov() {
        let byte = [1u8];
        let mut g = Gather::<MAX_IOV>::new();
        for _ in 0..MAX_IOV {
            assert!(g.push(&byte));
        }
        assert!(g.is_full());
        assert!(!g.push(&byte));
        assert_eq!(g.total(), MAX_IOV);
    }
}
