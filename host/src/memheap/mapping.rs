//! The segment behind the symmetric heap: a memfd of the heap's size,
//! mapped shared at an address aligned to a large power of two.
//!
//! A memfd (rather than anonymous memory) lets a node-local peer map the
//! same pages later, given the descriptor (over a Unix socket, with
//! `pidfd_getfd`, or through `/proc/<pid>/fd/<fd>` where ptrace rules
//! allow). The file is sparse: a page costs memory only once written. It
//! is whole pages long and sealed against any change of size
//! (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`), so a peer's mapping can
//! never fault past a shrunk end; shared-memory transports refuse files
//! without these seals.

// memfd_create, ftruncate, mmap and munmap.
#![allow(unsafe_code)]

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

use fireopal_abi::memheap::Segment;

/// Where every process first tries to map its heap, so that a
/// symmetric object has one address job-wide: a pointer stored in the heap
/// means the same object on every process. Far from where Linux puts
/// programs, their `brk` heap (both near 0x55.. to 0x56.. on x86-64) and
/// its own mappings (from below the stack at 0x7f..), on 47-bit and wider
/// address spaces. Mapped with `MAP_FIXED_NOREPLACE`, so nothing already
/// there is ever replaced; if the range is taken the heap goes wherever
/// the kernel puts it, and only offsets are symmetric.
#[cfg(target_pointer_width = "64")]
pub const AGREED_BASE: Option<usize> = Some(0x6000_0000_0000);
/// Where every process first tries to map its heap: nowhere on 32-bit
/// address spaces, too small to set a range aside.
#[cfg(not(target_pointer_width = "64"))]
pub const AGREED_BASE: Option<usize> = None;

/// Largest base alignment sought: beyond it, reserving the alignment gap
/// would waste too much address space.
const MAX_BASE_ALIGN: u64 = 1 << 30;

/// Why the segment could not be made.
#[derive(Debug)]
pub enum MapError {
    /// The size does not fit this machine's address space.
    TooLarge(u64),
    /// `memfd_create` failed.
    Memfd(io::Error),
    /// `ftruncate` to the heap size, or sealing the size, failed.
    Resize {
        /// Requested size.
        size: u64,
        /// The system's error.
        error: io::Error,
    },
    /// `mmap` failed.
    Map {
        /// Requested size.
        size: u64,
        /// The system's error.
        error: io::Error,
    },
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge(size) => {
                write!(f, "a {size} byte segment does not fit the address space")
            }
            Self::Memfd(e) => write!(f, "memfd_create failed: {e}"),
            Self::Resize { size, error } => {
                write!(f, "cannot size the heap file to {size} bytes: {error}")
            }
            Self::Map { size, error } => write!(f, "cannot map {size} bytes: {error}"),
        }
    }
}

impl std::error::Error for MapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::TooLarge(_) => None,
            Self::Memfd(e) | Self::Resize { error: e, .. } | Self::Map { error: e, .. } => Some(e),
        }
    }
}

fn page_size() -> u64 {
    crate::memory::page_size() as u64
}

/// A memfd mapped shared and read-write; unmapped and closed on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    fd: OwnedFd,
    base: NonNull<u8>,
    /// Heap length asked for.
    len: u64,
    /// Bytes mapped (`len` rounded up to pages; 0 for an empty heap).
    mapped: usize,
    /// The base is a multiple of this.
    align: u64,
    /// The base is [`AGREED_BASE`].
    agreed: bool,
}

