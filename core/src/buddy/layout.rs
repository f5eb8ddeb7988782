//! Layout of the buddy allocator's side tables, and finding a live block
//! from its offset.
//!
//! The heap is cut into *chunks* of 64 minimum blocks (4 KiB by default).
//!
//! - Blocks of a chunk or more are tracked per chunk with one *head* byte
//!   (first chunk of a free block and its order, first chunk of a live block
//!   and its order, inside a block, or split into small blocks) and, per
//!   order, a bitmap of free blocks with summary words and an exact count
//!   (the `large` module). Testing whether a buddy is free is one head byte;
//!   splitting and merging cost one head byte, one counter and at most one
//!   bitmap bit per order crossed.
//! - A chunk split into small blocks keeps two words: which minimum blocks
//!   are used and where live blocks start (the `chunk` module). Its free
//!   blocks are derived from the used word with a few shifts (free buddies
//!   always merge, so the free blocks are the maximal aligned free runs).
//!   Six more bitmaps, one per small order, say which chunks have a free
//!   block of that order. The two words live in groups of 64 chunks that
//!   are allocated when a 256 KiB region first holds small blocks (the
//!   `small` module).
//!
//! Finding a free block of at least order `k` is `trailing_zeros` on a mask
//! of non-empty orders, then the lowest entry of that order's bitmap, which
//! is cached (a cold lookup reads one word per summary level: 3 for 64 MiB,
//! 4 for 16 GiB). The bitmaps may hold stale entries: the head byte or the
//! used word is the truth, entries that lost their block are cleared when a
//! lookup meets them, and summary bits are cleared the same way. Each stale
//! entry is dropped once, so lookups stay O(1) amortized, and a steady
//! alloc/free pair writes no bitmap word at all. An allocation or a free
//! then costs O(1) plus one step per order it splits or merges (O(log n) at
//! most).
//!
//! Freeing needs no size: the head byte remembers the order of a large live
//! block, and the start and used words give the length of a small one. The
//! block handed out last is also remembered with its order, so freeing it
//! (a temporary buffer, the usual alloc/free pair) reads no table: a
//! compare and a push, or a compare alone when the block was *lent* from a
//! free cache (left in its slot until something else changes the caches;
//! see the `cache` module), which keeps the pair off the stack counts. A
//! double free of a cached block is found by looking for its offset in the
//! stack of its order (at most 32 entries by default, and empty in the
//! usual pair).

use super::chunk::{block_len, run_mask, CHUNK_ORDER};
use super::{AllocError, BuddyAllocator, FreeError};

/// Minimum blocks per chunk.
pub(super) const CHUNK_UNITS: u64 = 1 << CHUNK_ORDER;

// Head byte of a chunk: tag in the top two bits, payload in the low six.
pub(super) const TAG: u8 = 0xC0;
pub(super) const PAYLOAD: u8 = 0x3F;
/// Not the first chunk of any block.
pub(super) const INSIDE: u8 = 0x00;
/// First chunk of a free block; payload = order in chunks.
pub(super) const FREE: u8 = 0x40;
/// First chunk of a live block; payload = order in chunks.
pub(super) const LIVE: u8 = 0x80;
/// Chunk split into small blocks (payload unused).
pub(super) const SMALL: u8 = 0xC0;

/// A live block found from its offset.
#[derive(Clone, Copy, Debug)]
pub(super) enum Block {
    /// Smaller than a chunk: `order` in minimum blocks, `first` unit in chunk.
    Small {
        chunk: usize,
        first: u32,
        order: u32,
    },
    /// A chunk or more: `order` in chunks.
    Big { chunk: usize, order: u32 },
}

impl Block {
    /// Order in minimum blocks.
    pub(super) fn unit_order(self) -> u32 {
        match self {
            Block::Small { order, .. } => order,
            Block::Big { order, .. } => order + CHUNK_ORDER,
        }
    }
}

impl BuddyAllocator {
    /// Order (in minimum blocks, below 64) of the block serving `size` at
    /// `align`; whether it fits the heap is [`within_heap`](Self::within_heap).
    #[inline]
    pub(super) fn order_for(&self, size: u64, align: u64) -> Result<u32, AllocError> {
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        if !align.is_power_of_two() {
            return Err(AllocError::InvalidAlignment);
        }
        // A block is a power of two at least the size, the alignment (it
        // is aligned to its size) and the minimum block.
        let need = size.max(align).max(self.min_block());
        let bytes_order = u64::BITS - (need - 1).leading_zeros();
        if bytes_order >= u64::BITS {
            return Err(AllocError::OutOfMemory);
        }
        // Below 64; larger than the heap is checked where the caches miss
        // (a cached block of the order proves it fits).
        Ok(bytes_order - self.unit_shift)
    }

