//! Scenario tests of the buddy allocator: large and odd heap sizes,
//! exhaustion, realloc, error values, metadata cost.

use fireopal_core::buddy::{
    AllocError, BuddyAllocator, CacheLimits, CacheLimitsError, FreeBlock, FreeError, NewError,
    Realloc, ReallocError, Stats,
};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn blocks(heap: &BuddyAllocator) -> Vec<(u64, u64)> {
    heap.free_blocks()
        .map(|FreeBlock { offset, size }| (offset, size))
        .collect()
}

/// Flushes the free caches and lists the free blocks; the stats must not
/// change but for the cached bytes (they already count cached blocks as
/// merged).
fn flushed(heap: &mut BuddyAllocator) -> Vec<(u64, u64)> {
    let before = heap.stats();
    heap.flush();
    let expected = Stats {
        cached_bytes: 0,
        ..before
    };
    assert_eq!(heap.stats(), expected, "a flush changed the stats");
    assert_eq!(heap.cached_blocks().count(), 0);
    consistent(heap);
    blocks(heap)
}

fn consistent(heap: &BuddyAllocator) {
    if let Err(e) = heap.check_consistency() {
        panic!("{e}");
    }
}

/// xorshift64: deterministic test data without a rand crate.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn heap_of_four_gib_and_one_page_has_offsets_past_u32() {
    let mut heap = BuddyAllocator::new(4 * GIB + 4 * KIB).expect("heap");
    assert_eq!(blocks(&heap), [(0, 4 * GIB), (4 * GIB, 4 * KIB)]);
    assert_eq!(heap.stats().free_bytes, 4 * GIB + 4 * KIB);

    // Smallest fitting block first: the page past 4 GiB.
    let page = heap.alloc(4 * KIB, 1).expect("page");
    assert_eq!(page, 4 * GIB);
    let small = heap.alloc(64, 64).expect("small block");
    assert_eq!(small, 0);
    let high = heap.alloc(2 * GIB, 2 * GIB).expect("upper half");
    assert_eq!(high, 2 * GIB);
    assert!(high + 2 * GIB > u64::from(u32::MAX));
    assert_eq!(heap.block_size(high), Some(2 * GIB));
    consistent(&heap);

    assert_eq!(heap.free(page), Ok(4 * KIB));
    assert_eq!(heap.free(high), Ok(2 * GIB));
    assert_eq!(heap.free(small), Ok(64));
    assert_eq!(heap.stats().largest_free_block, 4 * GIB);
    assert_eq!(flushed(&mut heap), [(0, 4 * GIB), (4 * GIB, 4 * KIB)]);

    let whole = heap.alloc(4 * GIB, 1).expect("the 4 GiB block");
    assert_eq!(whole, 0);
    assert_eq!(heap.alloc(8 * KIB, 1), Err(AllocError::OutOfMemory));
    assert_eq!(heap.alloc(4 * KIB, 1), Ok(4 * GIB));
    assert_eq!(heap.alloc(1, 1), Err(AllocError::OutOfMemory));
    consistent(&heap);
}

#[test]
fn odd_heap_size_is_covered_by_maximal_aligned_blocks() {
    // 1000 minimum blocks (0b11_1110_1000) and 37 bytes that cannot be used.
    let size = 1000 * 64 + 37;
    let mut heap = BuddyAllocator::new(size).expect("heap");
    assert_eq!(heap.managed_bytes(), 64_000);
    let initial = blocks(&heap);
    assert_eq!(
        initial,
        [
            (0, 32 * KIB),
            (32 * KIB, 16 * KIB),
            (48 * KIB, 8 * KIB),
            (56 * KIB, 4 * KIB),
            (60 * KIB, 2 * KIB),
            (62 * KIB, 512),
        ]
    );

    // Every minimum block can be handed out, once.
    let mut offsets: Vec<u64> = (0..1000)
        .map(|_| heap.alloc(64, 1).expect("a minimum block"))
        .collect();
    assert_eq!(heap.alloc(1, 1), Err(AllocError::OutOfMemory));
    offsets.sort_unstable();
    assert!(offsets.iter().enumerate().all(|(i, &o)| o == i as u64 * 64));
    assert_eq!(heap.stats().free_bytes, 0);
    assert_eq!(heap.free(64_000), Err(FreeError::OutOfRange));
    consistent(&heap);

    for o in offsets {
        heap.free(o).expect("live block");
    }
    assert_eq!(flushed(&mut heap), initial);
    consistent(&heap);
}

