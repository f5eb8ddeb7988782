//! [`PtHeap`]: a dlmalloc-style allocator whose chunk headers live inside
//! the segment it manages.
//!
//! # Chunks
//!
//! The segment (its length rounded down to 16 bytes) is cut into chunks,
//! each a multiple of 16 bytes and at least 32, laid end to end from offset
//! 0. A chunk at offset `c` starts with two words:
//!
//! ```text
//! c + 0   previous chunk's size, written only while that chunk is free
//! c + 8   this chunk's size | PINUSE (previous in use) | CINUSE (this in use)
//! c + 16  payload of a live chunk (the offset handed out); for a free
//!         chunk in a small bin, the next and previous chunk of its bin
//! ```
//!
//! So a live chunk costs 16 bytes of header, and every offset handed out is
//! a multiple of 16. Free neighbours merge at once: no two free chunks
//! touch, and no free chunk touches the *top*, the untouched end of the
//! segment that chunks are carved from when no free chunk fits.
//!
//! # Finding a chunk
//!
//! - chunks under 1 KiB sit in 62 exact-size *small bins* (LIFO lists
//!   linked through the chunks themselves, heads and a bitmap of non-empty
//!   bins outside the segment): a request takes its own bin, else the
//!   smallest non-empty larger bin;
//! - larger free chunks are kept in an ordered set of (size, offset) outside
//!   the segment: best fit, the lowest offset among equal sizes;
//! - then the top.
//!
//! A chunk larger than needed is split and the rest goes back to a bin (or
//! to the top). Every choice depends only on the calls made so far, never on
//! addresses or time, so the same sequence of calls gives the same offsets
//! in every process.
//!
//! # Checking offsets
//!
//! A bitmap outside the segment marks where live chunks start (one bit per
//! 16 bytes, up to the highest offset ever used: 1/128 of that part of the
//! heap), so freeing an offset that is not live is refused without reading
//! the segment. Headers inside the segment are checked before they are
//! trusted; a header that does not make sense (user code wrote over it) is
//! reported as [`Corruption`] and the heap refuses all further work rather
//! than hand out overlapping blocks.

// The chunk headers are read and written through the segment's raw pointer.
#![allow(unsafe_code)]

use std::collections::BTreeSet;
use std::fmt;

use fireopal_abi::memheap::Segment;

/// Chunk granule: sizes and offsets are multiples of it.
pub const GRAIN: u64 = 16;
/// Header bytes in front of every payload.
pub const HEADER: u64 = 16;
/// Smallest chunk: header plus the two bin links.
pub const MIN_CHUNK: u64 = 32;
/// Chunks below this size live in the exact-size small bins.
const SMALL_LIMIT: u64 = 1024;
const SMALL_BINS: usize = (SMALL_LIMIT / GRAIN) as usize;

const CINUSE: u64 = 1;
const PINUSE: u64 = 2;
const FLAGS: u64 = GRAIN - 1;
const NIL: u64 = u64::MAX;

// Word offsets inside a chunk.
const PREV_FOOT: u64 = 0;
const HEAD: u64 = 8;
const FD: u64 = 16;
const BK: u64 = 24;

/// Heap metadata that does not make sense, with where it was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Corruption {
    /// Segment offset of the chunk or word concerned.
    pub offset: u64,
    /// What is wrong.
    pub what: &'static str,
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "heap metadata corrupted at offset {}: {} (was memory outside an allocation written?)",
            self.offset, self.what
        )
    }
}

impl std::error::Error for Corruption {}

fn corrupt(offset: u64, what: &'static str) -> Corruption {
    Corruption { offset, what }
}

/// Why [`PtHeap::alloc`] failed; the heap is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// The size is zero.
    ZeroSize,
    /// The alignment is zero or not a power of two.
    InvalidAlignment,
    /// No free space large enough.
    OutOfMemory,
    /// The heap's metadata is broken.
    Corrupted(Corruption),
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroSize => f.write_str("zero-size allocation"),
            Self::InvalidAlignment => f.write_str("alignment is not a power of two"),
            Self::OutOfMemory => f.write_str("no free space large enough in the heap"),
            Self::Corrupted(c) => c.fmt(f),
        }
    }
}

impl std::error::Error for AllocError {}

impl From<Corruption> for AllocError {
    fn from(c: Corruption) -> Self {
        Self::Corrupted(c)
    }
}

