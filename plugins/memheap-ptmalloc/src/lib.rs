//! `ptmalloc`: a memheap plugin with a dlmalloc-style allocator over the
//! symmetric heap segment.
//!
//! Built as `libfireopal_memheap_ptmalloc.so`, it is found next to the host
//! binary or through `FIREOPAL_PLUGIN_PATH`. The allocator ([`PtHeap`],
//! see [`heap`]) keeps boundary-tagged chunk headers inside the segment,
//! sizes rounded to 16 bytes (no power-of-two rounding), exact-size bins
//! for small chunks and best fit for large ones. It is deterministic: the
//! same calls give the same offsets in every process.
//!
//! Parameter: `memheap_ptmalloc_priority` (default
//! [`DEFAULT_PRIORITY`]). The built-in `buddy` component ranks above it by
//! default because its metadata lives outside the heap, where remote writes
//! and stray stores into the segment cannot reach it; ptmalloc wastes less
//! memory on sizes far from a power of two. Raise this priority (or set
//! `FIREOPAL_MEMHEAP=ptmalloc`) to prefer it.
#![deny(unsafe_code)]

pub mod heap;

/// The segment type [`PtHeap::new`] takes, re-exported for direct users.
pub use fireopal_abi::memheap::Segment;
pub use heap::PtHeap;

use fireopal_abi::host::Host;
use fireopal_abi::memheap::{Allocator, MemheapComponentImpl, MemheapStats};
use fireopal_abi::param::{ParamRegistrar, ParamValue};
use fireopal_abi::{Availability, ComponentVersion, ErrorKind, PluginError};

/// Parameter holding the component's selection priority.
pub const PRIORITY_PARAM: &str = "memheap_ptmalloc_priority";
/// Default priority: below the built-in `buddy` (30).
pub const DEFAULT_PRIORITY: u32 = 10;

/// The `ptmalloc` memheap component.
#[derive(Debug)]
pub struct PtmallocComponent;

impl MemheapComponentImpl for PtmallocComponent {
    const NAME: &'static str = "ptmalloc";
    const VERSION: ComponentVersion = ComponentVersion::new(0, 1, 0);
    type Module = PtmallocModule;

    fn register_params(registry: &mut ParamRegistrar<'_>) -> Result<(), PluginError> {
        registry.register(
            PRIORITY_PARAM,
            ParamValue::UInt(u64::from(DEFAULT_PRIORITY)),
            "selection priority of the ptmalloc symmetric-heap allocator (highest available wins)",
        )
    }

    fn query(host: &Host) -> Availability {
        match host.priority(PRIORITY_PARAM, DEFAULT_PRIORITY) {
            Ok(priority) => Availability::Available { priority },
            Err(unavailable) => unavailable,
        }
    }

    fn open(_host: Host) -> Result<PtmallocModule, PluginError> {
        Ok(PtmallocModule { heap: None })
    }
}

/// The module: a [`PtHeap`] once `init` gave it a segment.
#[derive(Debug)]
pub struct PtmallocModule {
    heap: Option<PtHeap>,
}

fn not_ready() -> PluginError {
    PluginError::new(ErrorKind::NOT_READY, "ptmalloc heap used before init")
}

fn exhausted(what: &str) -> PluginError {
    PluginError::new(ErrorKind::RESOURCE_EXHAUSTED, what)
}

fn corrupted(c: heap::Corruption) -> PluginError {
    PluginError::new(ErrorKind::OTHER, c.to_string())
}

impl PtmallocModule {
    fn heap(&mut self) -> Result<&mut PtHeap, PluginError> {
        self.heap.as_mut().ok_or_else(not_ready)
    }
}

impl Allocator for PtmallocModule {
    fn init(&mut self, segment: Segment) -> Result<(), PluginError> {
        if self.heap.is_some() {
            return Err(PluginError::new(
                ErrorKind::NOT_READY,
                "ptmalloc heap is already initialised",
            ));
        }
        self.heap = Some(PtHeap::new(segment));
        Ok(())
    }

    fn alloc(&mut self, size: u64, align: u64) -> Result<u64, PluginError> {
        use heap::AllocError as E;
        self.heap()?.alloc(size, align).map_err(|e| match e {
            E::ZeroSize | E::InvalidAlignment => PluginError::invalid(e.to_string()),
            E::OutOfMemory => exhausted(&format!("no room for {size} bytes")),
            E::Corrupted(c) => corrupted(c),
        })
    }

    fn free(&mut self, offset: u64) -> Result<(), PluginError> {
        use heap::FreeError as E;
        self.heap()?.free(offset).map_err(|e| match e {
            E::NotLive(_) => PluginError::invalid(e.to_string()),
            E::Corrupted(c) => corrupted(c),
        })
    }

    fn realloc(&mut self, offset: u64, new_size: u64) -> Result<u64, PluginError> {
        use heap::ReallocError as E;
        self.heap()?.realloc(offset, new_size).map_err(|e| match e {
            E::ZeroSize | E::NotLive(_) => PluginError::invalid(e.to_string()),
            E::OutOfMemory => exhausted(&format!("no room for {new_size} bytes")),
            E::Corrupted(c) => corrupted(c),
        })
    }

    fn stats(&self) -> Result<MemheapStats, PluginError> {
        let s = self.heap.as_ref().ok_or_else(not_ready)?.stats();
        Ok(MemheapStats {
            heap_size: s.heap_bytes,
            used_bytes: s.used_bytes,
            free_bytes: s.free_bytes,
            largest_free: s.largest_free,
            live_allocations: s.live_allocations,
        })
    }
}

fireopal_abi::export_memheap_component!(PtmallocComponent);