#[test]
fn sizes_round_up_to_a_power_of_two_of_min_blocks() {
    let mut heap = BuddyAllocator::new(MIB).expect("heap");
    for (size, block) in [
        (1, 64),
        (64, 64),
        (65, 128),
        (100, 128),
        (3000, 4096),
        (4097, 8192),
        (300_000, 512 * KIB),
    ] {
        let at = heap.alloc(size, 1).expect("fits");
        assert_eq!(heap.block_size(at), Some(block), "size {size}");
        assert_eq!(at % block, 0, "blocks are aligned to their size");
        heap.free(at).expect("live");
    }
    // Alignment above the size asks for a block of the alignment.
    let at = heap.alloc(64, 16 * KIB).expect("fits");
    assert_eq!(heap.block_size(at), Some(16 * KIB));
    assert_eq!(at % (16 * KIB), 0);
    assert_eq!(heap.alloc(1, 2 * MIB), Err(AllocError::OutOfMemory));
}

#[test]
fn exhaustion_is_an_error_and_the_heap_works_afterwards() {
    let mut heap = BuddyAllocator::new(8 * MIB + 3 * KIB).expect("heap");
    let initial = blocks(&heap);
    let mut rng = XorShift(0x1234_5678);
    let mut live = Vec::new();
    let mut failures = 0;
    // Random sizes until several requests in a row fail.
    while failures < 20 {
        let size = 64 << rng.below(14);
        match heap.alloc(size, 1) {
            Ok(at) => {
                live.push(at);
                failures = 0;
            }
            Err(e) => {
                assert_eq!(e, AllocError::OutOfMemory);
                failures += 1;
            }
        }
    }
    let full = heap.stats();
    assert!(full.free_bytes < 64 * KIB, "heap nearly full: {full:?}");
    assert_eq!(full.live_blocks, live.len() as u64);
    // A failed request changes nothing.
    assert_eq!(heap.alloc(4 * MIB, 1), Err(AllocError::OutOfMemory));
    assert_eq!(heap.stats(), full);
    consistent(&heap);

    // Free every other block; the heap serves requests again.
    let mut kept = Vec::new();
    for (i, at) in live.into_iter().enumerate() {
        if i % 2 == 0 {
            heap.free(at).expect("live");
        } else {
            kept.push(at);
        }
    }
    let largest = heap.stats().largest_free_block;
    assert!(largest >= 64);
    let again = heap
        .alloc(largest, 1)
        .expect("largest free block is usable");
    kept.push(again);
    consistent(&heap);
    for at in kept {
        heap.free(at).expect("live");
    }
    assert_eq!(flushed(&mut heap), initial);
}

#[test]
fn realloc_shrinks_in_place_and_frees_the_tail() {
    let mut heap = BuddyAllocator::new(MIB).expect("heap");
    let big = heap.alloc(64 * KIB, 1).expect("fits");
    assert_eq!(
        heap.realloc(big, 5 * KIB, 1),
        Ok(Realloc::InPlace {
            offset: big,
            block_size: 8 * KIB
        })
    );
    assert_eq!(heap.block_size(big), Some(8 * KIB));
    // Shrinking below a chunk (4 KiB) moves the block to the small tier.
    assert_eq!(
        heap.realloc(big, 100, 1),
        Ok(Realloc::InPlace {
            offset: big,
            block_size: 128
        })
    );
    assert_eq!(heap.stats().free_bytes, MIB - 128);
    // The freed tail is usable right away, next to the block.
    assert_eq!(heap.alloc(128, 1), Ok(big + 128));
    consistent(&heap);
}

#[test]
fn realloc_grows_in_place_into_free_buddies() {
    let mut heap = BuddyAllocator::new(MIB).expect("heap");
    let a = heap.alloc(64, 1).expect("fits");
    // Its buddies up to 16 KiB are free: grows in place, across the
    // small/large boundary.
    assert_eq!(
        heap.realloc(a, 1000, 1),
        Ok(Realloc::InPlace {
            offset: a,
            block_size: 1024
        })
    );
    assert_eq!(
        heap.realloc(a, 16 * KIB, 1),
        Ok(Realloc::InPlace {
            offset: a,
            block_size: 16 * KIB
        })
    );
    assert_eq!(heap.stats().live_bytes, 16 * KIB);
    consistent(&heap);
}