/// Why [`PtHeap::free`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeError {
    /// No live allocation starts at this offset; the heap is unchanged.
    NotLive(u64),
    /// The heap's metadata is broken.
    Corrupted(Corruption),
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotLive(o) => write!(f, "offset {o} is not a live allocation"),
            Self::Corrupted(c) => c.fmt(f),
        }
    }
}

impl std::error::Error for FreeError {}

impl From<Corruption> for FreeError {
    fn from(c: Corruption) -> Self {
        Self::Corrupted(c)
    }
}

/// Why [`PtHeap::realloc`] failed; the old allocation is untouched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReallocError {
    /// The new size is zero (free the allocation instead).
    ZeroSize,
    /// No live allocation starts at this offset.
    NotLive(u64),
    /// No room for the new size.
    OutOfMemory,
    /// The heap's metadata is broken.
    Corrupted(Corruption),
}

impl fmt::Display for ReallocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroSize => f.write_str("zero-size reallocation"),
            Self::NotLive(o) => write!(f, "offset {o} is not a live allocation"),
            Self::OutOfMemory => f.write_str("no free space large enough in the heap"),
            Self::Corrupted(c) => c.fmt(f),
        }
    }
}

impl std::error::Error for ReallocError {}

impl From<Corruption> for ReallocError {
    fn from(c: Corruption) -> Self {
        Self::Corrupted(c)
    }
}

/// Occupancy figures of a [`PtHeap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Stats {
    /// Segment length.
    pub heap_bytes: u64,
    /// Bytes in live chunks, headers and rounding included.
    pub used_bytes: u64,
    /// Managed bytes not in live chunks.
    pub free_bytes: u64,
    /// Largest size one allocation (alignment 16) could get now.
    pub largest_free: u64,
    /// Live allocations.
    pub live_allocations: u64,
}

/// The segment as the heap sees it: every access is bounds-checked.
#[derive(Clone, Copy, Debug)]
struct Memory {
    base: *mut u8,
    len: u64,
}

impl Memory {
    fn check(&self, at: u64, n: u64, what: &'static str) -> Result<usize, Corruption> {
        match at.checked_add(n) {
            // `len` is the length of a mapping, so it and `at` fit a usize.
            Some(end) if end <= self.len => Ok(at as usize),
            _ => Err(corrupt(at, what)),
        }
    }

    fn word(&self, at: u64) -> Result<u64, Corruption> {
        let i = self.check(at, 8, "header word outside the segment")?;
        // SAFETY: `[at, at + 8)` lies inside the segment, which the contract
        // of `Segment::new` keeps mapped read-write for this heap.
        Ok(unsafe { self.base.add(i).cast::<u64>().read_unaligned() })
    }

    fn set_word(&self, at: u64, value: u64) -> Result<(), Corruption> {
        let i = self.check(at, 8, "header word outside the segment")?;
        // SAFETY: as in `word`; header words belong to the heap (no live
        // allocation covers them).
        unsafe { self.base.add(i).cast::<u64>().write_unaligned(value) };
        Ok(())
    }

    /// Copies `n` bytes between two distinct live chunks.
    fn copy(&self, from: u64, to: u64, n: u64) -> Result<(), Corruption> {
        let src = self.check(from, n, "copy source outside the segment")?;
        let dst = self.check(to, n, "copy target outside the segment")?;
        // SAFETY: both ranges lie inside the segment (checked above) and are
        // payloads of two different live chunks, which never overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.add(src), self.base.add(dst), n as usize)
        };
        Ok(())
    }
}

/// A dlmalloc-style allocator over a [`Segment`]; see the [module
/// documentation](self).
///
/// Offsets are aligned relative to the segment's base: the base must be
/// aligned at least as much for addresses to be.
pub struct PtHeap {
    mem: Memory,
    /// End of the managed part: the length rounded down to [`GRAIN`].
    end: u64,
    /// Start of the top; `[top, end)` has never been handed out or was
    /// given back at the end.
    top: u64,
    /// First chunk of each small bin (index = size / 16), `NIL` when empty.
    small: [u64; SMALL_BINS],
    /// Bit `i`: small bin `i` is not empty.
    small_map: u64,
    /// Free chunks of `SMALL_LIMIT` bytes or more, as (size, offset).
    large: BTreeSet<(u64, u64)>,
    /// One bit per granule: a live chunk starts here.
    live: Vec<u64>,
    used: u64,
    live_count: u64,
    /// Set once broken metadata was seen; everything fails afterwards.
    broken: Option<Corruption>,
}

