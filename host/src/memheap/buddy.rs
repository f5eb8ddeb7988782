//! The built-in `buddy` memheap component: `fireopal_core`'s
//! [`BuddyAllocator`] over the segment's offsets.
//!
//! The allocator keeps all of its state outside the heap, so nothing a
//! peer or a stray store writes into the segment can corrupt it; blocks are
//! powers of two (at least `memheap_buddy_min_block`), aligned to their
//! size. Freed blocks wait in per-order caches before they merge, so a
//! block freed and asked for again comes back in O(1); the stats count them
//! as free and merged; `memheap_buddy_cache_blocks` and
//! `memheap_buddy_cache_bytes` bound the caches (every process of a job
//! must use the same bounds, as the same smallest block: they decide which
//! offsets later calls return). The component writes into the segment only
//! to move contents when `realloc` cannot resize in place.

// `realloc` copies contents between two blocks of the segment.
#![allow(unsafe_code)]

use fireopal_abi::host::Host;
use fireopal_abi::memheap::{Allocator, MemheapComponentImpl, MemheapStats, Segment};
use fireopal_abi::param::{ParamRegistrar, ParamValue};
use fireopal_abi::{Availability, ComponentVersion, ErrorKind, PluginError};
use fireopal_core::buddy::{
    AllocError, BuddyAllocator, CacheLimits, FreeError, NewError, Realloc, ReallocError,
};

/// Parameter holding the component's selection priority.
pub const PRIORITY_PARAM: &str = "memheap_buddy_priority";
/// Parameter holding the smallest block size.
pub const MIN_BLOCK_PARAM: &str = "memheap_buddy_min_block";
/// Parameter holding the freed blocks cached per order.
pub const CACHE_BLOCKS_PARAM: &str = "memheap_buddy_cache_blocks";
/// Parameter holding the bytes cached over all orders.
pub const CACHE_BYTES_PARAM: &str = "memheap_buddy_cache_bytes";
/// Default priority. Above the `ptmalloc` plugin's 10: metadata outside
/// the heap is safe from remote writes, and the component needs no file.
pub const DEFAULT_PRIORITY: u32 = 30;

/// The `buddy` component.
#[derive(Debug)]
pub struct BuddyComponent;

impl MemheapComponentImpl for BuddyComponent {
    const NAME: &'static str = "buddy";
    const VERSION: ComponentVersion = ComponentVersion::new(0, 1, 0);
    type Module = BuddyModule;

    fn register_params(registry: &mut ParamRegistrar<'_>) -> Result<(), PluginError> {
        registry.register(
            PRIORITY_PARAM,
            ParamValue::UInt(u64::from(DEFAULT_PRIORITY)),
            "selection priority of the buddy symmetric-heap allocator (highest available wins)",
        )?;
        registry.register(
            MIN_BLOCK_PARAM,
            ParamValue::Size(BuddyAllocator::DEFAULT_MIN_BLOCK),
            "smallest block of the buddy allocator (a power of two): every allocation takes at least this much",
        )?;
        registry.register(
            CACHE_BLOCKS_PARAM,
            ParamValue::UInt(u64::from(CacheLimits::DEFAULT_BLOCKS_PER_ORDER)),
            "freed blocks of each size kept unmerged for reuse (0: every free merges at once; at most 4096)",
        )?;
        registry.register(
            CACHE_BYTES_PARAM,
            ParamValue::Size(0),
            "bytes kept in unmerged freed blocks over all sizes (0: a sixteenth of the heap)",
        )
    }

    fn query(host: &Host) -> Availability {
        match host.priority(PRIORITY_PARAM, DEFAULT_PRIORITY) {
            Ok(priority) => Availability::Available { priority },
            Err(unavailable) => unavailable,
        }
    }

    fn open(host: Host) -> Result<BuddyModule, PluginError> {
        let min_block = host
            .param_u64(MIN_BLOCK_PARAM)
            .unwrap_or(BuddyAllocator::DEFAULT_MIN_BLOCK);
        if !min_block.is_power_of_two() {
            return Err(PluginError::invalid(format!(
                "{MIN_BLOCK_PARAM} = {min_block} is not a power of two"
            )));
        }
        let blocks = host
            .param_u64(CACHE_BLOCKS_PARAM)
            .unwrap_or(u64::from(CacheLimits::DEFAULT_BLOCKS_PER_ORDER));
        let blocks_per_order = u32::try_from(blocks)
            .ok()
            .filter(|&b| b <= CacheLimits::MAX_BLOCKS_PER_ORDER)
            .ok_or_else(|| {
                PluginError::invalid(format!(
                    "{CACHE_BLOCKS_PARAM} = {blocks} is above {}",
                    CacheLimits::MAX_BLOCKS_PER_ORDER
                ))
            })?;
        Ok(BuddyModule {
            min_block,
            cache_blocks: blocks_per_order,
            cache_bytes: host.param_u64(CACHE_BYTES_PARAM).unwrap_or(0),
            heap: None,
        })
    }
}

/// The `buddy` module: a [`BuddyAllocator`] once `init` gave it a segment.
#[derive(Debug)]
pub struct BuddyModule {
    min_block: u64,
    /// `memheap_buddy_cache_blocks`.
    cache_blocks: u32,
    /// `memheap_buddy_cache_bytes` (0: the allocator's default share).
    cache_bytes: u64,
    heap: Option<(BuddyAllocator, Segment)>,
}