#[test]
fn realloc_moves_when_the_buddy_is_taken() {
    let mut heap = BuddyAllocator::new(MIB).expect("heap");
    let a = heap.alloc(1024, 1).expect("fits");
    let b = heap.alloc(1024, 1).expect("fits");
    assert_eq!(b, a + 1024);
    let moved = heap.realloc(a, 1500, 1).expect("room elsewhere");
    let Realloc::Moved { old, new, copy_len } = moved else {
        panic!("expected a move, got {moved:?}");
    };
    assert_eq!((old, copy_len), (a, 1024));
    assert_eq!(new, 2048, "lowest free 2 KiB block");
    assert_eq!(heap.block_size(new), Some(2048));
    // The old block is free again.
    assert_eq!(heap.free(a), Err(FreeError::DoubleFree));
    // A larger alignment than the block has also moves it.
    let moved = heap.realloc(b, 1024, 64 * KIB).expect("room");
    assert!(matches!(moved, Realloc::Moved { old, copy_len: 1024, .. } if old == b));
    assert_eq!(moved.offset() % (64 * KIB), 0);
    consistent(&heap);
}

#[test]
fn realloc_errors_leave_the_block_alone() {
    let mut heap = BuddyAllocator::new(64 * KIB).expect("heap");
    let a = heap.alloc(32 * KIB, 1).expect("fits");
    let b = heap.alloc(16 * KIB, 1).expect("fits");
    let before = heap.stats();
    assert_eq!(heap.realloc(a, 0, 1), Err(ReallocError::ZeroSize));
    assert_eq!(heap.realloc(a, 10, 3), Err(ReallocError::InvalidAlignment));
    assert_eq!(heap.realloc(a, 40 * KIB, 1), Err(ReallocError::OutOfMemory));
    assert_eq!(
        heap.realloc(a + 64, 10, 1),
        Err(ReallocError::Offset(FreeError::InvalidOffset))
    );
    assert_eq!(
        heap.realloc(48 * KIB, 10, 1),
        Err(ReallocError::Offset(FreeError::DoubleFree))
    );
    assert_eq!(heap.stats(), before);
    assert_eq!(heap.block_size(a), Some(32 * KIB));
    assert_eq!(heap.block_size(b), Some(16 * KIB));
    consistent(&heap);
}

/// A heap simulated in a `Vec<u8>`: the caller copies on `Moved`, as the
/// host will with real memory, and contents survive every realloc.
#[test]
fn realloc_with_copy_keeps_contents() {
    const HEAP: u64 = 256 * KIB;
    let mut heap = BuddyAllocator::new(HEAP).expect("heap");
    let mut memory = vec![0u8; HEAP as usize];
    let mut rng = XorShift(0xC0FF_EE00);
    // Live objects: (offset, size asked, fill byte).
    let mut objects: Vec<(u64, u64, u8)> = Vec::new();
    let mut moves = 0;
    let mut in_place = 0;
    for step in 0..3000u32 {
        let choice = rng.below(10);
        if objects.is_empty() || choice < 4 {
            let size = 1 + rng.below(4 * KIB);
            if let Ok(at) = heap.alloc(size, 8) {
                let fill = (step % 251) as u8 + 1;
                memory[at as usize..(at + size) as usize].fill(fill);
                objects.push((at, size, fill));
            }
        } else if choice < 6 {
            let i = rng.below(objects.len() as u64) as usize;
            let (at, _, _) = objects.swap_remove(i);
            heap.free(at).expect("live object");
        } else {
            let i = rng.below(objects.len() as u64) as usize;
            let (at, size, fill) = objects[i];
            let new_size = 1 + rng.below(8 * KIB);
            let new_at = match heap.realloc(at, new_size, 8) {
                Ok(Realloc::InPlace { offset, .. }) => {
                    assert_eq!(offset, at);
                    in_place += 1;
                    offset
                }
                Ok(Realloc::Moved { old, new, copy_len }) => {
                    assert_eq!(old, at);
                    assert_eq!(copy_len, heap_block_of(size).min(new_size));
                    let (old, new, len) = (old as usize, new as usize, copy_len as usize);
                    assert!(old + len <= new || new + len <= old, "blocks overlap");
                    memory.copy_within(old..old + len, new);
                    moves += 1;
                    new as u64
                }
                Err(ReallocError::OutOfMemory) => continue,
                Err(e) => panic!("unexpected {e:?}"),
            };
            let kept = size.min(new_size);
            let region = &memory[new_at as usize..(new_at + kept) as usize];
            assert!(
                region.iter().all(|&b| b == fill),
                "contents lost at step {step}"
            );
            // The program then writes the grown part.
            memory[new_at as usize..(new_at + new_size) as usize].fill(fill);
            objects[i] = (new_at, new_size, fill);
        }
        if step % 200 == 0 {
            consistent(&heap);
            for &(at, size, fill) in &objects {
                let region = &memory[at as usize..(at + size) as usize];
                assert!(region.iter().all(|&b| b == fill), "object at {at} damaged");
            }
        }
    }
    assert!(
        moves > 50 && in_place > 50,
        "moves {moves}, in place {in_place}"
    );
}

