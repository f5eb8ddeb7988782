//! Every rank runs the same fixed sequence of symmetric-heap calls
//! (malloc, calloc, align, realloc, free, then malloc until the heap is
//! full) and prints the offsets it got, so a test can check that they are
//! the same on every rank. Contents are checked along the way: calloc
//! zeroes, realloc keeps the data.
//!
//! ```text
//! fireopal run -n 2 target/debug/examples/memheap_offsets
//! FIREOPAL_MEMHEAP=ptmalloc fireopal run -n 2 --param symmetric_size=8m \
//!     target/debug/examples/memheap_offsets
//! ```
//!
//! Output, one line per rank:
//! `rank R component C size S offsets o1,o2,...,null,... full-after N`.

use std::process::ExitCode;

use fireopal::bootstrap::Bootstrap;
use fireopal::memheap::SymmetricHeap;
use fireopal::plugin::{Options, Registry};

/// xorshift64: the same pseudo-random sequence on every rank.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> usize {
        (self.next() % n) as usize
    }
}

/// A live block: address, length, fill byte.
struct Block {
    ptr: *mut u8,
    len: usize,
    byte: u8,
}

fn fill(b: &Block) {
    // SAFETY: `ptr` starts a live block of at least `len` bytes that only
    // this program uses.
    unsafe { std::ptr::write_bytes(b.ptr, b.byte, b.len) };
}

fn holds(ptr: *const u8, len: usize, byte: u8) -> bool {
    // SAFETY: as in `fill`; nothing writes the block while it is read.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
    bytes.iter().all(|&b| b == byte)
}

fn sequence(heap: &SymmetricHeap, rank: u32) -> Result<(Vec<Option<u64>>, usize), String> {
    let mut rng = XorShift(0x5EED_0F0F_1234_5678);
    let mut live: Vec<Block> = Vec::new();
    let mut offsets = Vec::new();
    // Rank-specific contents: the offsets must not depend on them.
    let mut byte = rank as u8;
    for step in 0..600 {
        byte = byte.wrapping_add(1);
        let size = match rng.below(6) {
            0 => 1 + rng.below(100_000),
            _ => 1 + rng.below(3000),
        };
        let op = if live.is_empty() { 0 } else { rng.below(10) };
        let got = match op {
            0..=2 => heap.malloc(size),
            3 => {
                let p = heap.calloc(size, 1);
                if !p.is_null() && !holds(p, size, 0) {
                    return Err(format!("step {step}: calloc memory is not zero"));
                }
                p
            }
            4 => heap.align(1 << rng.below(13), size),
            5 | 6 => {
                let b = live.swap_remove(rng.below(live.len() as u64));
                let p = heap.realloc(b.ptr, size);
                if p.is_null() {
                    live.push(b);
                } else if !holds(p, b.len.min(size), b.byte) {
                    return Err(format!("step {step}: realloc lost the contents"));
                }
                p
            }
            _ => {
                let b = live.swap_remove(rng.below(live.len() as u64));
                heap.free(b.ptr).map_err(|e| format!("step {step}: {e}"))?;
                continue;
            }
        };
        offsets.push(heap.offset_of(got));
        if !got.is_null() {
            let b = Block {
                ptr: got,
                len: size,
                byte,
            };
            fill(&b);
            live.push(b);
        }
    }
    for b in &live {
        if !holds(b.ptr, b.len, b.byte) {
            return Err("a block lost its contents".into());
        }
    }
    // Fill the heap up: the count must match too.
    let mut full_after = 0;
    while !heap.malloc(4096).is_null() {
        full_after += 1;
    }
    Ok((offsets, full_after))
}

fn run() -> Result<(), String> {
    let mut boot = Bootstrap::init().map_err(|e| e.to_string())?;
    let options = Options {
        job: boot.job_info(),
        ..Options::default()
    };
    let registry = Registry::open(&options).map_err(|e| e.to_string())?;
    let heap = SymmetricHeap::init(&registry, &options).map_err(|e| e.to_string())?;
    let (offsets, full_after) = sequence(&heap, boot.rank())?;
    let list: Vec<String> = offsets
        .iter()
        .map(|o| o.map_or_else(|| "null".to_owned(), |o| o.to_string()))
        .collect();
    println!(
        "rank {} component {} size {} offsets {} full-after {full_after}",
        boot.rank(),
        heap.component(),
        heap.len(),
        list.join(",")
    );
    boot.barrier().map_err(|e| e.to_string())?;
    boot.finalize().map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memheap_offsets: {e}");
            ExitCode::FAILURE
        }
    }
}
