//! Mappings of shared segments, and bounds-checked access to them.
//!
//! A [`Mapping`] owns a shared mapping of a sealed memory file (its size
//! cannot change, so no access inside it can fault). Other processes map
//! the same file and write into it concurrently; all access goes through
//! the methods here, which check every offset against the mapping's length
//! and touch words that the protocol shares through atomics.

// Raw access to memory shared with other processes.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use fireopal_core::copy::copy_bytes;

/// A shared read-write mapping of a whole sealed memory file.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; concurrent
// access from other threads or processes goes through atomics or is ruled
// out by the transport's protocol.
unsafe impl Send for Mapping {}
// SAFETY: as above; no method hands out `&mut` to the memory.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` shared and read-write. `populate` asks the
    /// kernel to fill the page tables now, so that the first touches do
    /// not fault one page at a time.
    pub(crate) fn map(fd: &OwnedFd, len: usize, populate: bool) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let flags = libc::MAP_SHARED | if populate { libc::MAP_POPULATE } else { 0 };
        // SAFETY: a fresh mapping chosen by the kernel; `fd` is open. The
        // length was checked against the sealed file by the callers.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::from(io::ErrorKind::Other))?;
        Ok(Mapping { ptr, len })
    }

    /// Gives up ownership: the mapping stays until [`unmap_raw`].
    pub(crate) fn into_raw(self) -> (usize, usize) {
        let me = std::mem::ManuallyDrop::new(self);
        (me.ptr.as_ptr() as usize, me.len)
    }

    /// Start address.
    pub(crate) fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Start as a pointer.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Bytes mapped.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The mapped bytes. Peers may write them only where the protocol
    /// (or the owner, by registering them for remote writes) allows.
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: the whole mapping is valid for `len` bytes while `self`
        // lives; see `View::bytes` for the sharing discipline.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The mapped bytes, writable through the exclusive borrow.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`; `&mut self` rules out other borrows made
        // through this value.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// A view of the mapping's memory.
    pub(crate) fn view(&self) -> View<'_> {
        View {
            ptr: self.ptr,
            len: self.len,
            _map: std::marker::PhantomData,
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: this value owns the mapping and nothing borrows it any
        // more (views borrow the mapping).
        unsafe { unmap_raw(self.ptr.as_ptr() as usize, self.len) };
    }
}

/// Removes a mapping given up by [`Mapping::into_raw`].
///
/// # Safety
///
/// `(addr, len)` must come from `into_raw`, be unmapped only once, and
/// nothing may use the memory afterwards.
pub(crate) unsafe fn unmap_raw(addr: usize, len: usize) {
    // SAFETY: per the contract, a whole mapping nobody uses any more. A
    // failure (impossible for a whole mapping) would only leak it.
    unsafe { libc::munmap(addr as *mut libc::c_void, len) };
}

/// Borrowed, bounds-checked access to mapped shared memory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View<'m> {
    ptr: NonNull<u8>,
    len: usize,
    _map: std::marker::PhantomData<&'m Mapping>,
}

impl<'m> View<'m> {
    /// A view of `len` bytes at `addr`, kept alive by the borrow `'m` of
    /// whatever owns the mapping.
    ///
    /// # Safety
    ///
    /// `[addr, addr + len)` must be a mapping (or part of one) that stays
    /// mapped for `'m`.
    pub(crate) unsafe fn from_raw(addr: usize, len: usize) -> Option<View<'m>> {
        Some(View {
            ptr: NonNull::new(addr as *mut u8)?,
            len,
            _map: std::marker::PhantomData,
        })
    }

    fn range(&self, off: usize, len: usize) -> Option<*mut u8> {
        let end = off.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: `off <= len` of a live mapping.
        Some(unsafe { self.ptr.as_ptr().add(off) })
    }

    /// The shared word at `off` (8-byte aligned, inside the view).
    #[inline]
    pub(crate) fn word(&self, off: usize) -> Option<&'m AtomicU64> {
        if off % 8 != 0 {
            return None;
        }
        let p = self.range(off, 8)?;
        // SAFETY: aligned, inside a mapping alive for `'m`; shared words
        // are only ever accessed atomically by every party.
        Some(unsafe { AtomicU64::from_ptr(p.cast()) })
    }

    /// `len` bytes at `off`, borrowed for `'m`.
    ///
    /// The protocol gives the reader of these bytes sole access to them
    /// until it hands them back; a peer breaking that can change their
    /// values, never their validity (any bit pattern is a valid `u8`, and
    /// the mapping stays for `'m`).
    #[inline]
    pub(crate) fn bytes(&self, off: usize, len: usize) -> Option<&'m [u8]> {
        let p = self.range(off, len)?;
        // SAFETY: inside a mapping alive for `'m`; see the method's doc
        // for the sharing discipline.
        Some(unsafe { std::slice::from_raw_parts(p, len) })
    }

    /// Copies `src` to `off`; false (nothing written) when out of bounds.
    #[inline]
    pub(crate) fn write(&self, off: usize, src: &[u8]) -> bool {
        let Some(p) = self.range(off, src.len()) else {
            return false;
        };
        // SAFETY: destination inside the mapping; the protocol gives this
        // writer sole access to the range; `src` is ordinary memory of
        // this process, distinct from it.
        let dst = unsafe { std::slice::from_raw_parts_mut(p, src.len()) };
        copy_bytes(dst, src);
        true
    }

    /// Copies `len` bytes from raw `src` to `off`.
    ///
    /// # Safety
    ///
    /// `src` must be valid for reads of `len` bytes and not overlap the
    /// destination.
    pub(crate) unsafe fn write_raw(&self, off: usize, src: *const u8, len: usize) -> bool {
        let Some(p) = self.range(off, len) else {
            return false;
        };
        // SAFETY: destination checked above (and given to this writer by
        // the protocol); source valid and apart from it per the contract.
        let (dst, src) = unsafe {
            (
                std::slice::from_raw_parts_mut(p, len),
                std::slice::from_raw_parts(src, len),
            )
        };
        copy_bytes(dst, src);
        true
    }

    /// Copies `len` bytes at `off` to raw `dst`.
    ///
    /// # Safety
    ///
    /// `dst` must be valid for writes of `len` bytes and not overlap the
    /// source.
    pub(crate) unsafe fn read_raw(&self, off: usize, dst: *mut u8, len: usize) -> bool {
        let Some(p) = self.range(off, len) else {
            return false;
        };
        // SAFETY: source checked above; destination valid and apart from
        // it per the contract.
        let (dst, src) = unsafe {
            (
                std::slice::from_raw_parts_mut(dst, len),
                std::slice::from_raw_parts(p, len),
            )
        };
        copy_bytes(dst, src);
        true
    }
}

/// `len` bytes of this process's memory at `addr`, as a slice.
///
/// # Safety
///
/// The range must be valid for reads for `'a` (memory handed to the
/// transport with a `MemRegion`, under that type's contract).
pub(crate) unsafe fn local_bytes<'a>(addr: usize, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: per the contract; `addr` is non-null for a non-empty region.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
}

/// Copies `len` bytes from `src` to `dst`; the ranges may overlap.
///
/// # Safety
///
/// `src` must be valid for reads and `dst` for writes of `len` bytes.
pub(crate) unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: per the contract.
    unsafe { std::ptr::copy(src, dst, len) };
}
