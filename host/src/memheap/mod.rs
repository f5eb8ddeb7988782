//! The symmetric heap: one segment per process, the same size everywhere,
//! carved by the selected memheap component.
//!
//! This module owns:
//! - [`SymmetricHeap`]: the segment (a memfd mapped shared, see
//!   [`SymmetricHeap::fd`]) and the allocation calls with OpenSHMEM 1.5
//!   semantics (`malloc`, `calloc`, `align`, `realloc`, `free`), plus
//!   [`offset_of`](SymmetricHeap::offset_of) and
//!   [`ptr_at`](SymmetricHeap::ptr_at);
//! - the heap size: the `symmetric_size` parameter and OpenSHMEM's
//!   `SHMEM_SYMMETRIC_SIZE` ([`resolve_symmetric_size`]);
//! - the built-in `buddy` component ([`buddy`]).
//!
//! # Symmetry, and what the caller must do
//!
//! In OpenSHMEM, `shmem_malloc` and friends are collective: every PE calls
//! them with the same arguments in the same order, and they synchronise
//! (a barrier on exit for the allocating calls, on entry for `shmem_free`).
//! This heap does **no communication**. It gives symmetric results because
//! the allocator is deterministic: the same sequence of calls gives the same
//! offsets on every process, so an object has one offset job-wide and a
//! peer's copy of it is at `peer_base + offset`. The runtime above is
//! responsible for
//! - making every PE issue the same sequence (same sizes, alignments and
//!   order, including failed calls, which change nothing);
//! - the barriers OpenSHMEM requires, e.g. with
//!   [`Bootstrap::barrier`](crate::bootstrap::Bootstrap::barrier) or its own
//!   collectives;
//! - if it wants to detect asymmetric use, comparing offsets across PEs
//!   (cheap in debug builds).
//!
//! Each process first maps its heap at [`AGREED_BASE`]; where every
//! process could, addresses are the same job-wide too
//! ([`at_agreed_address`](SymmetricHeap::at_agreed_address)). Otherwise
//! addresses differ between processes; offsets never do. This is why the API
//! hands out raw pointers (what `shmem_malloc` returns to C callers) and
//! converts with [`offset_of`](SymmetricHeap::offset_of) before anything
//! goes on the wire.
//!
//! # Example
//!
//! ```
//! use fireopal::memheap::SymmetricHeap;
//! use fireopal::plugin::{Options, Registry};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let options = Options {
//!     environment: Some(vec![("FIREOPAL_SYMMETRIC_SIZE".into(), "1m".into())]),
//!     ..Options::default()
//! };
//! let registry = Registry::open(&options)?;
//! let heap = SymmetricHeap::init(&registry, &options)?;
//! let p = heap.calloc(16, 8);
//! assert!(!p.is_null());
//! let off = heap.offset_of(p).unwrap();
//! assert_eq!(heap.ptr_at(off), Some(p));
//! assert!(heap.malloc(0).is_null());
//! heap.free(p)?;
//! # Ok(())
//! # }
//! ```

pub mod buddy;
mod mapping;
pub(crate) mod size;

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd};
use std::ptr::{self, NonNull};
use std::sync::{Mutex, MutexGuard, PoisonError};

use fireopal_abi::memheap::{MemheapModuleBox, MemheapStats};
use fireopal_abi::PluginError;

pub use mapping::{MapError, AGREED_BASE};

/// The address a `symmetric_base` value names: `auto` is [`AGREED_BASE`],
/// `any` none (the kernel chooses), else a page-aligned hexadecimal
/// address (`0x...`).
pub fn parse_symmetric_base(text: &str) -> Result<Option<usize>, crate::param::ValueError> {
    match text.trim() {
        "auto" => Ok(AGREED_BASE),
        "any" => Ok(None),
        t => t
            .strip_prefix("0x")
            .or_else(|| t.strip_prefix("0X"))
            .and_then(|hex| usize::from_str_radix(hex, 16).ok())
            .filter(|&a| a != 0 && a % 4096 == 0)
            .map(Some)
            .ok_or(crate::param::ValueError::NotAnAddress),
    }
}
pub use size::{
    parse_symmetric_size, symmetric_size_spec, SizeError, SymmetricSize, DEFAULT_SYMMETRIC_SIZE,
    SHMEM_SYMMETRIC_SIZE, SYMMETRIC_SIZE_PARAM,
};

// This module opens its allocator through the plugin registry; discovery
// reaches back only into `buddy` (the built-in component) and `size` (the
// `symmetric_size` parameter), neither of which depends on `plugin`.
use crate::plugin::{OpenError, Options, Registry};
use mapping::Mapping;

