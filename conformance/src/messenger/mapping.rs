//! Anonymous mappings the registration cases unmap and map again at the
//! same address.

use fireopal_abi::btl::MemRegion;

/// An anonymous private mapping, unmapped on drop.
pub(crate) struct Mapping {
    pub(crate) addr: *mut u8,
    pub(crate) len: usize,
}

impl Mapping {
    /// A new mapping of `len` bytes, at `at` exactly when given (refusing
    /// to replace anything mapped there).
    #[allow(unsafe_code)]
    pub(crate) fn new(at: Option<*mut u8>, len: usize) -> Result<Self, String> {
        let (hint, fixed) = match at {
            Some(a) => (a.cast(), libc::MAP_FIXED_NOREPLACE),
            None => (std::ptr::null_mut(), 0),
        };
        // SAFETY: an anonymous mapping at a free address (NOREPLACE never
        // touches existing mappings); nothing else refers to it.
        let addr = unsafe {
            libc::mmap(
                hint,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | fixed,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED || at.is_some_and(|a| a.cast() != addr) {
            return Err(format!(
                "mmap at {at:?}: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Self {
            addr: addr.cast(),
            len,
        })
    }

    /// Its bytes.
    #[allow(unsafe_code)]
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `len` readable bytes, owned by this value.
        unsafe { std::slice::from_raw_parts(self.addr, self.len) }
    }

    /// Overwrites it with `bytes` (its length).
    #[allow(unsafe_code)]
    pub(crate) fn fill(&mut self, bytes: &[u8]) {
        // SAFETY: the mapping is `len` bytes, readable and writable, and
        // only this value refers to it.
        unsafe { std::slice::from_raw_parts_mut(self.addr, self.len) }.copy_from_slice(bytes);
    }

    /// It, as a region a module may read or write.
    #[allow(unsafe_code)]
    pub(crate) fn region(&self) -> MemRegion {
        // SAFETY: the mapping lives until this value is dropped, after
        // every registration and operation on it ended.
        unsafe { MemRegion::new(self.addr, self.len) }
    }
}

impl Drop for Mapping {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: this value owns the mapping.
        unsafe { libc::munmap(self.addr.cast(), self.len) };
    }
}
