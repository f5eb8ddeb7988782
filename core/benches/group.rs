//! Group lookups at about 10^6 members, per representation and per chain:
//!
//! - `world`: stored relative to the world (depth 1; dense is depth 0);
//! - `own-chain`: four successive operations of the representation's own
//!   kind (stride of stride of stride of stride, ranges of ranges…,
//!   bitmap of bitmap…, dense of dense…), stored as the flattening rule
//!   decides;
//! - `over-3-bitmaps`: the group made on top of three levels that each keep
//!   a random 90 % of the one above (the depth-4 case of the first bench;
//!   those levels now flatten into one bitmap over the world);
//! - `kept-chain`: a mixed chain the rule keeps four links deep, because
//!   each level is far cheaper over its parent than over anything flatter:
//!   bitmap, then every other rank, then all but one block of 64 in every
//!   1024, then reversed.
//!
//! Each iteration resolves a batch of 1024 pseudo-random ranks
//! (independent lookups); the figure per lookup is the iteration time
//! divided by 1024. `group_members` then resolves every member in order,
//! by the walk of `Group::members` and by one `lookup` per rank. The representation, depth and bytes of every group are
//! printed first.
//!
//! Run: `cargo bench -p fireopal-core --bench group -- --measurement-time 3`

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fireopal_core::group::{Group, RankRange, Representation};

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

/// One measured group.
struct Case {
    /// Representation named in the bench id.
    name: &'static str,
    /// Chain label in the bench id.
    chain: &'static str,
    group: Group,
}

/// Groups of about 10^6 members over `base`, one per representation.
fn tops(base: &Group, rng: &mut Rng, chain: &'static str, out: &mut Vec<Case>) {
    let n = base.size();
    let every_other: Vec<u32> = (0..n).step_by(2).collect();
    let blocks: Vec<u32> = (0..n).filter(|r| r % 128 < 64).collect();
    let mut shuffled = rng.subset(n, 50);
    rng.shuffle(&mut shuffled);
    for (name, ranks) in [
        ("dense", shuffled),
        ("stride", every_other),
        ("ranges", blocks),
        ("bitmap", rng.subset(n, 50)),
    ] {
        out.push(Case {
            name,
            chain,
            group: base.incl(&ranks).unwrap(),
        });
    }
}

/// Three levels over a world of 2.75 * 10^6, each a random 90 % of the
/// one above.
fn three_bitmap_levels(rng: &mut Rng) -> Group {
    let mut base = Group::world(2_750_000).unwrap();
    for _ in 0..3 {
        base = base.incl(&rng.subset(base.size(), 90)).unwrap();
        assert_eq!(base.representation(), Representation::Bitmap);
    }
    base
}

/// Four operations of each representation's own kind.
fn own_chains(rng: &mut Rng, out: &mut Vec<Case>) {
    // Dense: random subsets in random order, 90 %, 90 %, 90 %, then 50 %.
    let mut g = Group::world(2_750_000).unwrap();
    for percent in [90, 90, 90, 50] {
        let mut ranks = rng.subset(g.size(), percent);
        rng.shuffle(&mut ranks);
        g = g.incl(&ranks).unwrap();
    }
    out.push(Case {
        name: "dense",
        chain: "own-chain",
        group: g,
    });
    // Stride: every other rank, reversed, every other rank, reversed.
    let mut g = Group::world(4_000_000).unwrap();
    for step in 0..4 {
        let n = g.size();
        let triplet = if step % 2 == 0 {
            RankRange::new(0, n as i32 - 1, 2)
        } else {
            RankRange::new(n as i32 - 1, 0, -1)
        };
        g = g.range_incl(&[triplet]).unwrap();
    }
    out.push(Case {
        name: "stride",
        chain: "own-chain",
        group: g,
    });
    // Ranges: each level keeps three quarters, in blocks half the size of
    // the level before (768 of 1024, 384 of 512, 192 of 256, 96 of 128).
    let mut g = Group::world(3_200_000).unwrap();
    for period in [1024u32, 512, 256, 128] {
        let keep: Vec<u32> = (0..g.size())
            .filter(|r| r % period < period / 4 * 3)
            .collect();
        g = g.incl(&keep).unwrap();
    }
    out.push(Case {
        name: "ranges",
        chain: "own-chain",
        group: g,
    });
    // Bitmap: random subsets in order, 90 %, 90 %, 90 %, then 50 %.
    let mut g = Group::world(2_750_000).unwrap();
    for percent in [90, 90, 90, 50] {
        g = g.incl(&rng.subset(g.size(), percent)).unwrap();
    }
    out.push(Case {
        name: "bitmap",
        chain: "own-chain",
        group: g,
    });
}