// SAFETY: the heap holds the segment's base pointer only to reach memory
// that `Segment::new`'s contract reserves to it; moving the heap to another
// thread moves that exclusive use with it.
unsafe impl Send for PtHeap {}

impl fmt::Debug for PtHeap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PtHeap")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Chunk size for a request of `size` payload bytes.
fn chunk_for(size: u64) -> Option<u64> {
    let s = size.checked_add(HEADER + GRAIN - 1)? & !FLAGS;
    Some(s.max(MIN_CHUNK))
}

fn small_index(size: u64) -> usize {
    (size / GRAIN) as usize
}

impl PtHeap {
    /// A heap managing all of `segment`, empty. Nothing is written to the
    /// segment until the first allocation.
    pub fn new(segment: Segment) -> PtHeap {
        let len = segment.len();
        PtHeap {
            mem: Memory {
                base: segment.base(),
                len,
            },
            end: len & !FLAGS,
            top: 0,
            small: [NIL; SMALL_BINS],
            small_map: 0,
            large: BTreeSet::new(),
            live: Vec::new(),
            used: 0,
            live_count: 0,
            broken: None,
        }
    }

    fn healthy(&self) -> Result<(), Corruption> {
        self.broken.map_or(Ok(()), Err)
    }

    /// Records broken metadata so that later calls refuse to work.
    fn mark_broken<T>(&mut self, result: Result<T, Corruption>) -> Result<T, Corruption> {
        if let Err(c) = result {
            self.broken.get_or_insert(c);
        }
        result
    }

    fn head(&self, c: u64) -> Result<u64, Corruption> {
        self.mem
            .word(c.checked_add(HEAD).ok_or(corrupt(c, "offset overflow"))?)
    }

    fn set_head(&self, c: u64, value: u64) -> Result<(), Corruption> {
        self.mem.set_word(c + HEAD, value)
    }

    fn is_live(&self, c: u64) -> bool {
        let g = c / GRAIN;
        self.live
            .get((g / 64) as usize)
            .is_some_and(|w| w >> (g % 64) & 1 == 1)
    }

    fn set_live(&mut self, c: u64, on: bool) {
        let g = c / GRAIN;
        let i = (g / 64) as usize;
        if i >= self.live.len() {
            if !on {
                return;
            }
            self.live.resize(i + 1, 0);
        }
        if let Some(w) = self.live.get_mut(i) {
            if on {
                *w |= 1 << (g % 64);
            } else {
                *w &= !(1 << (g % 64));
            }
        }
    }

    /// The chunk of live payload offset `offset`, if there is one.
    fn live_chunk(&self, offset: u64) -> Option<u64> {
        let c = offset.checked_sub(HEADER)?;
        (c % GRAIN == 0 && c < self.top && self.is_live(c)).then_some(c)
    }

    /// Size of the live chunk at `c`, checking its header.
    fn live_size(&self, c: u64) -> Result<(u64, u64), Corruption> {
        let h = self.head(c)?;
        let size = h & !FLAGS;
        if h & CINUSE == 0 || size < MIN_CHUNK || c.checked_add(size).is_none_or(|e| e > self.top) {
            return Err(corrupt(c, "header of a live chunk is not valid"));
        }
        Ok((size, h & PINUSE))
    }

    fn push_small(&mut self, c: u64, size: u64) -> Result<(), Corruption> {
        let i = small_index(size);
        let first = self.small.get(i).copied().unwrap_or(NIL);
        self.mem.set_word(c + FD, first)?;
        self.mem.set_word(c + BK, NIL)?;
        if first != NIL {
            self.mem.set_word(first + BK, c)?;
        }
        if let Some(slot) = self.small.get_mut(i) {
            *slot = c;
        }
        self.small_map |= 1 << i;
        Ok(())
    }

    fn unlink_small(&mut self, c: u64, size: u64) -> Result<(), Corruption> {
        let i = small_index(size);
        let fd = self.mem.word(c + FD)?;
        let bk = self.mem.word(c + BK)?;
        let Some(slot) = self.small.get_mut(i) else {
            return Err(corrupt(c, "small chunk of a size without a bin"));
        };
        if bk == NIL {
            if *slot != c {
                return Err(corrupt(c, "free chunk is not where its bin says"));
            }
            *slot = fd;
        } else {
            self.mem.set_word(bk + FD, fd)?;
        }
        if fd != NIL {
            self.mem.set_word(fd + BK, bk)?;
        }
        if *slot == NIL {
            self.small_map &= !(1 << i);
        }
        Ok(())
    }

