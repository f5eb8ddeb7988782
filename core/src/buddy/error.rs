//! Error values of the buddy allocator, one enum per operation.

use core::fmt;

/// Why [`BuddyAllocator::with_min_block`](super::BuddyAllocator::with_min_block)
/// refused to build an allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewError {
    /// The minimum block is zero or not a power of two.
    InvalidMinBlock,
    /// The side tables for this heap could not be allocated.
    OutOfMetadata,
}

impl fmt::Display for NewError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidMinBlock => f.write_str("minimum block must be a non-zero power of two"),
            Self::OutOfMetadata => f.write_str("cannot allocate the allocator's side tables"),
        }
    }
}

impl core::error::Error for NewError {}

/// Why [`BuddyAllocator::alloc`](super::BuddyAllocator::alloc) failed. The
/// allocator is unchanged after any of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// The size is zero. No block is handed out for empty requests, so that
    /// a symmetric-heap layer can answer them with a null address (as
    /// `shmem_malloc(0)` does).
    ZeroSize,
    /// The alignment is zero or not a power of two.
    InvalidAlignment,
    /// No free block of the needed size and alignment.
    OutOfMemory,
    /// The side table for small blocks could not grow.
    OutOfMetadata,
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroSize => f.write_str("zero-size allocation"),
            Self::InvalidAlignment => f.write_str("alignment is not a power of two"),
            Self::OutOfMemory => f.write_str("no free block large enough in the heap"),
            Self::OutOfMetadata => f.write_str("cannot grow the allocator's side tables"),
        }
    }
}

impl core::error::Error for AllocError {}

/// Why [`BuddyAllocator::free`](super::BuddyAllocator::free) refused an
/// offset. The allocator is unchanged after any of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeError {
    /// The offset lies past the managed part of the heap.
    OutOfRange,
    /// The offset is not where a live block starts: it is not a multiple of
    /// the minimum block, or it points inside a live block.
    InvalidOffset,
    /// The offset lies in free space: the block was already freed (or was
    /// never allocated).
    DoubleFree,
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfRange => f.write_str("offset is outside the heap"),
            Self::InvalidOffset => f.write_str("offset is not the start of a live block"),
            Self::DoubleFree => f.write_str("offset lies in free space (double free?)"),
        }
    }
}

impl core::error::Error for FreeError {}

/// Why [`BuddyAllocator::realloc`](super::BuddyAllocator::realloc) failed.
/// The old block is still live and unchanged after any of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReallocError {
    /// The new size is zero; call `free` to release a block.
    ZeroSize,
    /// The alignment is zero or not a power of two.
    InvalidAlignment,
    /// The block cannot grow in place and no free block can take it.
    OutOfMemory,
    /// The side table for small blocks could not grow.
    OutOfMetadata,
    /// The offset is not a live block.
    Offset(FreeError),
}

impl fmt::Display for ReallocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroSize => f.write_str("zero-size reallocation"),
            Self::InvalidAlignment => f.write_str("alignment is not a power of two"),
            Self::OutOfMemory => f.write_str("no free block large enough in the heap"),
            Self::OutOfMetadata => f.write_str("cannot grow the allocator's side tables"),
            Self::Offset(_) => f.write_str("cannot reallocate this offset"),
        }
    }
}

impl core::error::Error for ReallocError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Offset(e) => Some(e),
            _ => None,
        }
    }
}

impl From<AllocError> for ReallocError {
    fn from(e: AllocError) -> Self {
        match e {
            AllocError::ZeroSize => Self::ZeroSize,
            AllocError::InvalidAlignment => Self::InvalidAlignment,
            AllocError::OutOfMemory => Self::OutOfMemory,
            AllocError::OutOfMetadata => Self::OutOfMetadata,
        }
    }
}

/// A broken invariant found by
/// [`BuddyAllocator::check_consistency`](super::BuddyAllocator::check_consistency).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inconsistency {
    /// Which invariant does not hold.
    pub what: &'static str,
    /// Chunk (64 minimum blocks) where it was seen, if one applies.
    pub chunk: Option<usize>,
}

impl fmt::Display for Inconsistency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.chunk {
            Some(c) => write!(
                f,
                "buddy allocator inconsistent at chunk {c}: {}",
                self.what
            ),
            None => write!(f, "buddy allocator inconsistent: {}", self.what),
        }
    }
}

impl core::error::Error for Inconsistency {}