/// Decides the heap size for `options` (the same command line and
/// environment discovery used): `--param symmetric_size=` beats
/// `FIREOPAL_SYMMETRIC_SIZE`, which beats `SHMEM_SYMMETRIC_SIZE`, which
/// beats [`DEFAULT_SYMMETRIC_SIZE`].
pub fn resolve_symmetric_size(options: &Options) -> Result<SymmetricSize, SizeError> {
    size::resolve(&options.command_line, options.environment.as_deref())
}

/// Alignment of `malloc`, `calloc` and `realloc` results: enough for any
/// scalar type (as `max_align_t` on x86-64 and aarch64).
pub const DEFAULT_ALIGN: u64 = 16;

/// Why [`SymmetricHeap::init`] failed.
#[derive(Debug)]
pub enum InitError {
    /// The heap size setting is invalid.
    Size(SizeError),
    /// The segment could not be created or mapped.
    Map(MapError),
    /// No memheap component could be opened.
    Open(OpenError),
    /// The component refused the segment.
    Module {
        /// Component name.
        component: String,
        /// Its error.
        error: PluginError,
    },
}

impl fmt::Display for InitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Size(e) => e.fmt(f),
            Self::Map(e) => write!(f, "symmetric heap segment: {e}"),
            Self::Open(e) => write!(f, "symmetric heap allocator: {e}"),
            Self::Module { component, error } => {
                write!(
                    f,
                    "memheap component {component:?} refused the segment: {error}"
                )
            }
        }
    }
}

impl std::error::Error for InitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Size(e) => Some(e),
            Self::Map(e) => Some(e),
            Self::Open(e) => Some(e),
            Self::Module { error, .. } => Some(error),
        }
    }
}

/// Why [`SymmetricHeap::free`] refused a pointer; the heap is unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FreeError {
    /// The pointer is not inside the heap.
    OutsideHeap,
    /// The component does not know a live allocation there.
    NotAllocated(PluginError),
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutsideHeap => f.write_str("pointer is outside the symmetric heap"),
            Self::NotAllocated(e) => write!(f, "pointer is not a live allocation: {e}"),
        }
    }
}

impl std::error::Error for FreeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::NotAllocated(e) => Some(e),
            Self::OutsideHeap => None,
        }
    }
}

/// Why [`SymmetricHeap::try_align`] returned no memory; the heap is
/// unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllocError {
    /// The size is zero (OpenSHMEM: the call returns null).
    ZeroSize,
    /// The alignment is not a power of two.
    InvalidAlignment(usize),
    /// The alignment is larger than the alignment of the heap's base, so
    /// the same offset would not be aligned on every process.
    AlignmentAboveBase {
        /// Asked for.
        align: usize,
        /// Alignment of the base.
        base: u64,
    },
    /// The component could not allocate (usually: the heap is full).
    Module(PluginError),
    /// The component answered an offset past the end of the heap.
    BadOffset(u64),
    /// The block to resize is not inside the heap.
    OutsideHeap,
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroSize => f.write_str("zero-size allocation"),
            Self::InvalidAlignment(a) => write!(f, "alignment {a} is not a power of two"),
            Self::AlignmentAboveBase { align, base } => write!(
                f,
                "alignment {align} is larger than the heap base's alignment {base}"
            ),
            Self::Module(e) => e.fmt(f),
            Self::BadOffset(o) => write!(f, "component answered offset {o}, outside the heap"),
            Self::OutsideHeap => f.write_str("pointer is outside the symmetric heap"),
        }
    }
}

impl std::error::Error for AllocError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Module(e) => Some(e),
            _ => None,
        }
    }
}

/// The symmetric heap of this process. See the [module documentation](self)
/// for the collective rules.
///
/// Thread-safe: calls are serialised by an internal lock.
pub struct SymmetricHeap {
    // Dropped before `mapping`: the module points into it.
    module: Mutex<MemheapModuleBox>,
    component: String,
    mapping: Mapping,
}

impl fmt::Debug for SymmetricHeap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SymmetricHeap")
            .field("component", &self.component)
            .field("base", &self.mapping.base())
            .field("len", &self.mapping.len())
            .finish_non_exhaustive()
    }
}

