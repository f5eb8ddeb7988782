//! Property tests of the buddy allocator against a plain model.
//!
//! The model is the textbook buddy system (a sorted set of free blocks per
//! order, a map of live blocks) with the same documented policy: smallest
//! fitting order first, lowest offset within an order, eager merging; in
//! front of it, the same free caches (a LIFO stack of freed blocks per
//! order; a full stack merges its oldest block back, and all of them are
//! flushed when the byte bound would be passed and when a request finds no
//! free block). Every
//! call must give the same answer from both, and the heap-level properties
//! (live, cached and free blocks tile the heap without overlap, aligned,
//! full coalescing once the caches are flushed, determinism) are checked on
//! the allocator's own answers.

use std::collections::{BTreeMap, BTreeSet};

use fireopal_core::buddy::{
    AllocError, BuddyAllocator, CacheLimits, FreeBlock, FreeError, Realloc, ReallocError, Stats,
};
use proptest::prelude::*;

/// Textbook buddy system over unit offsets, with free caches in front.
#[derive(Clone)]
struct Model {
    heap_size: u64,
    shift: u32,
    units: u64,
    free: Vec<BTreeSet<u64>>,
    live: BTreeMap<u64, u32>,
    /// Per order: cached blocks (unit offsets), oldest first.
    cache: Vec<Vec<u64>>,
    depth: usize,
    max_units: u64,
}