    fn bin_add(&mut self, c: u64, size: u64) -> Result<(), Corruption> {
        if size < SMALL_LIMIT {
            self.push_small(c, size)
        } else {
            self.large.insert((size, c));
            Ok(())
        }
    }

    fn bin_remove(&mut self, c: u64, size: u64) -> Result<(), Corruption> {
        if size < SMALL_LIMIT {
            self.unlink_small(c, size)
        } else if self.large.remove(&(size, c)) {
            Ok(())
        } else {
            Err(corrupt(c, "free chunk is missing from the large set"))
        }
    }

    /// Makes `[c, c + size)` a free chunk in a bin. The chunk before it is
    /// live and the one after it is live (not the top).
    fn insert_free(&mut self, c: u64, size: u64) -> Result<(), Corruption> {
        self.set_head(c, size | PINUSE)?;
        let next = c + size;
        self.mem.set_word(next + PREV_FOOT, size)?;
        let nh = self.head(next)?;
        self.set_head(next, nh & !PINUSE)?;
        self.bin_add(c, size)
    }

    /// Gives `[c, c + size)` back, merging it with the next chunk when that
    /// one is free or is the top. The chunk before `c` must be live.
    fn free_range(&mut self, c: u64, mut size: u64) -> Result<(), Corruption> {
        let next = c + size;
        if next == self.top {
            self.top = c;
            return Ok(());
        }
        let nh = self.head(next)?;
        if nh & CINUSE == 0 {
            let ns = nh & !FLAGS;
            self.bin_remove(next, ns)?;
            size += ns;
        }
        self.insert_free(c, size)
    }

    /// Takes a free chunk of at least `size` bytes out of the bins or the
    /// top, without splitting it: (offset, its size).
    fn take(&mut self, size: u64) -> Result<Option<(u64, u64)>, Corruption> {
        if size < SMALL_LIMIT {
            let mask = self.small_map & (!0u64 << small_index(size));
            if mask != 0 {
                let i = mask.trailing_zeros() as usize;
                let c = self.small.get(i).copied().unwrap_or(NIL);
                let found = i as u64 * GRAIN;
                self.unlink_small(c, found)?;
                return Ok(Some((c, found)));
            }
        }
        if let Some(&(found, c)) = self.large.range((size, 0)..).next() {
            self.large.remove(&(found, c));
            return Ok(Some((c, found)));
        }
        if self.end - self.top >= size {
            let c = self.top;
            self.top += size;
            return Ok(Some((c, size)));
        }
        Ok(None)
    }

    /// Marks the taken chunk `[c, c + have)` live with `size` bytes, giving
    /// the rest back when it can make a chunk of its own.
    fn place(&mut self, c: u64, have: u64, size: u64, pinuse: u64) -> Result<(), Corruption> {
        let kept = if have - size >= MIN_CHUNK {
            self.set_head(c, size | CINUSE | pinuse)?;
            self.free_range(c + size, have - size)?;
            size
        } else {
            let next = c + have;
            if next != self.top {
                let nh = self.head(next)?;
                self.set_head(next, nh | PINUSE)?;
            }
            have
        };
        self.set_head(c, kept | CINUSE | pinuse)?;
        self.set_live(c, true);
        self.used += kept;
        self.live_count += 1;
        Ok(())
    }

    /// Allocates `size` (> 0) bytes at an offset that is a multiple of
    /// `align` (a power of two) and returns the offset.
    pub fn alloc(&mut self, size: u64, align: u64) -> Result<u64, AllocError> {
        self.healthy()?;
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        if !align.is_power_of_two() {
            return Err(AllocError::InvalidAlignment);
        }
        let result = self.alloc_checked(size, align);
        if let Err(AllocError::Corrupted(c)) = result {
            self.broken.get_or_insert(c);
        }
        result
    }

