//! Registration cache: hit latency against the number of live
//! registrations, and the cost of invalidation; and the machine's memory
//! floor for a random hit (`regcache_floor`).
//!
//! Run: `cargo bench -p fireopal-core --bench regcache -- --measurement-time 3`

use std::convert::Infallible;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use fireopal_core::regcache::{
    Access, RegCache, RegCacheConfig, Region, Registration, RegistrationBackend, TransportId,
};

const PAGE: usize = 4096;
/// Registrations sit two pages apart so that none touch (no merging).
const STRIDE: usize = 2 * PAGE;
const BASE: usize = 0x1000_0000;
/// Gets timed per batch; the references are given back untimed.
const BATCH: usize = 1024;

/// A backend that registers instantly, so the figures are the cache's own.
struct NullBackend;

impl RegistrationBackend for NullBackend {
    type Handle = usize;
    type Error = Infallible;
    fn register(&self, region: Region, _access: Access) -> Result<usize, Infallible> {
        Ok(region.base())
    }
    fn deregister(&self, _region: Region, _handle: &usize) {}
}

/// xorshift64*, enough for shuffling.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }
}

#[derive(Clone, Copy)]
enum Layout {
    /// Registrations side by side, looked up in address order.
    Sequential,
    /// Registrations at scattered addresses, made and looked up in random
    /// order.
    Random,
}

struct Setup {
    cache: RegCache<NullBackend>,
    transport: TransportId,
    /// Base addresses of the live registrations, in lookup order.
    bases: Vec<usize>,
}

fn setup(n: usize, layout: Layout) -> Setup {
    let config = RegCacheConfig {
        merge: false,
        ..RegCacheConfig::default()
    };
    let cache = RegCache::new(config).expect("valid config");
    let transport = cache.add_transport(NullBackend).expect("first transport");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let bases: Vec<usize> = match layout {
        Layout::Sequential => (0..n).map(|i| BASE + i * STRIDE).collect(),
        Layout::Random => {
            // Distinct slots spread over a space 64 times larger than needed.
            let span = (n * 64).next_power_of_two() as u64;
            let mut slots: Vec<u64> = Vec::with_capacity(n);
            let mut seen = std::collections::HashSet::with_capacity(n);
            while slots.len() < n {
                let s = rng.next() % span;
                if seen.insert(s) {
                    slots.push(s);
                }
            }
            slots.iter().map(|&s| BASE + s as usize * STRIDE).collect()
        }
    };
    for &b in &bases {
        let reg = cache
            .get(b, PAGE, Access::REMOTE_READ, transport)
            .expect("null backend never fails");
        cache.put(reg);
    }
    assert_eq!(cache.stats().live_count, n);
    let mut bases = bases;
    if let Layout::Random = layout {
        rng.shuffle(&mut bases);
    }
    Setup {
        cache,
        transport,
        bases,
    }
}

/// Times `iters` hits whose addresses `addr(i)` gives; references are kept
/// in a preallocated batch and given back outside the timed region.
fn time_hits(s: &Setup, iters: u64, addrs: &[usize]) -> Duration {
    let mut held: Vec<Registration<NullBackend>> = Vec::with_capacity(BATCH);
    let mut total = Duration::ZERO;
    let mut done = 0u64;
    let mut next = addrs.iter().cycle();
    while done < iters {
        let chunk = (iters - done).min(BATCH as u64) as usize;
        let start = Instant::now();
        for _ in 0..chunk {
            let a = *next.next().expect("cycle of a non-empty list");
            let reg = s
                .cache
                .get(black_box(a), 256, Access::REMOTE_READ, s.transport)
                .expect("hit");
            held.push(reg);
        }
        total += start.elapsed();
        held.clear();
        done += chunk as u64;
    }
    total
}

fn hits(c: &mut Criterion) {
    let sizes = [1_000usize, 10_000, 100_000, 1_000_000];
    for (name, layout) in [
        ("sequential", Layout::Sequential),
        ("random", Layout::Random),
    ] {
        let mut group = c.benchmark_group(format!("regcache_hit_{name}"));
        for &n in &sizes {
            let s = setup(n, layout);
            let cycle: Vec<usize> = s.bases.iter().map(|b| b + 64).collect();
            group.bench_with_input(BenchmarkId::new("cycle", n), &n, |b, _| {
                b.iter_custom(|iters| time_hits(&s, iters, &cycle));
            });
            // A working set: 1024 of the registrations (every n/1024-th of
            // the lookup order, so scattered for the random layout), cycled.
            let step = (s.bases.len() / 1024).max(1);
            let working: Vec<usize> = s.bases.iter().step_by(step).map(|b| b + 64).collect();
            group.bench_with_input(BenchmarkId::new("working_set_1024", n), &n, |b, _| {
                b.iter_custom(|iters| time_hits(&s, iters, &working));
            });
            let hot = [s.bases[s.bases.len() / 2] + 64];
            group.bench_with_input(BenchmarkId::new("same_buffer", n), &n, |b, _| {
                b.iter_custom(|iters| time_hits(&s, iters, &hot));
            });
            group.bench_with_input(BenchmarkId::new("get_put_pair", n), &n, |b, _| {
                let mut i = 0usize;
                b.iter(|| {
                    let a = s.bases[i % s.bases.len()] + 64;
                    i += 1;
                    let reg = s
                        .cache
                        .get(black_box(a), 256, Access::REMOTE_READ, s.transport)
                        .expect("hit");
                    s.cache.put(reg);
                });
            });
        }
        group.finish();
    }
}