    /// `order` if a block of it fits the managed heap at all.
    #[inline]
    pub(super) fn within_heap(&self, order: u32) -> Result<u32, AllocError> {
        if 1u64 << order > self.units {
            return Err(AllocError::OutOfMemory);
        }
        Ok(order)
    }

    #[inline]
    pub(super) fn offset_of(&self, chunk: usize, first: u32) -> u64 {
        ((chunk as u64) << CHUNK_ORDER | u64::from(first)) << self.unit_shift
    }

    /// The live block starting at `offset`, or why there is none.
    #[inline]
    pub(super) fn locate(&self, offset: u64) -> Result<Block, FreeError> {
        if offset >= self.managed_bytes() {
            return Err(FreeError::OutOfRange);
        }
        if offset & (self.min_block() - 1) != 0 {
            return Err(FreeError::InvalidOffset);
        }
        let unit = offset >> self.unit_shift;
        let chunk = usize::try_from(unit >> CHUNK_ORDER).map_err(|_| FreeError::OutOfRange)?;
        let first = (unit & (CHUNK_UNITS - 1)) as u32;
        let h = *self.head.get(chunk).ok_or(FreeError::OutOfRange)?;
        match h & TAG {
            SMALL => {
                let bits = *self.small_bits(chunk).ok_or(FreeError::InvalidOffset)?;
                if bits.starts >> first & 1 == 1 {
                    let order = block_len(bits, first).trailing_zeros();
                    Ok(Block::Small {
                        chunk,
                        first,
                        order,
                    })
                } else if bits.used >> first & 1 == 1 {
                    Err(FreeError::InvalidOffset)
                } else {
                    Err(FreeError::DoubleFree)
                }
            }
            LIVE if first == 0 => Ok(Block::Big {
                chunk,
                order: u32::from(h & PAYLOAD),
            }),
            LIVE => Err(FreeError::InvalidOffset),
            FREE => Err(FreeError::DoubleFree),
            _ => Err(self.classify_inside(chunk)),
        }
    }

    /// For a chunk inside a large block: is that block live or free?
    fn classify_inside(&self, chunk: usize) -> FreeError {
        match self.covering_block(chunk) {
            Some((_, h)) if h & TAG == FREE => FreeError::DoubleFree,
            _ => FreeError::InvalidOffset,
        }
    }

    /// First chunk and head byte of the large block covering a chunk whose
    /// head byte says "inside".
    fn covering_block(&self, chunk: usize) -> Option<(usize, u8)> {
        (1..usize::BITS).find_map(|k| {
            let base = chunk & !((1usize << k) - 1);
            let h = *self.head.get(base)?;
            let covers = u32::from(h & PAYLOAD) >= k && matches!(h & TAG, LIVE | FREE);
            covers.then_some((base, h))
        })
    }

    /// The live block starting at `offset` that the caller has not freed
    /// (the tables still count cached blocks as live).
    #[inline]
    pub(super) fn locate_live(&self, offset: u64) -> Result<Block, FreeError> {
        match self.locate(offset) {
            Ok(block) if self.cache.holds(block.unit_order(), offset) => Err(FreeError::DoubleFree),
            Ok(block) => Ok(block),
            Err(FreeError::InvalidOffset) => Err(self.classify_in_live(offset)),
            Err(e) => Err(e),
        }
    }

    /// For an offset that is not the start of a live block of the tables:
    /// whether it lies inside a cached block (free space for the caller).
    #[cold]
    fn classify_in_live(&self, offset: u64) -> FreeError {
        if offset & (self.min_block() - 1) != 0 {
            return FreeError::InvalidOffset;
        }
        let unit = offset >> self.unit_shift;
        let Ok(chunk) = usize::try_from(unit >> CHUNK_ORDER) else {
            return FreeError::InvalidOffset;
        };
        let first = (unit & (CHUNK_UNITS - 1)) as u32;
        let containing = match self.head.get(chunk).map(|&h| (h, h & TAG)) {
            Some((_, SMALL)) => self.small_bits(chunk).and_then(|&bits| {
                let starts = bits.starts & run_mask(0, first + 1);
                if bits.used >> first & 1 == 0 || starts == 0 {
                    return None;
                }
                let start = 63 - starts.leading_zeros();
                let order = block_len(bits, start).trailing_zeros();
                Some((self.offset_of(chunk, start), order))
            }),
            Some((h, LIVE)) => Some((
                self.offset_of(chunk, 0),
                u32::from(h & PAYLOAD) + CHUNK_ORDER,
            )),
            Some((_, INSIDE)) => self
                .covering_block(chunk)
                .filter(|&(_, h)| h & TAG == LIVE)
                .map(|(base, h)| {
                    (
                        self.offset_of(base, 0),
                        u32::from(h & PAYLOAD) + CHUNK_ORDER,
                    )
                }),
            _ => None,
        };
        match containing {
            Some((start, order)) if self.cache.holds(order, start) => FreeError::DoubleFree,
            _ => FreeError::InvalidOffset,
        }
    }
}