impl Model {
    fn new(heap_size: u64, min_block: u64, limits: CacheLimits) -> Self {
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
        // One stack per order a block can have.
        let orders = (64 - units.leading_zeros()) as usize;
        Self {
            heap_size,
            shift,
            units,
            free,
            live: BTreeMap::new(),
            cache: vec![Vec::new(); orders],
            depth: limits.blocks_per_order as usize,
            max_units: limits.max_bytes >> shift,
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
        // Larger than the heap: fails without flushing the caches.
        if order >= 64 || 1u64 << order > self.units {
            return Err(AllocError::OutOfMemory);
        }
        Ok(order)
    }

    fn cached_units(&self) -> u64 {
        self.cache
            .iter()
            .enumerate()
            .map(|(k, stack)| (stack.len() as u64) << k)
            .sum()
    }

    /// Splits the lowest free block of the smallest fitting order.
    fn split_off(&mut self, order: u32) -> Option<u64> {
        for j in order as usize..64 {
            if let Some(&s) = self.free[j].first() {
                self.free[j].remove(&s);
                for i in (order as usize..j).rev() {
                    self.free[i].insert(s + (1 << i));
                }
                return Some(s);
            }
        }
        None
    }

    /// Cache first, then the free blocks, then the free blocks after a flush.
    fn alloc_order(&mut self, order: u32) -> Result<u64, AllocError> {
        let cached = self.cache.get_mut(order as usize).and_then(Vec::pop);
        let s = match cached.or_else(|| self.split_off(order)) {
            Some(s) => s,
            None => {
                self.flush();
                self.split_off(order).ok_or(AllocError::OutOfMemory)?
            }
        };
        self.live.insert(s, order);
        Ok(s << self.shift)
    }

    fn alloc(&mut self, size: u64, align: u64) -> Result<u64, AllocError> {
        let order = self.order_for(size, align)?;
        self.alloc_order(order)
    }

    /// The live block starting at `offset`. Cached blocks are free space.
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

    /// Eager merge into the free sets.
    fn release(&mut self, mut s: u64, mut k: u32) {
        while self.free[k as usize].remove(&(s ^ (1 << k))) {
            s &= !(1 << k);
            k += 1;
        }
        self.free[k as usize].insert(s);
    }

    fn flush_order(&mut self, k: usize) {
        for s in std::mem::take(&mut self.cache[k]) {
            self.release(s, k as u32);
        }
    }

    fn flush(&mut self) {
        for k in 0..self.cache.len() {
            self.flush_order(k);
        }
    }

    /// A block the caller gave back (already out of `live`).
    fn retire(&mut self, s: u64, k: u32) {
        let order = k as usize;
        if self.depth == 0 || order >= self.cache.len() || 1u64 << k > self.max_units {
            self.release(s, k);
            return;
        }
        if self.cache[order].len() >= self.depth {
            let oldest = self.cache[order].remove(0);
            self.release(oldest, k);
        }
        if self.cached_units() + (1 << k) > self.max_units {
            self.flush();
        }
        self.cache[order].push(s);
    }

    fn free(&mut self, offset: u64) -> Result<u64, FreeError> {
        let (s, k) = self.locate(offset)?;
        self.live.remove(&s);
        self.retire(s, k);
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
            // Only free blocks count as room to grow, not cached ones.
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
        self.live.remove(&s);
        self.retire(s, k);
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

    fn cached_blocks(&self) -> Vec<FreeBlock> {
        self.cache
            .iter()
            .enumerate()
            .flat_map(|(k, stack)| {
                stack.iter().map(move |&s| FreeBlock {
                    offset: s << self.shift,
                    size: 1 << k << self.shift,
                })
            })
            .collect()
    }

    /// Cached blocks count as free and merged: the figures after a flush.
    fn stats(&self) -> Stats {
        let mut flushed = self.clone();
        flushed.flush();
        let free_units: u64 = (0..64).map(|k| (flushed.free[k].len() as u64) << k).sum();
        let largest = (0..64)
            .rev()
            .find(|&k| !flushed.free[k].is_empty())
            .map_or(0, |k| 1u64 << k);
        Stats {
            heap_bytes: self.heap_size,
            managed_bytes: self.units << self.shift,
            free_bytes: free_units << self.shift,
            largest_free_block: largest << self.shift,
            live_blocks: self.live.len() as u64,
            live_bytes: (self.units - free_units) << self.shift,
            cached_bytes: self.cached_units() << self.shift,
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
    /// Free the block handed out last, if still live: the temporary-buffer
    /// pattern, where a block lent from a free cache is given back.
    FreeNewest,
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
        2 => Just(Op::FreeNewest),
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

/// Which free-cache limits a case runs with.
#[derive(Clone, Copy, Debug)]
enum Limits {
    /// `CacheLimits::for_heap`, what `new` sets.
    Default,
    /// No caching: the eager buddy system.
    Off,
    /// Tight bounds, so that every flush rule fires often: blocks per
    /// order, and the byte bound as a fraction of the heap (in 1/64ths).
    Tight { blocks: u32, sixty_fourths: u64 },
}

impl Limits {
    fn for_heap(self, managed: u64) -> CacheLimits {
        match self {
            Limits::Default => CacheLimits::for_heap(managed),
            Limits::Off => CacheLimits::OFF,
            Limits::Tight {
                blocks,
                sixty_fourths,
            } => CacheLimits {
                blocks_per_order: blocks,
                max_bytes: managed / 64 * sixty_fourths,
            },
        }
    }
}

fn limits_strategy() -> impl Strategy<Value = Limits> {
    prop_oneof![
        3 => Just(Limits::Default),
        1 => Just(Limits::Off),
        3 => (1u32..4, 0u64..40).prop_map(|(blocks, sixty_fourths)| Limits::Tight {
            blocks,
            sixty_fourths,
        }),
    ]
}

/// Result of one call, comparable across runs and with the model.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Alloc(Result<u64, AllocError>),
    Free(Result<u64, FreeError>),
    Realloc(Result<Realloc, ReallocError>),
}

fn consistent(heap: &BuddyAllocator) -> Result<(), TestCaseError> {
    heap.check_consistency()
        .map_err(|e| TestCaseError::fail(e.to_string()))
}

/// Live blocks (from the caller's record), cached blocks and free blocks
/// lie in the managed heap, are aligned to their size, and tile it without
/// overlap.
fn tiles_the_heap(heap: &BuddyAllocator, live: &BTreeMap<u64, u64>) -> Result<(), TestCaseError> {
    let mut all: Vec<(u64, u64, &str)> = Vec::new();
    for (&offset, &size) in live {
        let block = heap.block_size(offset);
        prop_assert!(
            block.is_some_and(|b| b >= size),
            "block at {} too small",
            offset
        );
        all.push((offset, block.unwrap_or(0), "live"));
    }
    all.extend(heap.cached_blocks().map(|b| (b.offset, b.size, "cached")));
    all.extend(heap.free_blocks().map(|b| (b.offset, b.size, "free")));
    all.sort_unstable();
    let mut end = 0u64;
    for &(offset, size, what) in &all {
        prop_assert!(offset >= end, "{} block at {} overlaps", what, offset);
        prop_assert_eq!(offset % size, 0, "{} block at {} misaligned", what, offset);
        end = offset + size;
    }
    prop_assert!(end <= heap.managed_bytes(), "block past the heap");
    let covered: u64 = all.iter().map(|&(_, size, _)| size).sum();
    prop_assert_eq!(covered, heap.managed_bytes(), "heap not covered");
    Ok(())
}

/// What a run leaves: every outcome, then the cached and the free blocks.
type RunEnd = (Vec<Outcome>, Vec<FreeBlock>, Vec<FreeBlock>);

/// Runs `ops` on a fresh allocator, checking against the model and the heap
/// properties after each call; returns every outcome, then the cached and
/// free blocks at the end.
fn run(
    heap_size: u64,
    min_block: u64,
    limits: Limits,
    ops: &[Op],
) -> Result<RunEnd, TestCaseError> {
    let mut heap = BuddyAllocator::with_min_block(heap_size, min_block).expect("heap");
    let limits = limits.for_heap(heap.managed_bytes());
    prop_assert_eq!(heap.set_cache_limits(limits), Ok(()));
    let mut model = Model::new(heap_size, min_block, limits);
    let initial = model.free_blocks();
    let initial_stats = model.stats();
    prop_assert_eq!(heap.free_blocks().collect::<Vec<_>>(), initial.clone());
    // Live blocks as seen by the caller: offset -> size asked.
    let mut live: BTreeMap<u64, u64> = BTreeMap::new();
    let mut newest = None;
    let mut outcomes = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        let outcome = match *op {
            Op::Alloc { size, align } => {
                let got = heap.alloc(size, align);
                prop_assert_eq!(got, model.alloc(size, align), "alloc {} {}", size, align);
                if let Ok(offset) = got {
                    prop_assert_eq!(offset % align, 0, "misaligned");
                    live.insert(offset, size);
                    newest = Some(offset);
                }
                Outcome::Alloc(got)
            }
            Op::Free { .. } | Op::FreeNewest => {
                let chosen = match *op {
                    Op::Free { pick } => live.keys().nth(pick % live.len().max(1)).copied(),
                    _ => newest.take().filter(|o| live.contains_key(o)),
                };
                let Some(offset) = chosen else {
                    continue;
                };
                let got = heap.free(offset);
                prop_assert_eq!(got, model.free(offset));
                prop_assert!(got.is_ok());
                live.remove(&offset);
                // At once, a second free is a double free.
                prop_assert_eq!(heap.free(offset), Err(FreeError::DoubleFree));
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
                    newest = Some(r.offset());
                }
                Outcome::Realloc(got)
            }
        };
        outcomes.push(outcome);
        prop_assert_eq!(heap.stats(), model.stats(), "stats after step {}", step);
        prop_assert_eq!(
            heap.cached_blocks().collect::<Vec<_>>(),
            model.cached_blocks(),
            "cached blocks after step {}",
            step
        );
        tiles_the_heap(&heap, &live)?;
        if step % 8 == 0 {
            consistent(&heap)?;
        }
    }
    consistent(&heap)?;
    prop_assert_eq!(heap.free_blocks().collect::<Vec<_>>(), model.free_blocks());
    let end = (
        outcomes,
        heap.cached_blocks().collect(),
        heap.free_blocks().collect(),
    );
    // Freeing everything: the stats (which count cached blocks as merged)
    // are the initial ones at once, and after a flush the free blocks are
    // the initial free blocks again.
    for &offset in live.keys() {
        prop_assert!(heap.free(offset).is_ok());
    }
    let stats = heap.stats();
    prop_assert_eq!(
        Stats {
            cached_bytes: 0,
            ..stats
        },
        initial_stats
    );
    tiles_the_heap(&heap, &BTreeMap::new())?;
    consistent(&heap)?;
    heap.flush();
    prop_assert_eq!(heap.cached_blocks().count(), 0);
    prop_assert_eq!(heap.free_blocks().collect::<Vec<_>>(), initial);
    prop_assert_eq!(heap.stats(), initial_stats);
    consistent(&heap)?;
    Ok(end)
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
        limits in limits_strategy(),
        ops in prop::collection::vec(op_strategy(22), 1..160),
    ) {
        run(heap_size, min_block, limits, &ops)?;
    }

    #[test]
    fn small_heaps_under_pressure_agree_with_the_model(
        units in 1u64..300,
        limits in limits_strategy(),
        ops in prop::collection::vec(op_strategy(14), 1..300),
    ) {
        // 64 B blocks, heaps of a few chunks: exhaustion, merging and
        // flushes are common.
        run(units * 64, 64, limits, &ops)?;
    }

    #[test]
    fn large_heaps_agree_with_the_model(
        units in (1u64 << 18)..(1u64 << 20),
        limits in limits_strategy(),
        ops in prop::collection::vec(op_strategy(26), 1..200),
    ) {
        // Thousands of chunks: three summary levels, deep splits.
        run(units * 64 + 17, 64, limits, &ops)?;
    }

    #[test]
    fn same_sequence_gives_same_offsets(
        (heap_size, min_block) in heap_strategy(),
        limits in limits_strategy(),
        ops in prop::collection::vec(op_strategy(22), 1..120),
    ) {
        let first = run(heap_size, min_block, limits, &ops)?;
        let second = run(heap_size, min_block, limits, &ops)?;
        prop_assert_eq!(first, second);
    }
}