/// Block size serving `size` bytes with 64 B minimum blocks.
fn heap_block_of(size: u64) -> u64 {
    size.next_power_of_two().max(64)
}

#[test]
fn errors_are_values_and_change_nothing() {
    let mut heap = BuddyAllocator::new(MIB).expect("heap");
    let a = heap.alloc(4 * KIB, 1).expect("fits");
    let s = heap.alloc(128, 1).expect("fits");
    let before = heap.stats();
    let free_before = blocks(&heap);

    assert_eq!(heap.alloc(0, 1), Err(AllocError::ZeroSize));
    assert_eq!(heap.alloc(0, 3), Err(AllocError::ZeroSize));
    assert_eq!(heap.alloc(10, 0), Err(AllocError::InvalidAlignment));
    assert_eq!(heap.alloc(10, 24), Err(AllocError::InvalidAlignment));
    assert_eq!(heap.alloc(u64::MAX, 1), Err(AllocError::OutOfMemory));
    assert_eq!(heap.alloc(1, 1 << 63), Err(AllocError::OutOfMemory));

    assert_eq!(heap.free(MIB), Err(FreeError::OutOfRange));
    assert_eq!(heap.free(u64::MAX), Err(FreeError::OutOfRange));
    assert_eq!(heap.free(a + 1), Err(FreeError::InvalidOffset));
    assert_eq!(heap.free(a + 64), Err(FreeError::InvalidOffset));
    assert_eq!(heap.free(s + 64), Err(FreeError::InvalidOffset));
    // Inside a large free block, at a chunk boundary and inside a chunk.
    assert_eq!(heap.free(512 * KIB), Err(FreeError::DoubleFree));
    assert_eq!(heap.free(512 * KIB + 128), Err(FreeError::DoubleFree));
    assert_eq!(heap.free(s + 128), Err(FreeError::DoubleFree));

    assert_eq!(heap.stats(), before);
    assert_eq!(blocks(&heap), free_before);
    assert_eq!(heap.free(s), Ok(128));
    assert_eq!(heap.free(s), Err(FreeError::DoubleFree));
    assert_eq!(heap.free(a), Ok(4 * KIB));
    assert_eq!(heap.free(a), Err(FreeError::DoubleFree));
    assert_eq!(flushed(&mut heap), [(0, MIB)]);
}

#[test]
fn minimum_block_is_configurable() {
    assert_eq!(
        BuddyAllocator::with_min_block(MIB, 0).err(),
        Some(NewError::InvalidMinBlock)
    );
    assert_eq!(
        BuddyAllocator::with_min_block(MIB, 96).err(),
        Some(NewError::InvalidMinBlock)
    );
    let mut heap = BuddyAllocator::with_min_block(MIB, 4096).expect("heap");
    assert_eq!(heap.min_block(), 4096);
    let a = heap.alloc(1, 1).expect("fits");
    assert_eq!(heap.block_size(a), Some(4096));
    assert_eq!(heap.free(a + 64), Err(FreeError::InvalidOffset));
    let mut bytes = BuddyAllocator::with_min_block(1000, 1).expect("heap");
    let mut offsets: Vec<u64> = (0..1000)
        .map(|_| bytes.alloc(1, 1).expect("fits"))
        .collect();
    // Smallest free block first: the 8-byte root at 992 goes first.
    assert_eq!(offsets[..2], [992, 993]);
    offsets.sort_unstable();
    assert!(offsets.iter().enumerate().all(|(i, &o)| o == i as u64));
    assert_eq!(bytes.alloc(1, 1), Err(AllocError::OutOfMemory));
    // A heap smaller than one minimum block manages nothing.
    let mut empty = BuddyAllocator::new(63).expect("heap");
    assert_eq!(empty.managed_bytes(), 0);
    assert_eq!(empty.alloc(1, 1), Err(AllocError::OutOfMemory));
    assert_eq!(empty.free(0), Err(FreeError::OutOfRange));
    assert_eq!(empty.stats().largest_free_block, 0);
}

