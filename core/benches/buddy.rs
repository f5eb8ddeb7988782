//! Criterion bench: alloc+free pairs of symmetric-heap allocators.
//!
//! Compared in the same run, on a 64 MiB and a 16 GiB heap:
//! - `fireopal`: fireopal-core's `BuddyAllocator` (offsets only, side tables
//!   outside the heap);
//! - `buddy_system_allocator`: that crate's `Heap`, whose free lists live
//!   inside the heap, over a region reserved with `mmap(MAP_NORESERVE)` so
//!   only the pages it writes are backed;
//! - `ptmalloc`: the memheap plugin's dlmalloc-style allocator (through the
//!   plugin crate's rlib), chunk headers inside the heap, over the same
//!   kind of region.
//!
//! Three situations:
//! - `buddy_pair/<heap>`: a heap in use. Before measuring, every allocator
//!   receives the same 400 requests (sizes log-uniform in 64 B..256 KiB)
//!   and then frees every other one, so free blocks of many orders are
//!   scattered across the low part of the heap. Each iteration is one alloc
//!   and the free of that block, for one size or for the next size of a
//!   fixed random mix; `burst64` is 64 allocations of the mix (capped at
//!   64 KiB) then their 64 frees in allocation order, so that freed blocks
//!   pile up on fireopal's free caches and are not the block it handed out
//!   last.
//! - `buddy_pair_crowded/<heap>`: a heap holding many objects, as a
//!   symmetric heap of a real application does: 20 000 requests of 64 B to
//!   4 KiB, every other one freed, then the random mix. Free lists are long
//!   here, which is what a list-scanning allocator pays for.
//! - `buddy_pair_fresh/<heap>`: an empty heap, where a buddy allocator that
//!   merges at once splits the whole heap down to the block and merges it
//!   back at every pair (one step per order, so it grows with log2 of the
//!   heap size); with free caches only the first pair splits.
//!
//! Run: `cargo bench -p fireopal-core --bench buddy -- --warm-up-time 1 --measurement-time 3`

use std::alloc::Layout;
use std::hint::black_box;
use std::ptr::NonNull;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use fireopal_core::buddy::BuddyAllocator;
use fireopal_memheap_ptmalloc::{PtHeap, Segment};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const HEAPS: [(&str, u64); 2] = [("64MiB", 64 * MIB), ("16GiB", 16 * GIB)];
const SIZES: [u64; 8] = [
    64,
    256,
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
];
const ALIGN: u64 = 8;
/// Sizes in the random mix (a power of two, cycled by the bench).
const MIX_LEN: usize = 4096;
/// Blocks allocated, then freed, per iteration of the burst.
const BURST: usize = 64;

/// Which mixed-size benches a group runs besides the single sizes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mix {
    No,
    Pairs,
    WithBurst,
}

/// xorshift64*: deterministic sizes without a rand crate.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// `n` sizes, log-uniform from 64 B to 1 MiB.
fn mix_sizes(n: usize, seed: u64) -> Vec<u64> {
    let mut rng = XorShift(seed);
    (0..n)
        .map(|_| {
            let base = 64u64 << (rng.next() % 15);
            (base + rng.next() % base).min(MIB)
        })
        .collect()
}

/// What the bench needs from an allocator.
trait Pairs {
    fn alloc(&mut self, size: u64) -> Option<u64>;
    fn free(&mut self, at: u64, size: u64);
}

impl Pairs for BuddyAllocator {
    #[inline]
    fn alloc(&mut self, size: u64) -> Option<u64> {
        BuddyAllocator::alloc(self, size, ALIGN).ok()
    }

    #[inline]
    fn free(&mut self, at: u64, _size: u64) {
        let freed = BuddyAllocator::free(self, at);
        debug_assert!(freed.is_ok());
    }
}

/// An anonymous mapping reserved without swap backing, unmapped on drop.
struct Region {
    base: *mut libc::c_void,
    len: usize,
}

impl Region {
    /// Reserves `2 * size` bytes so that a `size`-aligned window fits.
    fn reserve(size: u64) -> Region {
        let len = usize::try_from(2 * size).expect("64-bit host");
        // SAFETY: an anonymous private mapping at an address of the kernel's
        // choice; no existing memory is affected.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED, "mmap of {len} bytes failed");
        Region { base, len }
    }

