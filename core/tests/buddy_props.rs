//! Property tests of the buddy allocator against a plain model.
//!
//! The model is the textbook buddy system (a sorted set of free blocks per
//! order, a map of live blocks) with the same documented policy: smallest
//! fitting order first, lowest offset within an order, eager merging. Every
//! call must give the same answer from both, and the heap-level properties
//! (no overlap, inside the heap, aligned, full coalescing, determinism) are
//! checked on the allocator's own answers.

use std::collections::{BTreeMap, BTreeSet};

use fireopal_core::buddy::{
    AllocError, BuddyAllocator, FreeBlock, FreeError, Realloc, ReallocError, Stats,
};
use proptest::prelude::*;

/// Textbook buddy system over unit offsets.
struct Model {
    heap_size: u64,
    shift: u32,
    units: u64,
    free: Vec<BTreeSet<u64>>,
    live: BTreeMap<u64, u32>,
}

impl Model {
    fn new(heap_size: u64, min_block: u64) -> Self {
        let shift = min_block.trailing_zeros();
        let units = heap_size >> shift;
        let mut free = vec![BTreeSet::new(); 64];
        let mut start = 0;
        for k in (0..64).rev() {
            if units >> k & 1 == 1 {
                free[k].insert(start);
                start += 1 << k;
            }
        }
        Self {
            heap_size,
            shift,
            units,
            free,
            live: BTreeMap::new(),
        }
    }

    fn order_for(&self, size: u64, align: u64) -> Result<u32, AllocError> {
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        if align == 0 || align & (align - 1) != 0 {
            return Err(AllocError::InvalidAlignment);
        }
        let units = (u128::from(size) + (1u128 << self.shift) - 1) >> self.shift;
        let mut order = 0;
        while (1u128 << order) < units {
            order += 1;
        }
        let align_units = (u128::from(align) >> self.shift).max(1);
        while (1u128 << order) < align_units {
            order += 1;
        }
        if order >= 64 {
            return Err(AllocError::OutOfMemory);
        }
        Ok(order)
    }

    fn alloc_order(&mut self, order: u32) -> Result<u64, AllocError> {
        for j in order as usize..64 {
            if let Some(&s) = self.free[j].first() {
                self.free[j].remove(&s);
                for i in (order as usize..j).rev() {
                    self.free[i].insert(s + (1 << i));
                }
                self.live.insert(s, order);
                return Ok(s << self.shift);
            }
        }
        Err(AllocError::OutOfMemory)
    }

    fn alloc(&mut self, size: u64, align: u64) -> Result<u64, AllocError> {
        let order = self.order_for(size, align)?;
        self.alloc_order(order)
    }

    fn locate(&self, offset: u64) -> Result<(u64, u32), FreeError> {
        if offset >= self.units << self.shift {
            return Err(FreeError::OutOfRange);
        }
        if offset % (1 << self.shift) != 0 {
            return Err(FreeError::InvalidOffset);
        }
        let u = offset >> self.shift;
        match self.live.range(..=u).next_back() {
            Some((&s, &k)) if u < s + (1 << k) => {
                if s == u {
                    Ok((s, k))
                } else {
                    Err(FreeError::InvalidOffset)
                }
            }
            _ => Err(FreeError::DoubleFree),
        }
    }

    fn release(&mut self, mut s: u64, mut k: u32) {
        self.live.remove(&s);
        while self.free[k as usize].remove(&(s ^ (1 << k))) {
            s &= !(1 << k);
            k += 1;
        }
        self.free[k as usize].insert(s);
    }

    fn free(&mut self, offset: u64) -> Result<u64, FreeError> {
        let (s, k) = self.locate(offset)?;
        self.release(s, k);
        Ok(1 << k << self.shift)
    }

