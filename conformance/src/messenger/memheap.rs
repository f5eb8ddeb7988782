//! The memheap cases of the messenger suite: a symmetric-heap allocator
//! against the contract of `fireopal_abi::memheap`, through the host's
//! OpenSHMEM-style calls on an 8 MiB heap. Every rank runs the same calls,
//! so the symmetry of offsets is checked across the job.
//!
//! The cases: alignments and refused requests (`align`); a seeded random
//! mix of malloc, align, calloc, realloc and free whose blocks must stay
//! inside the heap, aligned, apart and intact (`random`); the same call
//! sequence giving the same offsets on every rank (`symmetric`); running
//! out of room and getting it all back (`exhaustion`); frees of pointers
//! that are not live allocations (`bad-free`).

use std::collections::BTreeMap;

use fireopal::bootstrap::Bootstrap;
use fireopal::memheap::{SymmetricHeap, DEFAULT_ALIGN};
use fireopal::plugin::Registry;

use super::{run_cases, CaseOf, Outcome, SetupError, Tally};

/// Size of the heap the checks run on.
const HEAP_BYTES: u64 = 8 << 20;

/// One memheap case.
pub type Case = CaseOf<Ctx>;

/// Every case, in the order it runs.
pub const CASES: [(&str, Case); 5] = [
    ("align", |c| case_align(c).map(|()| Outcome::Passed)),
    ("random", |c| case_random(c).map(|()| Outcome::Passed)),
    ("symmetric", |c| case_symmetric(c).map(|()| Outcome::Passed)),
    ("exhaustion", |c| {
        case_exhaustion(c).map(|()| Outcome::Passed)
    }),
    ("bad-free", |c| case_bad_free(c).map(|()| Outcome::Passed)),
];

/// What every memheap case works with on one rank.
pub struct Ctx {
    boot: Bootstrap,
    heap: SymmetricHeap,
    rank: u32,
    size: u32,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// A live block the checks made: where, how long, the alignment asked
/// for, and the seed of the bytes written into it.
#[derive(Debug, Clone, Copy)]
struct Block {
    len: usize,
    align: usize,
    seed: u8,
}

/// The blocks live in the heap, by offset, with the checks every call's
/// answer must pass.
struct Live<'h> {
    heap: &'h SymmetricHeap,
    blocks: BTreeMap<u64, Block>,
}

impl<'h> Live<'h> {
    fn new(heap: &'h SymmetricHeap) -> Self {
        Self {
            heap,
            blocks: BTreeMap::new(),
        }
    }

    /// Checks a new block at `ptr` (inside the heap, aligned, apart from
    /// every live block) and records it; returns its offset.
    fn add(&mut self, ptr: *mut u8, block: Block) -> Result<u64, String> {
        let off = self
            .heap
            .offset_of(ptr)
            .ok_or_else(|| format!("{ptr:p} is not inside the heap"))?;
        let end = off + block.len as u64;
        if end > self.heap.len() {
            return Err(format!(
                "a block of {} bytes at offset {off} passes the end",
                block.len
            ));
        }
        if (ptr as usize) % block.align != 0 {
            return Err(format!(
                "offset {off} is not aligned to the {} asked for",
                block.align
            ));
        }
        if let Some((&p, b)) = self.blocks.range(..=off).next_back() {
            if p + b.len as u64 > off {
                return Err(format!(
                    "offset {off} ({} bytes) overlaps the live block at {p} ({} bytes)",
                    block.len, b.len
                ));
            }
        }
        if let Some((&n, b)) = self.blocks.range(off..).next() {
            if n < end {
                return Err(format!(
                    "offset {off} ({} bytes) overlaps the live block at {n} ({} bytes)",
                    block.len, b.len
                ));
            }
        }
        self.blocks.insert(off, block);
        Ok(off)
    }

    /// The address of `len` bytes at `off`, checked to lie in the heap.
    fn at(&self, off: u64, len: usize) -> Result<*mut u8, String> {
        let end = off.checked_add(len as u64);
        match self.heap.ptr_at(off) {
            Some(ptr) if end.is_some_and(|e| e <= self.heap.len()) => Ok(ptr),
            _ => Err(format!(
                "{len} bytes at offset {off} are not inside the heap"
            )),
        }
    }

    /// The bytes of `len` at `off`.
    #[allow(unsafe_code)]
    fn bytes(&self, off: u64, len: usize) -> Result<&[u8], String> {
        let ptr = self.at(off, len)?;
        // SAFETY: `at` checked that the range lies in the mapped heap; the
        // allocator does not write the bytes of a live block, and nothing
        // writes them while this view is held.
        Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
    }

    /// Writes the block's pattern into it.
    #[allow(unsafe_code)]
    fn fill(&self, off: u64, block: Block) -> Result<(), String> {
        let pattern: Vec<u8> = (0..block.len).map(|i| expected(block.seed, i)).collect();
        let ptr = self.at(off, block.len)?;
        // SAFETY: the range lies in the mapped heap (`at`), inside a block
        // that `add` checked overlaps no other live block, so no one else
        // reads or writes it now.
        unsafe { std::ptr::copy_nonoverlapping(pattern.as_ptr(), ptr, block.len) };
        Ok(())
    }