fn invalidation(c: &mut Criterion) {
    let mut group = c.benchmark_group("regcache_invalidate");
    for &n in &[10_000usize, 1_000_000] {
        let s = setup(n, Layout::Random);
        // One idle registration per call; it is made again untimed.
        group.bench_with_input(BenchmarkId::new("one_idle", n), &n, |b, _| {
            let mut i = 0usize;
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let base = s.bases[i % s.bases.len()];
                    i += 1;
                    let start = Instant::now();
                    let removed = s.cache.invalidate(black_box(base), PAGE);
                    total += start.elapsed();
                    debug_assert_eq!(removed, 1);
                    let reg = s
                        .cache
                        .get(base, PAGE, Access::REMOTE_READ, s.transport)
                        .expect("re-register");
                    s.cache.put(reg);
                }
                total
            });
        });
    }
    // One call touching 128 side-by-side registrations.
    let s = setup(100_000, Layout::Sequential);
    group.bench_function("range_of_128/100000", |b| {
        let mut i = 0usize;
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let first = (i * 128) % (s.bases.len() - 128);
                i += 1;
                let start_addr = s.bases[first];
                let start = Instant::now();
                let removed = s.cache.invalidate(black_box(start_addr), 128 * STRIDE);
                total += start.elapsed();
                debug_assert_eq!(removed, 128);
                for &base in &s.bases[first..first + 128] {
                    let reg = s
                        .cache
                        .get(base, PAGE, Access::REMOTE_READ, s.transport)
                        .expect("re-register");
                    s.cache.put(reg);
                }
            }
            total
        });
    });
    group.finish();
}

/// Two threads doing get + put at once; the time is per pair per thread
/// (wall time of `iters` pairs on each thread), to compare with
/// `get_put_pair` on one thread.
fn two_threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("regcache_hit_2_threads");
    let s = setup(10_000, Layout::Random);
    for (name, same) in [("same_buffer", true), ("own_buffers", false)] {
        group.bench_function(format!("{name}/10000"), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                std::thread::scope(|scope| {
                    for t in 0..2 {
                        let s = &s;
                        let addr = if same { s.bases[0] } else { s.bases[t * 100] } + 64;
                        scope.spawn(move || {
                            for _ in 0..iters {
                                let reg = s
                                    .cache
                                    .get(black_box(addr), 256, Access::REMOTE_READ, s.transport)
                                    .expect("hit");
                                s.cache.put(reg);
                            }
                        });
                    }
                });
                start.elapsed()
            });
        });
    }
    group.finish();
}

/// A 32-byte slot, aligned like the cache's home slots.
#[derive(Default)]
#[repr(align(32))]
struct FloorSlot([AtomicU64; 4]);

/// The memory floor under the random hits: one atomic add on a random
/// 32-byte slot of a table as large as the cache's home table (64 bytes per
/// registration), the slot index taken from a precomputed random list like
/// the hits' addresses. Not the cache: a reference for reading its figures
/// on this machine.
fn floor(c: &mut Criterion) {
    let mut group = c.benchmark_group("regcache_floor");
    for &n in &[1_000usize, 1_000_000] {
        let slots = (2 * n).next_power_of_two();
        let table: Vec<FloorSlot> = (0..slots).map(|_| FloorSlot::default()).collect();
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let order: Vec<usize> = (0..n).map(|_| rng.next() as usize % slots).collect();
        group.bench_with_input(BenchmarkId::new("random_atomic_add", n), &n, |b, _| {
            let mut next = order.iter().cycle();
            b.iter(|| {
                let i = *next.next().expect("cycle of a non-empty list");
                table[black_box(i)].0[0].fetch_add(1, Ordering::Relaxed)
            });
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).warm_up_time(Duration::from_millis(500));
    targets = hits, invalidation, two_threads, floor
}
criterion_main!(benches);