    fn realloc(&mut self, offset: u64, size: u64, align: u64) -> Result<Realloc, ReallocError> {
        let order = match self.order_for(size, align) {
            Err(AllocError::ZeroSize) => return Err(ReallocError::ZeroSize),
            Err(AllocError::InvalidAlignment) => return Err(ReallocError::InvalidAlignment),
            other => other,
        };
        let (s, k) = self.locate(offset).map_err(ReallocError::Offset)?;
        let order = order.map_err(|_| ReallocError::OutOfMemory)?;
        let in_place = Realloc::InPlace {
            offset,
            block_size: 1 << order << self.shift,
        };
        if offset % align == 0 {
            if order <= k {
                for i in order..k {
                    self.free[i as usize].insert(s + (1 << i));
                }
                self.live.insert(s, order);
                return Ok(in_place);
            }
            let aligned = s % (1 << order) == 0;
            if aligned && (k..order).all(|i| self.free[i as usize].contains(&(s + (1 << i)))) {
                for i in k..order {
                    self.free[i as usize].remove(&(s + (1 << i)));
                }
                self.live.insert(s, order);
                return Ok(in_place);
            }
        }
        let new = self
            .alloc_order(order)
            .map_err(|_| ReallocError::OutOfMemory)?;
        self.release(s, k);
        Ok(Realloc::Moved {
            old: offset,
            new,
            copy_len: (1u64 << k << self.shift).min(size),
        })
    }

    fn free_blocks(&self) -> Vec<FreeBlock> {
        let mut blocks: Vec<FreeBlock> = self
            .free
            .iter()
            .enumerate()
            .flat_map(|(k, set)| {
                set.iter().map(move |&s| FreeBlock {
                    offset: s << self.shift,
                    size: 1 << k << self.shift,
                })
            })
            .collect();
        blocks.sort();
        blocks
    }

    fn stats(&self) -> Stats {
        let free_units: u64 = (0..64).map(|k| (self.free[k].len() as u64) << k).sum();
        let largest = (0..64)
            .rev()
            .find(|&k| !self.free[k].is_empty())
            .map_or(0, |k| 1u64 << k);
        Stats {
            heap_bytes: self.heap_size,
            managed_bytes: self.units << self.shift,
            free_bytes: free_units << self.shift,
            largest_free_block: largest << self.shift,
            live_blocks: self.live.len() as u64,
            live_bytes: (self.units - free_units) << self.shift,
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        size: u64,
        align: u64,
    },
    /// Free the live block picked by index (modulo the live count).
    Free {
        pick: usize,
    },
    /// Free an arbitrary offset (mostly invalid ones).
    FreeRaw {
        offset: u64,
    },
    Realloc {
        pick: usize,
        size: u64,
        align: u64,
    },
}

/// Sizes spread over all orders, with some just above a power of two.
fn size_strategy(max_log: u32) -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(0u64),
        8 => (0..=max_log, 0u64..64).prop_map(|(l, jitter)| {
            let base = 1u64 << l;
            (base + jitter % base).max(1)
        }),
        1 => Just(u64::MAX),
    ]
}

fn align_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => Just(1u64),
        4 => (0u32..20).prop_map(|s| 1u64 << s),
        1 => prop::sample::select(vec![0u64, 3, 48, 1 << 63]),
    ]
}

fn op_strategy(max_log: u32) -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (size_strategy(max_log), align_strategy())
            .prop_map(|(size, align)| Op::Alloc { size, align }),
        4 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => (0u64..1 << (max_log + 1)).prop_map(|offset| Op::FreeRaw { offset }),
        2 => (any::<usize>(), size_strategy(max_log), align_strategy())
            .prop_map(|(pick, size, align)| Op::Realloc { pick, size, align }),
    ]
}

/// A heap: min block, number of min blocks, extra bytes below one min block.
fn heap_strategy() -> impl Strategy<Value = (u64, u64)> {
    (0u32..9, 1u64..20_000, 0u64..1024).prop_map(|(shift, units, extra)| {
        let min_block = 1u64 << shift;
        (units * min_block + extra % min_block, min_block)
    })
}

/// Result of one call, comparable across runs and with the model.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Alloc(Result<u64, AllocError>),
    Free(Result<u64, FreeError>),
    Realloc(Result<Realloc, ReallocError>),
}