    /// Checks the first `len` bytes of the block at `off` still hold what
    /// `fill` wrote.
    fn intact(&self, off: u64, block: Block, len: usize) -> Result<(), String> {
        let bytes = self.bytes(off, len.min(block.len))?;
        match bytes
            .iter()
            .enumerate()
            .find(|&(i, &b)| b != expected(block.seed, i))
        {
            None => Ok(()),
            Some((i, _)) => Err(format!(
                "byte {i} of the block at offset {off} changed while it was live"
            )),
        }
    }

    fn free(&mut self, off: u64) -> Result<(), String> {
        let block = self.blocks.remove(&off).ok_or("not a live block")?;
        self.intact(off, block, block.len)?;
        let ptr = self.heap.ptr_at(off).ok_or("offset outside the heap")?;
        self.heap
            .free(ptr)
            .map_err(|e| format!("free of the live block at offset {off}: {e}"))
    }

    fn free_all(&mut self) -> Result<(), String> {
        while let Some((&off, _)) = self.blocks.iter().next() {
            self.free(off)?;
        }
        Ok(())
    }
}

/// Byte `i` of the pattern `seed` names.
fn expected(seed: u8, i: usize) -> u8 {
    seed.wrapping_add(i as u8).wrapping_mul(31)
}

/// xorshift64*: the same sequence on every rank.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Runs `ops` seeded random calls, checking every answer; returns a digest
/// of the offsets handed out, and leaves the blocks live.
fn random_calls(live: &mut Live<'_>, seed: u64, ops: usize) -> Result<u64, String> {
    let heap = live.heap;
    let mut rng = Rng(seed | 1);
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    let mut note = |off: u64| {
        digest = (digest ^ off).wrapping_mul(0x100_0000_01b3);
    };
    for n in 0..ops {
        // Mostly small blocks, one in eight up to 32 KiB.
        let most = if rng.below(8) == 0 { 32 << 10 } else { 512 };
        let len = 1 + rng.below(most) as usize;
        let seed = n as u8;
        let choice = rng.below(10);
        if choice <= 2 && !live.blocks.is_empty() {
            // Free a live block: about as often as blocks are made.
            let k = rng.below(live.blocks.len() as u64) as usize;
            let off = *live.blocks.keys().nth(k).ok_or("block vanished")?;
            live.free(off)?;
            continue;
        }
        if choice == 5 && !live.blocks.is_empty() {
            let k = rng.below(live.blocks.len() as u64) as usize;
            let (&off, &old) = live.blocks.iter().nth(k).ok_or("block vanished")?;
            let ptr = heap.ptr_at(off).ok_or("offset outside the heap")?;
            let new = heap.realloc(ptr, len);
            if new.is_null() {
                // Refused: the old block must be untouched.
                live.intact(off, old, old.len)?;
                continue;
            }
            live.blocks.remove(&off);
            let block = Block {
                len,
                align: DEFAULT_ALIGN as usize,
                seed: old.seed,
            };
            let new_off = live.add(new, block)?;
            live.intact(new_off, block, old.len.min(len))
                .map_err(|e| format!("realloc lost contents: {e}"))?;
            let block = Block { seed, ..block };
            live.blocks.insert(new_off, block);
            live.fill(new_off, block)?;
            note(new_off);
            continue;
        }
        let (ptr, align, zeroed) = match choice {
            3 => {
                let align = 1usize << rng.below(13);
                (heap.align(align, len), align, false)
            }
            4 => (heap.calloc(len, 1), DEFAULT_ALIGN as usize, true),
            _ => (heap.malloc(len), DEFAULT_ALIGN as usize, false),
        };
        if ptr.is_null() {
            continue;
        }
        let block = Block { len, align, seed };
        let off = live.add(ptr, block)?;
        if zeroed && live.bytes(off, len)?.iter().any(|&b| b != 0) {
            return Err(format!("calloc at offset {off} is not zeroed"));
        }
        live.fill(off, block)?;
        note(off);
    }
    for (&off, &block) in &live.blocks {
        live.intact(off, block, block.len)?;
    }
    Ok(digest)
}

fn case_align(c: &mut Ctx) -> Result<(), String> {
    let heap = &c.heap;
    let mut live = Live::new(heap);
    let base = usize::try_from(heap.base_alignment()).unwrap_or(usize::MAX);
    let mut align = 1usize;
    while align <= base.min(1 << 20) {
        let ptr = heap.align(align, 100);
        if ptr.is_null() {
            return Err(format!(
                "align({align}, 100) found no room in an empty heap"
            ));
        }
        let block = Block {
            len: 100,
            align,
            seed: align.trailing_zeros() as u8,
        };
        let off = live.add(ptr, block)?;
        live.fill(off, block)?;
        align <<= 1;
    }
    for (what, ptr) in [
        ("malloc(0)", heap.malloc(0)),
        ("align(24, 8)", heap.align(24, 8)),
        (
            "align above the base's alignment",
            heap.align(base.saturating_mul(2), 8),
        ),
        (
            "malloc of more than the heap",
            heap.malloc(HEAP_BYTES as usize + 1),
        ),
    ] {
        if !ptr.is_null() {
            return Err(format!("{what} gave a block instead of null"));
        }
    }
    live.free_all()
}

