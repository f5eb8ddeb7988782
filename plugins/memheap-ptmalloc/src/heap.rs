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
//!         chunk, the next and previous chunk of its bin
//! ```
//!
//! So a live chunk costs 16 bytes of header, and every offset handed out is
//! a multiple of 16. Free neighbours merge at once: no two free chunks
//! touch, and no free chunk touches the *top*, the untouched end of the
//! segment that chunks are carved from when no free chunk fits.
//!
//! # Finding a chunk
//!
//! Free chunks sit in *bins*: LIFO lists linked through the chunks
//! themselves, with the list heads and a bitmap of non-empty bins outside
//! the segment.
//!
//! - chunks under 1 KiB: one bin per size (16 B steps), so a hit is exact;
//! - larger chunks: four bins per power of two (sizes `[2^k, 1.25·2^k)`,
//!   `[1.25·2^k, 1.5·2^k)`, ...), as in TLSF.
//!
//! A request looks at the first few chunks of its own bin, then takes the
//! first chunk of the smallest non-empty bin above it (every chunk there is
//! large enough), then carves from the top. Each step is O(1): a bitmap
//! scan of five words and a bounded list walk.
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
/// log2 of `SMALL_LIMIT`.
const SMALL_SHIFT: u32 = 10;
/// Bins per power of two above `SMALL_LIMIT` (a power of two).
const SPLITS: usize = 4;
const SPLIT_BITS: u32 = SPLITS.trailing_zeros();
/// Small bins, then `SPLITS` bins for each power of two from 1 KiB to 2^63.
const BINS: usize = SMALL_BINS + (64 - SMALL_SHIFT as usize) * SPLITS;
const MAP_WORDS: usize = BINS.div_ceil(64);
/// Chunks of its own bin a request looks at before moving up.
const SAME_BIN_TRIES: u32 = 8;

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
    /// First chunk of each bin (see `bin_of`), `NIL` when empty.
    heads: [u64; BINS],
    /// Bit `i`: bin `i` is not empty.
    map: [u64; MAP_WORDS],
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