impl SymmetricHeap {
    /// Maps the segment (size from [`resolve_symmetric_size`] on
    /// `options`, the options `registry` was discovered with) and hands it
    /// to the registry's selected memheap component.
    pub fn init(registry: &Registry, options: &Options) -> Result<SymmetricHeap, InitError> {
        let size = resolve_symmetric_size(options).map_err(InitError::Size)?;
        // Discovery refused a bad value already (a job-level error).
        let at = registry
            .params()
            .str_value("symmetric_base")
            .map_or(Ok(AGREED_BASE), parse_symmetric_base)
            .unwrap_or(AGREED_BASE);
        Self::with_size_at(registry, size.bytes, at)
    }

    /// Like [`init`](Self::init) with an explicit size in bytes, first
    /// tried at [`AGREED_BASE`].
    pub fn with_size(registry: &Registry, bytes: u64) -> Result<SymmetricHeap, InitError> {
        Self::with_size_at(registry, bytes, AGREED_BASE)
    }

    /// Like [`with_size`](Self::with_size), first tried at `at` (`None`:
    /// wherever the kernel chooses).
    pub fn with_size_at(
        registry: &Registry,
        bytes: u64,
        at: Option<usize>,
    ) -> Result<SymmetricHeap, InitError> {
        let mapping = Mapping::new_at(bytes, at).map_err(InitError::Map)?;
        let (component, mut module) = registry.open_memheap().map_err(InitError::Open)?;
        let component = component.name().to_owned();
        module
            .init(mapping.segment())
            .into_result()
            .map_err(|error| InitError::Module {
                component: component.clone(),
                error,
            })?;
        Ok(SymmetricHeap {
            module: Mutex::new(module),
            component,
            mapping,
        })
    }

    fn module(&self) -> MutexGuard<'_, MemheapModuleBox> {
        // A panic while the lock was held cannot have left the module
        // half-updated: panics never cross the plugin boundary.
        self.module.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Name of the memheap component in use.
    pub fn component(&self) -> &str {
        &self.component
    }

    /// Address of the segment in this process.
    pub fn base(&self) -> *mut u8 {
        self.mapping.base()
    }

    /// Segment length in bytes.
    pub fn len(&self) -> u64 {
        self.mapping.len()
    }

    /// Whether the heap has no bytes at all.
    pub fn is_empty(&self) -> bool {
        self.mapping.len() == 0
    }

    /// The base address is a multiple of this (the heap size rounded up to
    /// a power of two, between a page and 1 GiB), so any alignment up to it
    /// holds for the same offset on every process.
    pub fn base_alignment(&self) -> u64 {
        self.mapping.align()
    }

    /// Whether the heap sits at the address every process of the job tried
    /// first (`symmetric_base`, by default [`AGREED_BASE`]); when all got
    /// it, a symmetric object has one address job-wide, not only one
    /// offset.
    pub fn at_agreed_address(&self) -> bool {
        self.mapping.at_agreed_address()
    }