#[test]
fn same_calls_give_same_offsets_on_every_instance() {
    // As on every process of a job: two allocators, one call sequence.
    let run = || {
        let mut heap = BuddyAllocator::new(64 * MIB + 5 * KIB).expect("heap");
        let mut rng = XorShift(42);
        let mut live = Vec::new();
        let mut trace = Vec::new();
        for _ in 0..5000 {
            if live.is_empty() || rng.below(3) != 0 {
                let log = 6 + rng.below(15);
                let size = 1 + rng.below(1 << log);
                let align = 1 << rng.below(13);
                let got = heap.alloc(size, align);
                if let Ok(at) = got {
                    live.push(at);
                }
                trace.push(got.map_err(|e| e.to_string()));
            } else {
                let at = live.swap_remove(rng.below(live.len() as u64) as usize);
                trace.push(heap.free(at).map_err(|e| e.to_string()));
            }
        }
        let cached: Vec<FreeBlock> = heap.cached_blocks().collect();
        (trace, blocks(&heap), cached, flushed(&mut heap))
    };
    assert_eq!(run(), run());
}

/// Metadata formula of the module documentation, for a heap of `n` minimum
/// blocks with `groups` small-block groups created: about 2.15 bytes per
/// chunk plus 1 KiB per group, plus the free-cache stacks (32 offsets of
/// 8 bytes per order).
fn formula(n: u64, groups: u64) -> f64 {
    let chunks = n.div_ceil(64) as f64;
    let orders = f64::from(u64::BITS - n.leading_zeros());
    chunks * (1.0 + 2.0 / 8.0 + 6.0 / 8.0 + 8.0 / 64.0) * (1.0 + 1.0 / 63.0)
        + 1024.0 * groups as f64
        + 256.0 * orders
}

#[test]
fn metadata_follows_the_documented_formula() {
    for size in [64 * MIB, GIB + 12_345, 16 * GIB] {
        let heap = BuddyAllocator::new(size).expect("heap");
        let measured = heap.metadata_bytes() as f64;
        let expected = formula(size / 64, 0);
        // Within 1 % plus the fixed part (struct, one word per level).
        assert!(
            (measured - expected).abs() <= expected / 100.0 + 4096.0,
            "{size}: measured {measured}, formula {expected}"
        );
    }
    let heap = BuddyAllocator::new(16 * GIB).expect("heap");
    let fraction = heap.metadata_bytes() as f64 / (16 * GIB) as f64;
    assert!(
        fraction < 0.0006,
        "fresh 16 GiB heap: {:.4} %",
        fraction * 100.0
    );
}

#[test]
fn metadata_worst_case_stays_under_half_a_percent() {
    // Put one small block in every 256 KiB region of a 16 GiB heap, so every
    // group of small-block words exists: fill the heap with 256 KiB blocks,
    // then shrink each in place to 64 B.
    let mut heap = BuddyAllocator::new(16 * GIB).expect("heap");
    let regions = 16 * GIB / (256 * KIB);
    for _ in 0..regions {
        let at = heap.alloc(256 * KIB, 1).expect("fits");
        let shrunk = heap.realloc(at, 64, 1).expect("shrinks");
        assert_eq!(
            shrunk,
            Realloc::InPlace {
                offset: at,
                block_size: 64
            }
        );
    }
    assert_eq!(heap.stats().live_blocks, regions);
    let measured = heap.metadata_bytes() as f64;
    let expected = formula(16 * GIB / 64, regions);
    assert!(
        (measured - expected).abs() <= expected / 100.0 + 4096.0,
        "measured {measured}, formula {expected}"
    );
    let fraction = measured / (16 * GIB) as f64;
    assert!(fraction < 0.0045, "worst case: {:.4} %", fraction * 100.0);
}

#[test]
fn allocator_is_send() {
    fn assert_send<T: Send>() {}
    assert_send::<BuddyAllocator>();
}