/// Bin of a free chunk of `size` bytes.
fn bin_of(size: u64) -> usize {
    if size < SMALL_LIMIT {
        return (size / GRAIN) as usize;
    }
    let top_bit = 63 - size.leading_zeros();
    let split = (size >> (top_bit - SPLIT_BITS)) as usize & (SPLITS - 1);
    SMALL_BINS + (top_bit - SMALL_SHIFT) as usize * SPLITS + split
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
            heads: [NIL; BINS],
            map: [0; MAP_WORDS],
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

    fn head_of(&self, bin: usize) -> u64 {
        self.heads.get(bin).copied().unwrap_or(NIL)
    }

    fn set_head_of(&mut self, bin: usize, c: u64) {
        if let Some(slot) = self.heads.get_mut(bin) {
            *slot = c;
        }
        if let Some(w) = self.map.get_mut(bin / 64) {
            if c == NIL {
                *w &= !(1 << (bin % 64));
            } else {
                *w |= 1 << (bin % 64);
            }
        }
    }

    /// First non-empty bin at or after `bin`.
    fn next_bin(&self, bin: usize) -> Option<usize> {
        let mut word = bin / 64;
        let mut bits = self.map.get(word)? & (!0u64 << (bin % 64));
        loop {
            if bits != 0 {
                return Some(word * 64 + bits.trailing_zeros() as usize);
            }
            word += 1;
            bits = *self.map.get(word)?;
        }
    }

    fn bin_add(&mut self, c: u64, size: u64) -> Result<(), Corruption> {
        let bin = bin_of(size);
        let first = self.head_of(bin);
        self.mem.set_word(c + FD, first)?;
        self.mem.set_word(c + BK, NIL)?;
        if first != NIL {
            self.mem.set_word(first + BK, c)?;
        }
        self.set_head_of(bin, c);
        Ok(())
    }

    fn bin_remove(&mut self, c: u64, size: u64) -> Result<(), Corruption> {
        let bin = bin_of(size);
        let fd = self.mem.word(c + FD)?;
        let bk = self.mem.word(c + BK)?;
        if bk == NIL {
            if self.head_of(bin) != c {
                return Err(corrupt(c, "free chunk is not where its bin says"));
            }
            self.set_head_of(bin, fd);
        } else {
            self.mem.set_word(bk + FD, fd)?;
        }
        if fd != NIL {
            self.mem.set_word(fd + BK, bk)?;
        }
        Ok(())
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
        let bin = bin_of(size);
        // Its own bin: exact for small sizes, a few tries for large ones.
        let mut c = self.head_of(bin);
        for _ in 0..SAME_BIN_TRIES {
            if c == NIL {
                break;
            }
            let found = self.head(c)? & !FLAGS;
            if found >= size {
                self.bin_remove(c, found)?;
                return Ok(Some((c, found)));
            }
            c = self.mem.word(c + FD)?;
        }
        // Every chunk of a higher bin is large enough.
        if let Some(b) = self.next_bin(bin + 1) {
            let c = self.head_of(b);
            let found = self.head(c)? & !FLAGS;
            if bin_of(found) != b {
                return Err(corrupt(c, "free chunk in the wrong bin"));
            }
            self.bin_remove(c, found)?;
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
        Stats {
            heap_bytes: self.mem.len,
            used_bytes: self.used,
            free_bytes: self.end - self.used,
            largest_free: top.max(self.largest_binned()).saturating_sub(HEADER),
            live_allocations: self.live_count,
        }
    }

    /// Size of the largest free chunk in the bins: the largest in the
    /// highest non-empty bin (a walk of that one list).
    fn largest_binned(&self) -> u64 {
        let Some(bin) = (0..MAP_WORDS).rev().find_map(|w| {
            let bits = self.map.get(w).copied().unwrap_or(0);
            (bits != 0).then(|| w * 64 + 63 - bits.leading_zeros() as usize)
        }) else {
            return 0;
        };
        let (mut largest, mut c, mut steps) = (0, self.head_of(bin), 0u64);
        // Bounded by the number of chunks, in case the list is broken.
        while c != NIL && steps <= self.end / MIN_CHUNK {
            let Ok(h) = self.head(c) else { break };
            largest = largest.max(h & !FLAGS);
            let Ok(next) = self.mem.word(c + FD) else {
                break;
            };
            c = next;
            steps += 1;
        }
        largest
    }

    /// Walks every chunk and bin and checks that they agree (for tests;
    /// costs time proportional to the part of the heap in use).
    pub fn check_consistency(&self) -> Result<(), Corruption> {
        self.healthy()?;
        let mut c = 0u64;
        let mut prev_free = false;
        let (mut used, mut live, mut free) = (0u64, 0u64, 0u64);
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
                free += 1;
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
        if used != self.used || live != self.live_count {
            return Err(corrupt(0, "totals do not match the chunks"));
        }
        let live_bits: u64 = self.live.iter().map(|w| u64::from(w.count_ones())).sum();
        if live_bits != live {
            return Err(corrupt(0, "live bitmap has bits outside live chunks"));
        }
        let mut listed = 0u64;
        for (i, &first) in self.heads.iter().enumerate() {
            let mapped = self.map.get(i / 64).is_some_and(|w| w >> (i % 64) & 1 == 1);
            if (first != NIL) != mapped {
                return Err(corrupt(first, "bin bitmap is wrong"));
            }
            let (mut prev, mut x) = (NIL, first);
            while x != NIL {
                listed += 1;
                if listed > free {
                    return Err(corrupt(x, "bins hold more chunks than the heap"));
                }
                let h = self.head(x)?;
                if h & CINUSE != 0 || bin_of(h & !FLAGS) != i {
                    return Err(corrupt(x, "chunk in the wrong bin"));
                }
                if self.mem.word(x + BK)? != prev {
                    return Err(corrupt(x, "bin back link is wrong"));
                }
                prev = x;
                x = self.mem.word(x + FD)?;
            }
        }
        if listed != free {
            return Err(corrupt(0, "a free chunk is in no bin"));
        }
        Ok(())
    }
}