    /// First `align`-aligned address inside the region.
    fn aligned_start(&self, align: u64) -> usize {
        let a = usize::try_from(align).expect("64-bit host");
        (self.base as usize).next_multiple_of(a)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping made in `reserve`, and
        // the heap using it is dropped before (field order in `Bsa`).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// `buddy_system_allocator::Heap` over a reserved region.
struct Bsa {
    heap: buddy_system_allocator::Heap<40>,
    _region: Region,
}

impl Bsa {
    fn new(size: u64) -> Bsa {
        let region = Region::reserve(size);
        let start = region.aligned_start(size);
        let mut heap = buddy_system_allocator::Heap::<40>::new();
        // SAFETY: `[start, start + size)` lies inside the mapping (which is
        // twice as long), is readable and writable, and is given to this
        // heap only; the mapping outlives the heap (dropped after it).
        unsafe { heap.init(start, size as usize) };
        Bsa {
            heap,
            _region: region,
        }
    }

    fn layout(size: u64) -> Layout {
        Layout::from_size_align(size as usize, ALIGN as usize).expect("valid layout")
    }
}

impl Pairs for Bsa {
    #[inline]
    fn alloc(&mut self, size: u64) -> Option<u64> {
        let p = self.heap.alloc(Self::layout(size)).ok()?;
        Some(p.as_ptr() as u64)
    }

    #[inline]
    fn free(&mut self, at: u64, size: u64) {
        let p = NonNull::new(at as *mut u8).expect("allocated pointer");
        // SAFETY: `p` came from `alloc` on this heap with the same layout and
        // is freed once.
        unsafe { self.heap.dealloc(p, Self::layout(size)) };
    }
}

/// The `ptmalloc` memheap plugin's allocator (through its rlib) over a
/// reserved region: chunk headers inside the heap, as in the plugin.
struct Pt {
    heap: PtHeap,
    _region: Region,
}

impl Pt {
    fn new(size: u64) -> Pt {
        let region = Region::reserve(size);
        let start = region.aligned_start(4096);
        // SAFETY: `[start, start + size)` lies inside the mapping (twice as
        // long), is read-write, and is used by this heap only; the mapping
        // is dropped after the heap (field order).
        let segment = unsafe { Segment::new(start as *mut u8, size) };
        Pt {
            heap: PtHeap::new(segment),
            _region: region,
        }
    }
}

impl Pairs for Pt {
    #[inline]
    fn alloc(&mut self, size: u64) -> Option<u64> {
        self.heap.alloc(size, ALIGN).ok()
    }

    #[inline]
    fn free(&mut self, at: u64, _size: u64) {
        let freed = self.heap.free(at);
        debug_assert!(freed.is_ok());
    }
}

/// How a heap is filled before measuring: `count` requests of the random
/// mix capped at `cap` bytes, every other one then freed.
#[derive(Clone, Copy)]
struct Fill {
    count: usize,
    cap: u64,
}

/// 400 requests up to 256 KiB: about 30 MiB, so they fit the small heap.
const IN_USE: Fill = Fill {
    count: 400,
    cap: 256 << 10,
};
/// 20 000 requests up to 4 KiB: many objects, long free lists.
const CROWDED: Fill = Fill {
    count: 20_000,
    cap: 4 << 10,
};

/// Puts a heap "in use": the same requests on every allocator, then frees
/// every other one. Returns the blocks left live.
fn warm_up<P: Pairs>(p: &mut P, fill: Fill) -> Vec<(u64, u64)> {
    let blocks: Vec<(u64, u64)> = mix_sizes(fill.count, 0x5eed)
        .into_iter()
        .map(|size| size.min(fill.cap))
        .map(|size| (p.alloc(size).expect("warm-up fits the heap"), size))
        .collect();
    let mut live = Vec::new();
    for (i, (at, size)) in blocks.into_iter().enumerate() {
        if i % 2 == 0 {
            p.free(at, size);
        } else {
            live.push((at, size));
        }
    }
    live
}

fn bench_pairs<P: Pairs>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    p: &mut P,
    sizes: &[u64],
    mix: Mix,
) {
    for &size in sizes {
        group.bench_with_input(BenchmarkId::new(name, size), &size, |b, &size| {
            b.iter(|| {
                let at = p.alloc(black_box(size)).expect("room for one block");
                p.free(black_box(at), size);
            })
        });
    }
    if mix == Mix::WithBurst {
        let burst: Vec<u64> = mix_sizes(BURST, 0xb0b)
            .into_iter()
            .map(|size| size.min(64 << 10))
            .collect();
        let mut live = Vec::with_capacity(BURST);
        group.bench_function(BenchmarkId::new(name, "burst64"), |b| {
            b.iter(|| {
                for &size in &burst {
                    let at = p.alloc(black_box(size)).expect("room for the burst");
                    live.push((at, size));
                }
                for (at, size) in live.drain(..) {
                    p.free(black_box(at), size);
                }
            })
        });
    }
    if mix != Mix::No {
        let sizes = mix_sizes(MIX_LEN, 0xfeed);
        let mut i = 0usize;
        group.bench_function(BenchmarkId::new(name, "mix"), |b| {
            b.iter(|| {
                let size = sizes[i % MIX_LEN];
                i += 1;
                let at = p.alloc(black_box(size)).expect("room for one block");
                p.free(black_box(at), size);
            })
        });
    }
}

/// One criterion group: the three allocators on a heap of `heap` bytes, filled
/// with `fill` (or left empty), measured for `sizes` and the mix.
fn compare(c: &mut Criterion, name: &str, heap: u64, fill: Option<Fill>, sizes: &[u64], mix: Mix) {
    let mut group = c.benchmark_group(name);
    let mut ours = BuddyAllocator::new(heap).expect("heap tables");
    let _live = fill.map(|f| warm_up(&mut ours, f));
    bench_pairs(&mut group, "fireopal", &mut ours, sizes, mix);
    let mut theirs = Bsa::new(heap);
    let _live = fill.map(|f| warm_up(&mut theirs, f));
    bench_pairs(
        &mut group,
        "buddy_system_allocator",
        &mut theirs,
        sizes,
        mix,
    );
    drop(theirs);
    let mut pt = Pt::new(heap);
    let _live = fill.map(|f| warm_up(&mut pt, f));
    bench_pairs(&mut group, "ptmalloc", &mut pt, sizes, mix);
    group.finish();
}

fn bench_heap(c: &mut Criterion) {
    for (label, heap) in HEAPS {
        let in_use = Some(IN_USE);
        compare(
            c,
            &format!("buddy_pair/{label}"),
            heap,
            in_use,
            &SIZES,
            Mix::WithBurst,
        );
        let crowded = Some(CROWDED);
        compare(
            c,
            &format!("buddy_pair_crowded/{label}"),
            heap,
            crowded,
            &[],
            Mix::Pairs,
        );
        let fresh = [64, 4 << 10, 1 << 20];
        compare(
            c,
            &format!("buddy_pair_fresh/{label}"),
            heap,
            None,
            &fresh,
            Mix::No,
        );
    }
}

criterion_group!(benches, bench_heap);
criterion_main!(benches);