// SAFETY: the mapping is plain shared memory owned by this value; its
// address is valid from any thread until drop, and the struct holds no
// thread-bound state.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` only hands out the address and the fd.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Creates a memfd of `len` bytes and maps it, at [`AGREED_BASE`] if
    /// that range is free.
    #[cfg(test)]
    pub(crate) fn new(len: u64) -> Result<Mapping, MapError> {
        Self::new_at(len, AGREED_BASE)
    }

    /// Creates a memfd of `len` bytes and maps it, at `at` if given and
    /// that range is free, else where the kernel chooses.
    pub(crate) fn new_at(len: u64, at: Option<usize>) -> Result<Mapping, MapError> {
        let page = page_size();
        let rounded = len
            .checked_next_multiple_of(page)
            .filter(|&r| usize::try_from(r).is_ok() && i64::try_from(r).is_ok())
            .ok_or(MapError::TooLarge(len))?;
        // SAFETY: the name is a NUL-terminated string; the flags ask for a
        // new descriptor only.
        let raw = unsafe {
            libc::memfd_create(
                c"fireopal-symmetric-heap".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if raw < 0 {
            return Err(MapError::Memfd(io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // Whole pages: peers map the file at page granularity.
        let size = libc::off_t::try_from(rounded).map_err(|_| MapError::TooLarge(len))?;
        let resize_error = || MapError::Resize {
            size: len,
            error: io::Error::last_os_error(),
        };
        // SAFETY: `fd` is an open memfd owned here.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
            return Err(resize_error());
        }
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: as above; F_ADD_SEALS takes an int argument.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(resize_error());
        }
        let align = len.next_power_of_two().clamp(page, MAX_BASE_ALIGN);
        if len == 0 {
            return Ok(Mapping {
                fd,
                base: NonNull::dangling(),
                len,
                mapped: 0,
                align,
                agreed: false,
            });
        }
        let mapped = rounded as usize;
        let agreed = at
            .filter(|&at| at % align as usize == 0)
            .and_then(|at| map_at(&fd, mapped, at));
        let base = match agreed {
            Some(base) => base,
            None => map_aligned(&fd, mapped, align as usize, page as usize)
                .map_err(|error| MapError::Map { size: len, error })?,
        };
        Ok(Mapping {
            fd,
            base,
            len,
            mapped,
            align,
            agreed: agreed.is_some(),
        })
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    pub(crate) fn align(&self) -> u64 {
        self.align
    }

    pub(crate) fn at_agreed_address(&self) -> bool {
        self.agreed
    }

    pub(crate) fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// The mapping as a memheap segment.
    pub(crate) fn segment(&self) -> Segment {
        // SAFETY: the memory stays mapped read-write until `self` drops;
        // `SymmetricHeap` drops the module it hands this to first, and
        // writes into the segment only inside blocks the module handed out.
        unsafe { Segment::new(self.base(), self.len) }
    }

    /// Sets `len` bytes at `offset` to zero; a range that does not lie
    /// inside the mapping is left alone.
    pub(crate) fn zero(&self, offset: u64, len: u64) {
        if offset.checked_add(len).is_some_and(|end| end <= self.len) {
            // SAFETY: the range lies inside the mapping (checked above),
            // which is read-write; offsets fit a usize since it is mapped.
            unsafe { std::ptr::write_bytes(self.base().add(offset as usize), 0, len as usize) };
        }
    }
}

/// Maps `fd` (`len` bytes) shared at exactly `at`, if nothing is mapped
/// anywhere in that range; `None` otherwise, with nothing changed.
fn map_at(fd: &OwnedFd, len: usize, at: usize) -> Option<NonNull<u8>> {
    at.checked_add(len)?;
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping: the
    // call fails (EEXIST) if any page of the range is in use.
    let got = unsafe {
        libc::mmap(
            at as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED_NOREPLACE,
            fd.as_raw_fd(),
            0,
        )
    };
    if got == libc::MAP_FAILED {
        return None;
    }
    if got as usize != at {
        // A kernel older than 4.17 takes the flag as a hint only.
        // SAFETY: `got` is the mapping just made, `len` bytes, owned here.
        unsafe { libc::munmap(got, len) };
        return None;
    }
    NonNull::new(got.cast::<u8>())
}

/// Maps `fd` (`len` bytes, a multiple of `page`) shared at an address that
/// is a multiple of `align`: reserves `len + align` bytes of address space,
/// maps the file over the aligned part, and gives back the rest.
fn map_aligned(fd: &OwnedFd, len: usize, align: usize, page: usize) -> io::Result<NonNull<u8>> {
    let reserve = len
        .checked_add(align - page)
        .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
    // SAFETY: a fresh inaccessible anonymous mapping at an address of the
    // kernel's choice; no existing memory is affected.
    let start = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            reserve,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if start == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let start_addr = start as usize;
    let aligned = start_addr.next_multiple_of(align);
    // SAFETY: `[aligned, aligned + len)` lies inside the reservation made
    // above, which this function owns; MAP_FIXED replaces only that part.
    let mapped = unsafe {
        libc::mmap(
            aligned as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd.as_raw_fd(),
            0,
        )
    };
    if mapped == libc::MAP_FAILED {
        let error = io::Error::last_os_error();
        // SAFETY: the whole reservation is ours and nothing uses it.
        unsafe { libc::munmap(start, reserve) };
        return Err(error);
    }
    let head = aligned - start_addr;
    let tail = reserve - head - len;
    // SAFETY: the gaps before and after the heap are parts of our own
    // reservation that nothing uses.
    unsafe {
        if head > 0 {
            libc::munmap(start, head);
        }
        if tail > 0 {
            libc::munmap((aligned + len) as *mut libc::c_void, tail);
        }
    }
    NonNull::new(aligned as *mut u8).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.mapped > 0 {
            // SAFETY: exactly the mapping made in `new`; the heap using it is
            // dropped before (field order in `SymmetricHeap`).
            unsafe { libc::munmap(self.base.as_ptr().cast(), self.mapped) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_is_aligned_shared_and_sized() {
        let m = Mapping::new(3 << 20).unwrap();
        assert_eq!(m.align(), 4 << 20);
        assert_eq!(m.base() as usize % (4 << 20), 0);
        // SAFETY: inside the fresh mapping of 3 MiB.
        unsafe {
            m.base().add((3 << 20) - 1).write(7);
        }
        // The file has the heap's size and sees the write.
        let meta = std::fs::File::from(m.fd().try_clone().unwrap())
            .metadata()
            .unwrap();
        assert_eq!(meta.len(), 3 << 20);
        // SAFETY: F_GET_SEALS takes no argument.
        let seals = unsafe { libc::fcntl(m.fd().as_raw_fd(), libc::F_GET_SEALS) };
        let want = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        assert_eq!(seals & want, want);
        let mut byte = [0u8; 1];
        // SAFETY: reads one byte of the memfd into a local buffer.
        let n = unsafe {
            libc::pread(
                m.fd().as_raw_fd(),
                byte.as_mut_ptr().cast(),
                1,
                (3 << 20) - 1,
            )
        };
        assert_eq!((n, byte[0]), (1, 7));
    }

    #[test]
    fn file_is_whole_pages() {
        let m = Mapping::new(5000).unwrap();
        assert_eq!(m.len(), 5000);
        let meta = std::fs::File::from(m.fd().try_clone().unwrap())
            .metadata()
            .unwrap();
        assert_eq!(meta.len() % page_size(), 0);
        assert!(meta.len() >= 5000);
    }

    #[test]
    fn empty_and_impossible_sizes() {
        let m = Mapping::new(0).unwrap();
        assert_eq!(m.len(), 0);
        assert!(matches!(Mapping::new(u64::MAX), Err(MapError::TooLarge(_))));
        assert!(matches!(
            Mapping::new(1 << 62),
            Err(MapError::Resize { .. } | MapError::Map { .. })
        ));
    }

    #[test]
    fn a_taken_address_sends_the_heap_elsewhere_and_nothing_is_replaced() {
        // A private test address, so that other tests' heaps never hold it.
        let at = 0x5800_0000_0000usize;
        let first = Mapping::new_at(1 << 20, Some(at)).unwrap();
        assert!(first.at_agreed_address());
        assert_eq!(first.base() as usize, at);
        // SAFETY: the first byte of the mapping made above.
        unsafe { first.base().write(42) };
        let second = Mapping::new_at(1 << 20, Some(at)).unwrap();
        assert!(!second.at_agreed_address());
        assert_ne!(second.base() as usize, at);
        // SAFETY: as above; the second mapping did not replace it.
        assert_eq!(unsafe { first.base().read() }, 42);
        let anywhere = Mapping::new_at(1 << 20, None).unwrap();
        assert!(!anywhere.at_agreed_address());
        // Not aligned to the heap's size: elsewhere too.
        let odd = Mapping::new_at(1 << 20, Some(at + (2 << 20) + 4096)).unwrap();
        assert!(!odd.at_agreed_address());
    }
}
