//! Group lookups at about 10^6 members, per representation, at chain depth
//! 1 (stored relative to the world) and 4 (relative to a group three
//! bitmap levels above the world). Each iteration resolves a batch of
//! 1024 pseudo-random ranks (independent lookups); the figure per lookup is
//! the iteration time divided by 1024.
//!
//! Run: `cargo bench -p fireopal-core --bench group -- --measurement-time 3`

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fireopal_core::group::{Group, Representation};

const BATCH: usize = 1024;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u32) -> u32 {
        (self.next() % u64::from(n)) as u32
    }
    /// Ranks of `0..size` kept with probability `percent` / 100, in order.
    fn subset(&mut self, size: u32, percent: u64) -> Vec<u32> {
        (0..size).filter(|_| self.next() % 100 < percent).collect()
    }
    fn shuffle(&mut self, v: &mut [u32]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u32 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// Groups of about 10^6 members over `base`, one per representation.
fn tops(base: &Group, rng: &mut Rng) -> Vec<(&'static str, Group)> {
    let n = base.size();
    let every_other: Vec<u32> = (0..n).step_by(2).collect();
    let blocks: Vec<u32> = (0..n).filter(|r| r % 128 < 64).collect();
    let mut shuffled = rng.subset(n, 50);
    rng.shuffle(&mut shuffled);
    vec![
        ("dense", base.incl(&shuffled).unwrap()),
        ("stride", base.incl(&every_other).unwrap()),
        ("ranges", base.incl(&blocks).unwrap()),
        ("bitmap", base.incl(&rng.subset(n, 50)).unwrap()),
    ]
}

fn groups() -> Vec<(&'static str, u32, Group)> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut out = Vec::new();
    // Depth 1: everything relative to a world of 2 * 10^6.
    let world = Group::world(2_000_000).unwrap();
    for (name, g) in tops(&world, &mut rng) {
        out.push((name, 1, g));
    }
    // Depth 4: three levels each keeping a random 90 % of the one above
    // (each a bitmap over its parent), then the measured group on top.
    let mut base = Group::world(2_750_000).unwrap();
    for _ in 0..3 {
        base = base.incl(&rng.subset(base.size(), 90)).unwrap();
        assert_eq!(base.representation(), Representation::Bitmap);
    }
    assert_eq!(base.depth(), 3);
    for (name, g) in tops(&base, &mut rng) {
        out.push((name, 4, g));
    }
    for (name, depth, g) in &out {
        let expected = match *name {
            "dense" => (Representation::Dense, 0),
            "stride" => (Representation::Stride, *depth),
            "ranges" => (Representation::Ranges, *depth),
            _ => (Representation::Bitmap, *depth),
        };
        assert_eq!((g.representation(), g.depth()), expected, "{name}");
        println!(
            "{name} over a depth-{} parent chain: {} members, {} bytes",
            depth - 1,
            g.size(),
            g.memory_bytes()
        );
    }
    out
}

fn bench_lookup(c: &mut Criterion) {
    let all = groups();
    let mut rng = Rng(0xDEAD_BEEF_1234_5678);
    let mut lookup = c.benchmark_group("group_lookup");
    lookup.throughput(Throughput::Elements(BATCH as u64));
    for (name, depth, g) in &all {
        let ranks: Vec<u32> = (0..BATCH).map(|_| rng.below(g.size())).collect();
        lookup.bench_with_input(BenchmarkId::new(*name, depth), &ranks, |b, ranks| {
            b.iter(|| {
                let mut acc = 0u32;
                for &r in ranks {
                    acc ^= g.lookup(black_box(r)).unwrap_or(0);
                }
                acc
            })
        });
    }
    lookup.finish();

    // rank_of: half members, half random world ranks (mostly non-members).
    let mut rank_of = c.benchmark_group("group_rank_of");
    rank_of.throughput(Throughput::Elements(BATCH as u64));
    for (name, depth, g) in &all {
        let world = g.world_size();
        let queries: Vec<u32> = (0..BATCH)
            .map(|i| {
                if i % 2 == 0 {
                    g.lookup(rng.below(g.size())).unwrap()
                } else {
                    rng.below(world)
                }
            })
            .collect();
        // Build the dense reverse index outside the timing.
        let _ = g.rank_of(0);
        rank_of.bench_with_input(BenchmarkId::new(*name, depth), &queries, |b, queries| {
            b.iter(|| {
                let mut acc = 0u32;
                for &w in queries {
                    acc ^= g.rank_of(black_box(w)).unwrap_or(1);
                }
                acc
            })
        });
    }
    rank_of.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(40);
    targets = bench_lookup
}
criterion_main!(benches);