#[test]
fn freed_blocks_come_back_newest_first_without_merging() {
    let mut heap = BuddyAllocator::new(MIB).expect("heap");
    let a = heap.alloc(64, 1).expect("fits");
    let b = heap.alloc(64, 1).expect("fits");
    let big = heap.alloc(8 * KIB, 1).expect("fits");
    assert_eq!((a, b), (0, 64));
    let tables = blocks(&heap);
    assert_eq!(heap.free(a), Ok(64));
    assert_eq!(heap.free(b), Ok(64));
    assert_eq!(heap.free(big), Ok(8 * KIB));
    // Nothing merged: the tables still see the three blocks as taken.
    assert_eq!(blocks(&heap), tables);
    assert_eq!(
        heap.cached_blocks().collect::<Vec<_>>(),
        [
            FreeBlock {
                offset: a,
                size: 64
            },
            FreeBlock {
                offset: b,
                size: 64
            },
            FreeBlock {
                offset: big,
                size: 8 * KIB
            },
        ]
    );
    let stats = heap.stats();
    assert_eq!(
        (stats.free_bytes, stats.live_blocks, stats.live_bytes),
        (MIB, 0, 0)
    );
    assert_eq!(stats.cached_bytes, 8 * KIB + 128);
    assert_eq!(stats.largest_free_block, MIB);
    consistent(&heap);
    // Same order: newest first. Another order does not take them.
    assert_eq!(heap.alloc(100, 1), Ok(128));
    assert_eq!(heap.alloc(64, 1), Ok(b));
    assert_eq!(heap.alloc(1, 64), Ok(a));
    assert_eq!(heap.alloc(5000, 1), Ok(big));
    assert_eq!(heap.stats().cached_bytes, 0);
    consistent(&heap);
}

#[test]
fn a_pair_on_an_empty_heap_splits_once() {
    for size in [64, 4 * KIB, MIB] {
        let mut heap = BuddyAllocator::new(16 * GIB).expect("heap");
        let first = heap.alloc(size, 8).expect("fits");
        let split = blocks(&heap);
        heap.free(first).expect("live");
        for _ in 0..100 {
            let at = heap.alloc(size, 8).expect("fits");
            assert_eq!(at, first);
            heap.free(at).expect("live");
            // The split stays: the block only goes to and from the cache.
            assert_eq!(blocks(&heap), split);
        }
        assert_eq!(heap.stats().largest_free_block, 16 * GIB);
        assert_eq!(flushed(&mut heap), [(0, 16 * GIB)]);
    }
}

#[test]
fn cached_blocks_are_free_space_for_every_check() {
    let mut heap = BuddyAllocator::new(MIB).expect("heap");
    let small = heap.alloc(256, 1).expect("fits");
    let big = heap.alloc(16 * KIB, 1).expect("fits");
    let keep = heap.alloc(64, 1).expect("fits");
    heap.free(small).expect("live");
    heap.free(big).expect("live");
    for at in [small, big] {
        assert_eq!(heap.free(at), Err(FreeError::DoubleFree));
        assert_eq!(heap.block_size(at), None);
        assert_eq!(
            heap.realloc(at, 64, 1),
            Err(ReallocError::Offset(FreeError::DoubleFree))
        );
    }
    // Inside a cached block: free space too, in both tiers.
    assert_eq!(heap.free(small + 64), Err(FreeError::DoubleFree));
    assert_eq!(heap.free(big + 4 * KIB), Err(FreeError::DoubleFree));
    assert_eq!(heap.free(big + 4 * KIB + 64), Err(FreeError::DoubleFree));
    assert_eq!(heap.free(big + 64), Err(FreeError::DoubleFree));
    // Inside a live block: still an invalid offset.
    assert_eq!(heap.block_size(keep), Some(64));
    assert_eq!(heap.free(keep + 1), Err(FreeError::InvalidOffset));
    consistent(&heap);
}

#[test]
fn exhaustion_flushes_the_caches_before_failing() {
    let mut heap = BuddyAllocator::new(256 * KIB).expect("heap");
    // Every minimum block, then all freed: they sit in caches or merged.
    let offsets: Vec<u64> = (0..4096)
        .map(|_| heap.alloc(64, 1).expect("a minimum block"))
        .collect();
    assert_eq!(heap.alloc(1, 1), Err(AllocError::OutOfMemory));
    for at in offsets {
        heap.free(at).expect("live");
    }
    assert!(heap.stats().cached_bytes > 0);
    assert_eq!(heap.stats().largest_free_block, 256 * KIB);
    // The whole heap fits once the caches are merged back.
    assert_eq!(heap.alloc(256 * KIB, 1), Ok(0));
    assert_eq!(heap.stats().cached_bytes, 0);
    assert_eq!(heap.alloc(64, 1), Err(AllocError::OutOfMemory));
    heap.free(0).expect("live");
    assert_eq!(flushed(&mut heap), [(0, 256 * KIB)]);
}