    fn alloc_checked(&mut self, size: u64, align: u64) -> Result<u64, AllocError> {
        let need = chunk_for(size).ok_or(AllocError::OutOfMemory)?;
        if align <= GRAIN {
            let (c, have) = self.take(need)?.ok_or(AllocError::OutOfMemory)?;
            self.place(c, have, need, PINUSE)?;
            return Ok(c + HEADER);
        }
        // Room for the request, the alignment gap and a free lead chunk.
        let padded = need
            .checked_add(align)
            .and_then(|v| v.checked_add(MIN_CHUNK))
            .ok_or(AllocError::OutOfMemory)?;
        if padded > self.end {
            return Err(AllocError::OutOfMemory);
        }
        let (c, have) = self.take(padded)?.ok_or(AllocError::OutOfMemory)?;
        let payload = c + HEADER;
        let mut lead = payload.next_multiple_of(align) - payload;
        if lead != 0 && lead < MIN_CHUNK {
            lead += align;
        }
        let mut pinuse = PINUSE;
        if lead > 0 {
            // The lead becomes a free chunk before the aligned one; the
            // chunk before `c` is live, as before any taken chunk.
            self.set_head(c, lead | PINUSE)?;
            self.mem.set_word(c + lead + PREV_FOOT, lead)?;
            self.bin_add(c, lead)?;
            pinuse = 0;
        }
        let n = c + lead;
        self.place(n, have - lead, need, pinuse)?;
        Ok(n + HEADER)
    }

    /// Frees the allocation at `offset`.
    pub fn free(&mut self, offset: u64) -> Result<(), FreeError> {
        self.healthy()?;
        let c = self.live_chunk(offset).ok_or(FreeError::NotLive(offset))?;
        let result = self.free_chunk(c);
        Ok(self.mark_broken(result)?)
    }

    fn free_chunk(&mut self, c: u64) -> Result<(), Corruption> {
        let (size, pinuse) = self.live_size(c)?;
        let mut start = c;
        let mut total = size;
        if pinuse == 0 {
            let ps = self.mem.word(c + PREV_FOOT)?;
            let p = c
                .checked_sub(ps)
                .ok_or(corrupt(c, "previous chunk size too large"))?;
            let ph = self.head(p)?;
            if ph & CINUSE != 0 || ph & !FLAGS != ps || ps < MIN_CHUNK {
                return Err(corrupt(p, "free chunk before a live one is not valid"));
            }
            self.bin_remove(p, ps)?;
            start = p;
            total += ps;
        }
        self.set_live(c, false);
        self.used -= size;
        self.live_count -= 1;
        self.free_range(start, total)
    }

    /// Resizes the allocation at `offset` to `new_size` (> 0) bytes,
    /// keeping its contents up to the smaller size, and returns its offset:
    /// the same one when it could shrink or grow in place, else a new one
    /// (alignment 16; contents copied, the old allocation freed).
    pub fn realloc(&mut self, offset: u64, new_size: u64) -> Result<u64, ReallocError> {
        self.healthy()?;
        if new_size == 0 {
            return Err(ReallocError::ZeroSize);
        }
        let c = self
            .live_chunk(offset)
            .ok_or(ReallocError::NotLive(offset))?;
        let result = self.realloc_chunk(c, new_size);
        if let Err(ReallocError::Corrupted(x)) = result {
            self.broken.get_or_insert(x);
        }
        result
    }

    fn realloc_chunk(&mut self, c: u64, new_size: u64) -> Result<u64, ReallocError> {
        let offset = c + HEADER;
        let (size, pinuse) = self.live_size(c)?;
        let need = chunk_for(new_size).ok_or(ReallocError::OutOfMemory)?;
        if need <= size {
            if size - need >= MIN_CHUNK {
                self.set_head(c, need | CINUSE | pinuse)?;
                self.used -= size - need;
                self.free_range(c + need, size - need)?;
            }
            return Ok(offset);
        }
        let next = c + size;
        if next == self.top {
            if self.end - self.top >= need - size {
                self.top = c + need;
                self.set_head(c, need | CINUSE | pinuse)?;
                self.used += need - size;
                return Ok(offset);
            }
        } else {
            let nh = self.head(next)?;
            let ns = nh & !FLAGS;
            if nh & CINUSE == 0 && size + ns >= need {
                self.bin_remove(next, ns)?;
                // The merged chunk ends where a live chunk starts.
                self.used -= size;
                self.live_count -= 1;
                self.set_live(c, false);
                self.place(c, size + ns, need, pinuse)?;
                return Ok(offset);
            }
        }
        let moved = match self.alloc_checked(new_size, GRAIN) {
            Ok(o) => o,
            Err(AllocError::Corrupted(x)) => return Err(x.into()),
            Err(_) => return Err(ReallocError::OutOfMemory),
        };
        self.mem
            .copy(offset, moved, (size - HEADER).min(new_size))?;
        self.free_chunk(c)?;
        Ok(moved)
    }