fn not_ready() -> PluginError {
    PluginError::new(ErrorKind::NOT_READY, "buddy heap used before init")
}

fn alloc_error(e: AllocError, size: u64) -> PluginError {
    match e {
        AllocError::ZeroSize | AllocError::InvalidAlignment => PluginError::invalid(e.to_string()),
        AllocError::OutOfMemory | AllocError::OutOfMetadata => PluginError::new(
            ErrorKind::RESOURCE_EXHAUSTED,
            format!("no room for {size} bytes: {e}"),
        ),
    }
}

fn offset_error(e: FreeError, offset: u64) -> PluginError {
    PluginError::invalid(format!("offset {offset}: {e}"))
}

/// Copies `len` bytes from `from` to `to` inside `segment`.
fn move_contents(segment: Segment, from: u64, to: u64, len: u64) -> Result<(), PluginError> {
    let fits = |at: u64| at.checked_add(len).is_some_and(|end| end <= segment.len());
    if !fits(from) || !fits(to) {
        return Err(PluginError::new(
            ErrorKind::OTHER,
            format!("buddy realloc: copy of {len} bytes from {from} to {to} leaves the segment"),
        ));
    }
    // SAFETY: both ranges lie inside the segment (checked above), which
    // `Segment::new`'s contract keeps mapped read-write and reserved to
    // this module; the allocator reports the blocks as distinct, so they do
    // not overlap. Offsets fit a usize because the segment is mapped.
    unsafe {
        std::ptr::copy_nonoverlapping(
            segment.base().add(from as usize),
            segment.base().add(to as usize),
            len as usize,
        );
    }
    Ok(())
}

impl BuddyModule {
    fn heap(&mut self) -> Result<&mut BuddyAllocator, PluginError> {
        self.heap.as_mut().map(|(h, _)| h).ok_or_else(not_ready)
    }
}

impl Allocator for BuddyModule {
    fn init(&mut self, segment: Segment) -> Result<(), PluginError> {
        if self.heap.is_some() {
            return Err(PluginError::new(
                ErrorKind::NOT_READY,
                "buddy heap is already initialised",
            ));
        }
        let mut heap =
            BuddyAllocator::with_min_block(segment.len(), self.min_block).map_err(|e| match e {
                NewError::InvalidMinBlock => {
                    PluginError::invalid(format!("{MIN_BLOCK_PARAM} = {}: {e}", self.min_block))
                }
                NewError::OutOfMetadata => PluginError::new(
                    ErrorKind::RESOURCE_EXHAUSTED,
                    format!("buddy tables for a {} byte heap: {e}", segment.len()),
                ),
            })?;
        let limits = CacheLimits {
            blocks_per_order: self.cache_blocks,
            max_bytes: match self.cache_bytes {
                0 => heap.cache_limits().max_bytes,
                n => n,
            },
        };
        heap.set_cache_limits(limits).map_err(|e| {
            PluginError::new(
                ErrorKind::RESOURCE_EXHAUSTED,
                format!("buddy free caches of {limits:?}: {e}"),
            )
        })?;
        self.heap = Some((heap, segment));
        Ok(())
    }

    fn alloc(&mut self, size: u64, align: u64) -> Result<u64, PluginError> {
        self.heap()?
            .alloc(size, align)
            .map_err(|e| alloc_error(e, size))
    }

    fn free(&mut self, offset: u64) -> Result<(), PluginError> {
        self.heap()?
            .free(offset)
            .map(drop)
            .map_err(|e| offset_error(e, offset))
    }

    fn realloc(&mut self, offset: u64, new_size: u64) -> Result<u64, PluginError> {
        let (heap, segment) = self.heap.as_mut().ok_or_else(not_ready)?;
        // Alignment 1: a buddy block is aligned to its own size anyway.
        match heap.realloc(offset, new_size, 1) {
            Ok(Realloc::InPlace { offset, .. }) => Ok(offset),
            Ok(Realloc::Moved { old, new, copy_len }) => {
                move_contents(*segment, old, new, copy_len)?;
                Ok(new)
            }
            Err(ReallocError::Offset(e)) => Err(offset_error(e, offset)),
            Err(ReallocError::ZeroSize) => Err(PluginError::invalid("zero-size reallocation")),
            Err(ReallocError::InvalidAlignment) => {
                Err(PluginError::invalid("alignment is not a power of two"))
            }
            Err(e @ (ReallocError::OutOfMemory | ReallocError::OutOfMetadata)) => {
                Err(PluginError::new(
                    ErrorKind::RESOURCE_EXHAUSTED,
                    format!("no room for {new_size} bytes: {e}"),
                ))
            }
        }
    }

    fn stats(&self) -> Result<MemheapStats, PluginError> {
        let (heap, segment) = self.heap.as_ref().ok_or_else(not_ready)?;
        let s = heap.stats();
        Ok(MemheapStats {
            heap_size: segment.len(),
            used_bytes: s.live_bytes,
            free_bytes: s.free_bytes,
            largest_free: s.largest_free_block,
            live_allocations: s.live_blocks,
        })
    }
}