/// Runs `ops` on a fresh allocator, checking against the model and the heap
/// properties after each call; returns every outcome.
fn run(heap_size: u64, min_block: u64, ops: &[Op]) -> Result<Vec<Outcome>, TestCaseError> {
    let mut heap = BuddyAllocator::with_min_block(heap_size, min_block).expect("heap");
    let mut model = Model::new(heap_size, min_block);
    let initial = model.free_blocks();
    prop_assert_eq!(heap.free_blocks().collect::<Vec<_>>(), initial.clone());
    // Live blocks as seen by the caller: offset -> size asked.
    let mut live: BTreeMap<u64, u64> = BTreeMap::new();
    let mut outcomes = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        let outcome = match *op {
            Op::Alloc { size, align } => {
                let got = heap.alloc(size, align);
                prop_assert_eq!(got, model.alloc(size, align), "alloc {} {}", size, align);
                if let Ok(offset) = got {
                    prop_assert_eq!(offset % align, 0, "misaligned");
                    live.insert(offset, size);
                }
                Outcome::Alloc(got)
            }
            Op::Free { pick } => {
                let Some((&offset, _)) = live.iter().nth(pick % live.len().max(1)) else {
                    continue;
                };
                let got = heap.free(offset);
                prop_assert_eq!(got, model.free(offset));
                prop_assert!(got.is_ok());
                live.remove(&offset);
                Outcome::Free(got)
            }
            Op::FreeRaw { offset } => {
                let got = heap.free(offset);
                prop_assert_eq!(got, model.free(offset), "free raw {}", offset);
                if got.is_ok() {
                    live.remove(&offset);
                }
                Outcome::Free(got)
            }
            Op::Realloc { pick, size, align } => {
                let Some((&offset, _)) = live.iter().nth(pick % live.len().max(1)) else {
                    continue;
                };
                let got = heap.realloc(offset, size, align);
                prop_assert_eq!(
                    got,
                    model.realloc(offset, size, align),
                    "realloc {}",
                    offset
                );
                if let Ok(r) = got {
                    prop_assert_eq!(r.offset() % align, 0, "misaligned");
                    if let Realloc::Moved { old, new, .. } = r {
                        prop_assert_eq!(old, offset);
                        prop_assert!(!live.contains_key(&new));
                    }
                    live.remove(&offset);
                    live.insert(r.offset(), size);
                }
                Outcome::Realloc(got)
            }
        };
        outcomes.push(outcome);
        prop_assert_eq!(heap.stats(), model.stats(), "stats after step {}", step);
        // No overlap, inside the heap, big enough.
        let mut end = 0u64;
        for (&offset, &size) in &live {
            let block = heap.block_size(offset);
            prop_assert!(
                block.is_some_and(|b| b >= size),
                "block at {} too small",
                offset
            );
            prop_assert!(offset >= end, "blocks overlap at {}", offset);
            end = offset + block.unwrap_or(0);
            prop_assert!(end <= heap.managed_bytes(), "block past the heap");
        }
        if step % 8 == 0 {
            heap.check_consistency()
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
    }
    heap.check_consistency()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(heap.free_blocks().collect::<Vec<_>>(), model.free_blocks());
    // Freeing everything coalesces back to the initial free blocks.
    for &offset in live.keys() {
        prop_assert!(heap.free(offset).is_ok());
    }
    prop_assert_eq!(heap.free_blocks().collect::<Vec<_>>(), initial);
    prop_assert_eq!(heap.stats().live_blocks, 0);
    prop_assert_eq!(heap.stats().free_bytes, heap.managed_bytes());
    heap.check_consistency()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    Ok(outcomes)
}

/// 192 cases by default; `PROPTEST_CASES` raises it for a longer hunt.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(192);
    ProptestConfig::with_cases(cases)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn agrees_with_the_model(
        (heap_size, min_block) in heap_strategy(),
        ops in prop::collection::vec(op_strategy(22), 1..160),
    ) {
        run(heap_size, min_block, &ops)?;
    }

    #[test]
    fn small_heaps_under_pressure_agree_with_the_model(
        units in 1u64..300,
        ops in prop::collection::vec(op_strategy(14), 1..300),
    ) {
        // 64 B blocks, heaps of a few chunks: exhaustion and merging are common.
        run(units * 64, 64, &ops)?;
    }

    #[test]
    fn large_heaps_agree_with_the_model(
        units in (1u64 << 18)..(1u64 << 20),
        ops in prop::collection::vec(op_strategy(26), 1..200),
    ) {
        // Thousands of chunks: three summary levels, deep splits.
        run(units * 64 + 17, 64, &ops)?;
    }

    #[test]
    fn same_sequence_gives_same_offsets(
        (heap_size, min_block) in heap_strategy(),
        ops in prop::collection::vec(op_strategy(22), 1..120),
    ) {
        let first = run(heap_size, min_block, &ops)?;
        let second = run(heap_size, min_block, &ops)?;
        prop_assert_eq!(first, second);
    }
}