fn case_random(c: &mut Ctx) -> Result<(), String> {
    // The same seed everywhere: ranks must keep identical histories for
    // their offsets to be symmetric afterwards.
    let mut live = Live::new(&c.heap);
    random_calls(&mut live, 0x5eed, 4000)?;
    live.free_all()
}

fn case_symmetric(c: &mut Ctx) -> Result<(), String> {
    let digest = {
        let mut live = Live::new(&c.heap);
        let digest = random_calls(&mut live, 0x5e11, 2000)?;
        live.free_all()?;
        digest
    };
    c.boot
        .put("memheap_digest", &digest.to_le_bytes())
        .map_err(|e| e.to_string())?;
    c.boot.fence().map_err(|e| e.to_string())?;
    for peer in 0..c.size {
        let theirs = c
            .boot
            .get(peer, "memheap_digest")
            .map_err(|e| e.to_string())?;
        if theirs != digest.to_le_bytes() {
            return Err(format!(
                "the same calls gave other offsets on rank {peer} than on rank {}",
                c.rank
            ));
        }
    }
    Ok(())
}

/// Fills the heap with 64 KiB blocks until it refuses; returns how many.
fn fill_up(live: &mut Live<'_>) -> Result<usize, String> {
    const LEN: usize = 64 << 10;
    let most = (HEAP_BYTES as usize / LEN) + 1;
    for n in 0..=most {
        let ptr = live.heap.malloc(LEN);
        if ptr.is_null() {
            return Ok(n);
        }
        let block = Block {
            len: LEN,
            align: DEFAULT_ALIGN as usize,
            seed: n as u8,
        };
        let off = live.add(ptr, block)?;
        live.fill(off, block)?;
    }
    Err(format!(
        "{most} blocks of {LEN} bytes fit in {HEAP_BYTES} bytes"
    ))
}

fn case_exhaustion(c: &mut Ctx) -> Result<(), String> {
    let mut live = Live::new(&c.heap);
    let first = fill_up(&mut live)?;
    if first == 0 {
        return Err("an empty heap of 8 MiB refused a 64 KiB block".into());
    }
    // Still usable when full: a refusal changes nothing.
    for (&off, &block) in &live.blocks {
        live.intact(off, block, block.len)?;
    }
    live.free_all()?;
    let stats = c.heap.stats().map_err(|e| e.to_string())?;
    if stats.live_allocations != 0 {
        return Err(format!(
            "{} allocations still live after every block was freed",
            stats.live_allocations
        ));
    }
    let second = fill_up(&mut live)?;
    live.free_all()?;
    if second < first {
        return Err(format!(
            "{first} blocks fitted, then only {second} after freeing them all"
        ));
    }
    Ok(())
}

fn case_bad_free(c: &mut Ctx) -> Result<(), String> {
    let heap = &c.heap;
    let outside = [0u8; 16];
    if heap.free(outside.as_ptr().cast_mut()).is_ok() {
        return Err("free of a pointer outside the heap was accepted".into());
    }
    let ptr = heap.malloc(256);
    if ptr.is_null() {
        return Err("malloc(256) failed in an empty heap".into());
    }
    heap.free(ptr)
        .map_err(|e| format!("free of a live block: {e}"))?;
    if heap.free(ptr).is_ok() {
        return Err("a second free of the same block was accepted".into());
    }
    // The refusals changed nothing.
    let again = heap.malloc(256);
    if again.is_null() {
        return Err("malloc(256) failed after the refused frees".into());
    }
    heap.free(again).map_err(|e| e.to_string())
}

/// Runs `cases` against memheap component `name` on this rank; `registry`
/// was opened with `name` selected. Ends with the job's collective
/// finalize.
pub fn run(
    name: &str,
    boot: Bootstrap,
    registry: &Registry,
    cases: &[(&'static str, Case)],
) -> Result<Tally, SetupError> {
    let heap = SymmetricHeap::with_size(registry, HEAP_BYTES).map_err(SetupError::Heap)?;
    if heap.component() != name {
        return Err(SetupError::NotServed {
            wanted: name.to_owned(),
            served_by: format!("the heap is served by {}", heap.component()),
        });
    }
    let (rank, size) = (boot.rank(), boot.size());
    let mut c = Ctx {
        boot,
        heap,
        rank,
        size,
    };
    let tally = run_cases(rank, &mut c, cases);
    c.boot.finalize().map_err(SetupError::Finalize)?;
    Ok(tally)
}