#[test]
fn cache_bounds_merge_the_oldest_block_or_everything() {
    let mut heap = BuddyAllocator::new(MIB).expect("heap");
    assert_eq!(heap.cache_limits(), CacheLimits::for_heap(MIB));
    let limits = CacheLimits {
        blocks_per_order: 2,
        max_bytes: 24 * KIB,
    };
    assert_eq!(heap.set_cache_limits(limits), Ok(()));
    assert_eq!(heap.cache_limits(), limits);
    let small: Vec<u64> = (0..3).map(|_| heap.alloc(64, 1).expect("fits")).collect();
    let big: Vec<u64> = (0..3)
        .map(|_| heap.alloc(16 * KIB, 1).expect("fits"))
        .collect();
    let huge = heap.alloc(64 * KIB, 1).expect("fits");
    let listed = |heap: &BuddyAllocator| heap.cached_blocks().map(|b| b.offset).collect::<Vec<_>>();
    heap.free(small[0]).expect("live");
    heap.free(small[1]).expect("live");
    assert_eq!(listed(&heap), [small[0], small[1]]);
    // The third block of an order merges the oldest one first.
    heap.free(small[2]).expect("live");
    assert_eq!(listed(&heap), [small[1], small[2]]);
    heap.free(big[0]).expect("live");
    assert_eq!(listed(&heap), [small[1], small[2], big[0]]);
    assert_eq!(heap.stats().cached_bytes, 16 * KIB + 128);
    // 16 KiB more would pass 24 KiB: everything is merged first.
    heap.free(big[1]).expect("live");
    assert_eq!(listed(&heap), [big[1]]);
    // Above the byte bound: merged at once, nothing else flushed.
    heap.free(huge).expect("live");
    assert_eq!(listed(&heap), [big[1]]);
    heap.free(big[2]).expect("live");
    assert_eq!(listed(&heap), [big[2]]);
    consistent(&heap);
    assert_eq!(flushed(&mut heap), [(0, MIB)]);
    // Refused limits leave the old ones.
    let too_deep = CacheLimits {
        blocks_per_order: CacheLimits::MAX_BLOCKS_PER_ORDER + 1,
        max_bytes: MIB,
    };
    assert_eq!(
        heap.set_cache_limits(too_deep),
        Err(CacheLimitsError::TooManyBlocks)
    );
    assert_eq!(heap.cache_limits(), limits);
}

#[test]
fn caches_off_merge_every_free_at_once() {
    let mut heap = BuddyAllocator::new(MIB + 4 * KIB).expect("heap");
    assert_eq!(heap.set_cache_limits(CacheLimits::OFF), Ok(()));
    let initial = blocks(&heap);
    let mut rng = XorShift(7);
    let live: Vec<u64> = (0..100)
        .map(|_| heap.alloc(1 + rng.below(4 * KIB), 1).expect("fits"))
        .collect();
    for at in live {
        heap.free(at).expect("live");
        assert_eq!(heap.cached_blocks().count(), 0);
    }
    assert_eq!(blocks(&heap), initial);
    consistent(&heap);
}

#[test]
fn stats_count_cached_blocks_as_merged() {
    let mut heap = BuddyAllocator::new(MIB).expect("heap");
    let a = heap.alloc(64, 1).expect("fits");
    let b = heap.alloc(64, 1).expect("fits");
    let c = heap.alloc(128, 1).expect("fits");
    let d = heap.alloc(256 * KIB, 1).expect("fits");
    assert_eq!((a, b, c, d), (0, 64, 128, 256 * KIB));
    heap.free(a).expect("live");
    heap.free(c).expect("live");
    // `b` keeps both from merging; the upper half is still the largest.
    assert_eq!(heap.stats().largest_free_block, 512 * KIB);
    heap.free(d).expect("live");
    assert_eq!(heap.stats().largest_free_block, 512 * KIB);
    // With `b` gone, a, b, c and d merge with the free blocks around them.
    heap.free(b).expect("live");
    assert_eq!(heap.stats().largest_free_block, MIB);
    assert_eq!(flushed(&mut heap), [(0, MIB)]);
}

