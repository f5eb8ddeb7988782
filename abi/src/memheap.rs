//! The memheap interface: allocators for the symmetric heap.
//!
//! Every process of a job maps one segment of the same size; a memheap
//! module hands out offsets inside it. The same sequence of calls must give
//! the same offsets on every process (the allocator is deterministic and
//! sees no process-specific input), so an object has one offset job-wide.
//! The host turns offsets into addresses and implements the OpenSHMEM
//! rules (size 0, null pointers, collective calls) above this interface.

// `#[sabi_trait]` and `#[derive(StableAbi)]` expand to unsafe FFI glue.
#![allow(unsafe_code, non_local_definitions)]

use abi_stable::library::RootModule;
use abi_stable::sabi_trait;
use abi_stable::sabi_types::VersionStrings;
use abi_stable::std_types::{RBox, RResult, RStr};
use abi_stable::StableAbi;

use crate::host::{Host, HostServicesArc};
use crate::param::{ParamRegistrar, ParamRegistryRef};
use crate::{Availability, ComponentVersion, PluginError};

/// The mapped segment a module manages.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    base: usize,
    len: u64,
}

impl Segment {
    /// Describes the segment mapped at `base`, `len` bytes long.
    ///
    /// # Safety
    ///
    /// The memory must stay mapped read-write while a module uses it. The
    /// module may keep its own metadata inside the segment (a dlmalloc-style
    /// allocator does) and copies contents on `realloc`: no one else may
    /// write the bytes of free space or of blocks it is moving.
    pub unsafe fn new(base: *mut u8, len: u64) -> Self {
        Self {
            base: base as usize,
            len,
        }
    }

    /// Base address.
    pub fn base(&self) -> *mut u8 {
        self.base as *mut u8
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the segment is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Usage figures of a heap.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemheapStats {
    /// Bytes the module manages.
    pub heap_size: u64,
    /// Bytes handed out, including rounding.
    pub used_bytes: u64,
    /// Bytes still free.
    pub free_bytes: u64,
    /// Largest block that one allocation could get now.
    pub largest_free: u64,
    /// Live allocations.
    pub live_allocations: u64,
}

/// A symmetric-heap allocator as a plugin author writes it.
///
/// There is no close call: the host's symmetric heap owns the module and
/// drops it when the heap is dropped, before it unmaps the segment. A
/// panic in `Drop` aborts the process (it is not behind the panic
/// firewall); the plugin library is never unloaded.
pub trait Allocator: Send + 'static {
    /// Takes over `segment`; called once before any other method.
    fn init(&mut self, segment: Segment) -> Result<(), PluginError>;

    /// Allocates `size` (> 0) bytes aligned to `align` (a power of two) and
    /// returns the offset. `RESOURCE_EXHAUSTED` when it does not fit; a
    /// failed call changes nothing.
    fn alloc(&mut self, size: u64, align: u64) -> Result<u64, PluginError>;

    /// Frees the allocation at `offset`. An offset that is not live is an
    /// `INVALID_ARGUMENT` error and changes nothing.
    fn free(&mut self, offset: u64) -> Result<(), PluginError>;

    /// Resizes the allocation at `offset` to `new_size` (> 0) bytes keeping
    /// its contents up to the smaller size, and returns the (possibly new)
    /// offset. On failure the old allocation is untouched.
    fn realloc(&mut self, offset: u64, new_size: u64) -> Result<u64, PluginError>;

    /// Current figures.
    fn stats(&self) -> Result<MemheapStats, PluginError>;
}

/// The memheap module trait object as it crosses the boundary; each method
/// has the contract of the [`Allocator`] method of the same name.
#[sabi_trait]
pub trait MemheapModule: Send {
    /// See [`Allocator::init`].
    fn init(&mut self, segment: Segment) -> RResult<(), PluginError>;
    /// See [`Allocator::alloc`].
    fn alloc(&mut self, size: u64, align: u64) -> RResult<u64, PluginError>;
    /// See [`Allocator::free`].
    fn free(&mut self, offset: u64) -> RResult<(), PluginError>;
    /// See [`Allocator::realloc`].
    fn realloc(&mut self, offset: u64, new_size: u64) -> RResult<u64, PluginError>;
    /// See [`Allocator::stats`].
    #[sabi(last_prefix_field)]
    fn stats(&self) -> RResult<MemheapStats, PluginError>;
}

/// Owned module trait object, as returned by `open`.
pub type MemheapModuleBox = MemheapModule_TO<'static, RBox<()>>;

/// What a plugin author implements to describe a memheap component.
pub trait MemheapComponentImpl: 'static {
    /// Component name; must equal the `<component>` part of the file name.
    const NAME: &'static str;
    /// Component version.
    const VERSION: ComponentVersion;
    /// The module type `open` builds.
    type Module: Allocator;

    /// Declares the component's parameters (prefix `memheap_<name>_`).
    fn register_params(_registry: &mut ParamRegistrar<'_>) -> Result<(), PluginError> {
        Ok(())
    }

    /// Whether the component can run here, and its priority.
    fn query(host: &Host) -> Availability;

    /// Builds the module.
    fn open(host: Host) -> Result<Self::Module, PluginError>;
}

/// Root module of a memheap plugin.
#[repr(C)]
#[derive(StableAbi, Debug)]
#[sabi(kind(Prefix(prefix_ref = MemheapComponentRef)))]
pub struct MemheapComponent {
    /// Component name (equal to the file name's component part).
    pub name: RStr<'static>,
    /// Component version.
    pub version: ComponentVersion,
    /// Declares the component's parameters.
    pub register_params: extern "C" fn(ParamRegistryRef<'_>) -> RResult<(), PluginError>,
    /// See [`MemheapComponentImpl::query`].
    pub query: extern "C" fn(HostServicesArc) -> RResult<Availability, PluginError>,
    /// See [`MemheapComponentImpl::open`].
    #[sabi(last_prefix_field)]
    pub open: extern "C" fn(HostServicesArc) -> RResult<MemheapModuleBox, PluginError>,
}

impl RootModule for MemheapComponentRef {
    abi_stable::declare_root_module_statics! {MemheapComponentRef}
    const BASE_NAME: &'static str = "fireopal_memheap";
    const NAME: &'static str = "fireopal memheap component";
    const VERSION_STRINGS: VersionStrings = abi_stable::package_version_strings!();
}