    /// The memfd behind the segment, for node-local peers that map it.
    /// Offsets in the file equal heap offsets; the file is whole pages and
    /// sealed against resizing.
    /// [`Messenger::register_symmetric_heap`](crate::btl::Messenger::register_symmetric_heap)
    /// hands it to the transports, so that peers read symmetric objects
    /// with one copy.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.mapping.fd().as_fd()
    }

    /// Offset of `ptr` in the heap, or `None` when it points outside.
    pub fn offset_of(&self, ptr: *const u8) -> Option<u64> {
        let off = (ptr as usize).checked_sub(self.base() as usize)?;
        let off = u64::try_from(off).ok()?;
        (off < self.len()).then_some(off)
    }

    /// Address of `offset` in this process's heap, or `None` past the end.
    pub fn ptr_at(&self, offset: u64) -> Option<*mut u8> {
        // In bounds: `offset < len`, and the mapping is `len` bytes long.
        (offset < self.len()).then(|| self.base().wrapping_add(offset as usize))
    }

    /// Pointer for an offset the component answered, checking that the
    /// whole block lies in the heap.
    fn block(&self, offset: u64, size: u64) -> Result<NonNull<u8>, AllocError> {
        let inside = offset
            .checked_add(size)
            .is_some_and(|end| end <= self.len());
        self.ptr_at(offset)
            .filter(|_| inside)
            .and_then(NonNull::new)
            .ok_or(AllocError::BadOffset(offset))
    }

    /// Allocates `size` bytes aligned to `alignment`, saying why when it
    /// cannot. [`align`](Self::align) and [`malloc`](Self::malloc) are
    /// this with the OpenSHMEM null convention.
    pub fn try_align(&self, alignment: usize, size: usize) -> Result<NonNull<u8>, AllocError> {
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        if !alignment.is_power_of_two() {
            return Err(AllocError::InvalidAlignment(alignment));
        }
        let align = alignment as u64;
        if align > self.base_alignment() {
            return Err(AllocError::AlignmentAboveBase {
                align: alignment,
                base: self.base_alignment(),
            });
        }
        let size = size as u64;
        let mut module = self.module();
        let offset = module
            .alloc(size, align)
            .into_result()
            .map_err(AllocError::Module)?;
        self.block(offset, size).inspect_err(|_| {
            // Give the bad block back so a retry is not poisoned by it.
            let _ = module.free(offset);
        })
    }

    /// `shmem_malloc`: `size` bytes aligned to [`DEFAULT_ALIGN`]; null when
    /// `size` is 0 or the heap has no room (nothing changes then).
    pub fn malloc(&self, size: usize) -> *mut u8 {
        self.align(DEFAULT_ALIGN as usize, size)
    }

    /// `shmem_calloc`: `count * size` bytes set to zero; null when the
    /// product is 0, overflows, or does not fit.
    pub fn calloc(&self, count: usize, size: usize) -> *mut u8 {
        let Some(total) = count.checked_mul(size) else {
            return ptr::null_mut();
        };
        let p = self.malloc(total);
        if let Some(offset) = self.offset_of(p) {
            // A fresh block, not yet visible to the caller.
            self.mapping.zero(offset, total as u64);
        }
        p
    }

    /// `shmem_align`: `size` bytes at an address that is a multiple of
    /// `alignment`; null when `size` is 0, `alignment` is not a power of
    /// two or exceeds [`base_alignment`](Self::base_alignment), or there is
    /// no room.
    pub fn align(&self, alignment: usize, size: usize) -> *mut u8 {
        self.try_align(alignment, size)
            .map_or(ptr::null_mut(), NonNull::as_ptr)
    }

    /// `shmem_realloc`: null `ptr` is `malloc(size)`; `size` 0 frees `ptr`
    /// and returns null. Otherwise the block is resized keeping its
    /// contents up to the smaller size, possibly moving (alignment
    /// [`DEFAULT_ALIGN`] then); null when it cannot, with the old block
    /// left intact. A `ptr` that is not a live allocation gives null too.
    pub fn realloc(&self, ptr: *mut u8, size: usize) -> *mut u8 {
        self.try_realloc(ptr, size).unwrap_or(ptr::null_mut())
    }

    /// [`realloc`](Self::realloc), saying why when it cannot: the old block
    /// is then left intact. `size` 0 frees `ptr` and gives null.
    pub fn try_realloc(&self, ptr: *mut u8, size: usize) -> Result<*mut u8, AllocError> {
        if ptr.is_null() {
            return self
                .try_align(DEFAULT_ALIGN as usize, size)
                .map(NonNull::as_ptr);
        }
        let offset = self.offset_of(ptr).ok_or(AllocError::OutsideHeap)?;
        if size == 0 {
            let _ = self.free(ptr);
            return Ok(ptr::null_mut());
        }
        let size = size as u64;
        let mut module = self.module();
        let new = module
            .realloc(offset, size)
            .into_result()
            .map_err(AllocError::Module)?;
        self.block(new, size).map(NonNull::as_ptr).inspect_err(|_| {
            let _ = module.free(new);
        })
    }

    /// `shmem_free`: frees the block at `ptr`; null does nothing. A pointer
    /// that is not a live allocation is refused with no change (OpenSHMEM
    /// leaves this undefined; callers may ignore the error as `shmem_free`
    /// does).
    pub fn free(&self, ptr: *mut u8) -> Result<(), FreeError> {
        if ptr.is_null() {
            return Ok(());
        }
        let offset = self.offset_of(ptr).ok_or(FreeError::OutsideHeap)?;
        self.module()
            .free(offset)
            .into_result()
            .map_err(FreeError::NotAllocated)
    }

    /// The component's usage figures.
    pub fn stats(&self) -> Result<MemheapStats, PluginError> {
        self.module().stats().into_result()
    }
}

impl AsFd for SymmetricHeap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_base_values() {
        assert_eq!(parse_symmetric_base("auto"), Ok(AGREED_BASE));
        assert_eq!(parse_symmetric_base("any"), Ok(None));
        assert_eq!(
            parse_symmetric_base(" 0x7000000000 "),
            Ok(Some(0x70_0000_0000))
        );
        for bad in ["", "0", "0x0", "0x1001", "4096", "0xzz", "anywhere"] {
            assert!(parse_symmetric_base(bad).is_err(), "{bad:?}");
        }
    }
}