#[test]
fn free_after_realloc_uses_the_new_size() {
    let mut heap = BuddyAllocator::new(MIB).expect("heap");
    // In place: the block handed out last changes size before its free.
    let a = heap.alloc(64, 1).expect("fits");
    assert!(matches!(
        heap.realloc(a, 1000, 1),
        Ok(Realloc::InPlace {
            block_size: 1024,
            ..
        })
    ));
    assert_eq!(heap.free(a), Ok(1024));
    assert_eq!(heap.free(a), Err(FreeError::DoubleFree));
    // Moved: the old offset is free, the new one is the live block.
    let b = heap.alloc(64, 1).expect("fits");
    let c = heap.alloc(64, 1).expect("fits");
    let moved = heap.realloc(b, 4096, 1).expect("room");
    let Realloc::Moved { old, new, .. } = moved else {
        panic!("expected a move, got {moved:?}");
    };
    assert_eq!(old, b);
    assert_eq!(heap.free(b), Err(FreeError::DoubleFree));
    assert_eq!(heap.free(new), Ok(4096));
    assert_eq!(heap.free(c), Ok(64));
    consistent(&heap);
    assert_eq!(flushed(&mut heap), [(0, MIB)]);
}

/// A block handed out from a free cache stays in its slot until it is
/// freed or something else changes the caches (see the `cache` module): every
/// reading method must see it as live, and every change must settle it.
#[test]
fn block_lent_from_a_cache_is_live_until_given_back() {
    let mut heap = BuddyAllocator::new(MIB).expect("heap tables");
    let a = heap.alloc(4 * KIB, 8).expect("room");
    let b = heap.alloc(4 * KIB, 8).expect("room");
    heap.free(a).expect("live");
    heap.free(b).expect("live");
    let cached = |heap: &BuddyAllocator| -> Vec<u64> {
        heap.cached_blocks().map(|block| block.offset).collect()
    };
    assert_eq!(cached(&heap), [a, b]);
    let idle = heap.stats();

    // Newest first; while out, it is live and not cached for every reader.
    let c = heap.alloc(4 * KIB, 8).expect("cached block");
    assert_eq!(c, b);
    assert_eq!(cached(&heap), [a]);
    assert_eq!(heap.block_size(c), Some(4 * KIB));
    let out = heap.stats();
    assert_eq!(out.cached_bytes, 4 * KIB);
    assert_eq!(out.live_blocks, idle.live_blocks + 1);
    assert_eq!(out.free_bytes, idle.free_bytes - 4 * KIB);
    consistent(&heap);

    // Given back: exactly as before, and a second free is a double free.
    assert_eq!(heap.free(c), Ok(4 * KIB));
    assert_eq!(cached(&heap), [a, b]);
    assert_eq!(heap.stats(), idle);
    assert_eq!(heap.free(c), Err(FreeError::DoubleFree));

    // Out again, then another allocation: the first loan is settled and the
    // older cached block is lent next.
    let d = heap.alloc(4 * KIB, 8).expect("cached block");
    let e = heap.alloc(4 * KIB, 8).expect("cached block");
    assert_eq!((d, e), (b, a));
    assert!(cached(&heap).is_empty());
    consistent(&heap);
    // Freed out of order: `d` is not the block handed out last.
    assert_eq!(heap.free(d), Ok(4 * KIB));
    assert_eq!(cached(&heap), [b]);
    assert_eq!(heap.free(e), Ok(4 * KIB));
    assert_eq!(cached(&heap), [b, a]);
    assert_eq!(heap.stats(), idle);

    // Out, then resized: realloc settles the loan before it changes the
    // record of the last block, so freeing the new block caches it anew.
    let f = heap.alloc(4 * KIB, 8).expect("cached block");
    assert_eq!(f, a);
    let moved = heap.realloc(f, 16 * KIB, 8).expect("room to grow");
    // Its buddy `b` is cached, not free: the block moves and the old one is
    // cached as a freed block.
    assert!(matches!(moved, Realloc::Moved { old, .. } if old == a));
    assert_eq!(cached(&heap), [b, a]);
    heap.free(moved.offset()).expect("live");
    consistent(&heap);
    assert_eq!(heap.free(moved.offset()), Err(FreeError::DoubleFree));

    // Out, then flushed: the lent block stays live and is not merged.
    let g = heap.alloc(4 * KIB, 8).expect("cached block");
    heap.flush();
    assert!(cached(&heap).is_empty());
    assert_eq!(heap.block_size(g), Some(4 * KIB));
    consistent(&heap);
    assert_eq!(heap.free(g), Ok(4 * KIB));
    assert_eq!(cached(&heap), [g]);
    flushed(&mut heap);
    assert_eq!(blocks(&heap), [(0, MIB)]);
}