    /// Payload bytes of the live allocation at `offset` (at least what was
    /// asked for), or `None` when none starts there.
    pub fn usable_size(&self, offset: u64) -> Option<u64> {
        let c = self.live_chunk(offset)?;
        self.live_size(c).ok().map(|(s, _)| s - HEADER)
    }

    /// Current figures.
    pub fn stats(&self) -> Stats {
        let top = self.end - self.top;
        let large = self.large.last().map_or(0, |&(s, _)| s);
        let small = if self.small_map == 0 {
            0
        } else {
            u64::from(63 - self.small_map.leading_zeros()) * GRAIN
        };
        Stats {
            heap_bytes: self.mem.len,
            used_bytes: self.used,
            free_bytes: self.end - self.used,
            largest_free: top.max(large).max(small).saturating_sub(HEADER),
            live_allocations: self.live_count,
        }
    }

    /// Walks every chunk and bin and checks that they agree (for tests;
    /// costs time proportional to the part of the heap in use).
    pub fn check_consistency(&self) -> Result<(), Corruption> {
        self.healthy()?;
        let mut c = 0u64;
        let mut prev_free = false;
        let (mut used, mut live, mut small_free, mut large_free) = (0u64, 0u64, 0u64, 0usize);
        while c < self.top {
            let h = self.head(c)?;
            let size = h & !FLAGS;
            if size < MIN_CHUNK || c.checked_add(size).is_none_or(|e| e > self.top) {
                return Err(corrupt(c, "chunk size out of range"));
            }
            if (h & PINUSE != 0) == prev_free {
                return Err(corrupt(c, "PINUSE does not match the previous chunk"));
            }
            if h & CINUSE != 0 {
                if !self.is_live(c) {
                    return Err(corrupt(c, "live chunk not marked in the live bitmap"));
                }
                used += size;
                live += 1;
                prev_free = false;
            } else {
                if prev_free {
                    return Err(corrupt(c, "two free chunks touch"));
                }
                if self.is_live(c) {
                    return Err(corrupt(c, "free chunk marked live"));
                }
                if self.mem.word(c + size + PREV_FOOT)? != size {
                    return Err(corrupt(c, "footer of a free chunk is wrong"));
                }
                if size < SMALL_LIMIT {
                    small_free += 1;
                } else if self.large.contains(&(size, c)) {
                    large_free += 1;
                } else {
                    return Err(corrupt(c, "large free chunk missing from the set"));
                }
                prev_free = true;
            }
            c += size;
        }
        if c != self.top || prev_free {
            return Err(corrupt(
                c,
                "chunks do not end at the top, or a free chunk touches it",
            ));
        }
        if used != self.used || live != self.live_count || large_free != self.large.len() {
            return Err(corrupt(0, "totals do not match the chunks"));
        }
        let live_bits: u64 = self.live.iter().map(|w| u64::from(w.count_ones())).sum();
        if live_bits != live {
            return Err(corrupt(0, "live bitmap has bits outside live chunks"));
        }
        let mut listed = 0u64;
        for (i, &first) in self.small.iter().enumerate() {
            if (first != NIL) != (self.small_map >> i & 1 == 1) {
                return Err(corrupt(first, "small bin bitmap is wrong"));
            }
            let (mut prev, mut x) = (NIL, first);
            while x != NIL {
                listed += 1;
                if listed > small_free {
                    return Err(corrupt(x, "small bins hold more chunks than the heap"));
                }
                let h = self.head(x)?;
                if h & CINUSE != 0 || h & !FLAGS != i as u64 * GRAIN {
                    return Err(corrupt(x, "chunk in the wrong small bin"));
                }
                if self.mem.word(x + BK)? != prev {
                    return Err(corrupt(x, "small bin back link is wrong"));
                }
                prev = x;
                x = self.mem.word(x + FD)?;
            }
        }
        if listed != small_free {
            return Err(corrupt(0, "a small free chunk is in no bin"));
        }
        Ok(())
    }
}