/// Bitmap, every other rank, all but one block of 64 in 1024, reversed.
fn kept_chain(rng: &mut Rng) -> Group {
    let world = Group::world(2_750_000).unwrap();
    let bitmap = world.incl(&rng.subset(world.size(), 90)).unwrap();
    let n = bitmap.size();
    let strided = bitmap
        .range_incl(&[RankRange::new(0, n as i32 - 1, 2)])
        .unwrap();
    let keep: Vec<u32> = (0..strided.size()).filter(|r| r % 1024 >= 64).collect();
    let runs = strided.incl(&keep).unwrap();
    runs.range_incl(&[RankRange::new(runs.size() as i32 - 1, 0, -1)])
        .unwrap()
}

fn cases() -> Vec<Case> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut out = Vec::new();
    let world = Group::world(2_000_000).unwrap();
    tops(&world, &mut rng, "world", &mut out);
    own_chains(&mut rng, &mut out);
    let base = three_bitmap_levels(&mut rng);
    tops(&base, &mut rng, "over-3-bitmaps", &mut out);
    out.push(Case {
        name: "stride",
        chain: "kept-chain",
        group: kept_chain(&mut rng),
    });
    for case in &out {
        let g = &case.group;
        println!(
            "{}/{}: {:?} at depth {}, {} members, {} bytes",
            case.name,
            case.chain,
            g.representation(),
            g.depth(),
            g.size(),
            g.memory_bytes()
        );
    }
    out
}

fn bench_lookup(c: &mut Criterion) {
    let all = cases();
    let mut rng = Rng(0xDEAD_BEEF_1234_5678);
    let mut lookup = c.benchmark_group("group_lookup");
    lookup.throughput(Throughput::Elements(BATCH as u64));
    for case in &all {
        let g = &case.group;
        let ranks: Vec<u32> = (0..BATCH).map(|_| rng.below(g.size())).collect();
        let id = BenchmarkId::new(case.name, case.chain);
        lookup.bench_with_input(id, &ranks, |b, ranks| {
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
    for case in &all {
        let g = &case.group;
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
        let id = BenchmarkId::new(case.name, case.chain);
        rank_of.bench_with_input(id, &queries, |b, queries| {
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

    // Every member in order: the walk of `members` against a `lookup` per
    // rank (what a communicator's rank table cost before the walk).
    let mut walk = c.benchmark_group("group_members");
    for case in &all {
        let g = &case.group;
        walk.throughput(Throughput::Elements(u64::from(g.size())));
        let id = BenchmarkId::new(format!("{}/walk", case.name), case.chain);
        walk.bench_function(id, |b| {
            b.iter(|| black_box(g).members().fold(0u32, |acc, w| acc ^ w))
        });
        let id = BenchmarkId::new(format!("{}/lookup", case.name), case.chain);
        walk.bench_function(id, |b| {
            b.iter(|| {
                let g = black_box(g);
                (0..g.size()).fold(0u32, |acc, r| acc ^ g.lookup(r).unwrap_or(0))
            })
        });
    }
    walk.finish();
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
