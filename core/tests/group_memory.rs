//! Memory of each representation for a world of 10^6 processes, built from
//! the world and at the end of four-step chains; prints tables (`cargo
//! test -p fireopal-core --release --test group_memory -- --nocapture
//! --test-threads 1`) and checks that stride is O(1) and ranges O(runs),
//! chained or not, that from the world the automatic choice is never
//! larger than a forced one, and that on a chain it is never larger than
//! `FLATTEN_FACTOR` times a forced one nor than the same members built
//! from the world.

use fireopal_core::group::{
    Group, RankRange, Representation, StoragePolicy, FLATTEN_FACTOR, MAX_DEPTH,
};

const WORLD: u32 = 1_000_000;

/// Deterministic xorshift for the random subsets.
fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn random_subset(world: u32, percent: u64, seed: u64) -> Vec<u32> {
    let mut state = seed;
    (0..world)
        .filter(|_| xorshift(&mut state) % 100 < percent)
        .collect()
}

/// Maximal runs of world ranks stepping by +1 or -1.
fn count_runs(members: &[u32]) -> usize {
    let mut runs = 0;
    let mut i = 0;
    while i < members.len() {
        let mut j = i + 1;
        let up = j < members.len() && members[j] == members[i] + 1;
        while j < members.len()
            && if up {
                members[j] == members[j - 1] + 1
            } else {
                members[j] + 1 == members[j - 1]
            }
        {
            j += 1;
        }
        runs += 1;
        i = j;
    }
    runs
}

/// One pattern, built from `world` under every policy.
struct Case {
    name: &'static str,
    build: fn(&Group) -> Group,
    automatic: Representation,
}

fn every_other(w: &Group) -> Group {
    w.range_incl(&[RankRange::new(0, w.size() as i32 - 2, 2)])
        .unwrap()
}

fn first_half(w: &Group) -> Group {
    w.range_incl(&[RankRange::new(0, w.size() as i32 / 2 - 1, 1)])
        .unwrap()
}

fn random_one_percent(w: &Group) -> Group {
    w.incl(&random_subset(w.size(), 1, 0x5EED_0001)).unwrap()
}

fn reversed(w: &Group) -> Group {
    w.range_incl(&[RankRange::new(w.size() as i32 - 1, 0, -1)])
        .unwrap()
}

fn random_half(w: &Group) -> Group {
    w.incl(&random_subset(w.size(), 50, 0x5EED_0002)).unwrap()
}

fn blocks_of_64(w: &Group) -> Group {
    let ranks: Vec<u32> = (0..w.size()).filter(|r| r % 128 < 64).collect();
    w.incl(&ranks).unwrap()
}

const CASES: [Case; 6] = [
    Case {
        name: "every other rank",
        build: every_other,
        automatic: Representation::Stride,
    },
    Case {
        name: "first half",
        build: first_half,
        automatic: Representation::Stride,
    },
    Case {
        name: "random 1 %",
        build: random_one_percent,
        automatic: Representation::Dense,
    },
    Case {
        name: "reverse order",
        build: reversed,
        automatic: Representation::Stride,
    },
    Case {
        name: "random 50 %",
        build: random_half,
        automatic: Representation::Bitmap,
    },
    Case {
        name: "blocks of 64 in 128",
        build: blocks_of_64,
        automatic: Representation::Ranges,
    },
];

const FORCED: [(StoragePolicy, Representation); 4] = [
    (StoragePolicy::Dense, Representation::Dense),
    (StoragePolicy::Stride, Representation::Stride),
    (StoragePolicy::Ranges, Representation::Ranges),
    (StoragePolicy::Bitmap, Representation::Bitmap),
];

fn members(g: &Group) -> Vec<u32> {
    (0..g.size()).map(|r| g.lookup(r).unwrap()).collect()
}

#[test]
fn bytes_per_representation_for_a_million_processes() {
    let world = Group::world(WORLD).unwrap();
    let header = world.memory_bytes();
    println!("world of {WORLD}: {header} bytes (node header only)");
    println!(
        "{:<20} {:>8} {:>16} {:>10} {:>10} {:>10} {:>10}",
        "members", "n", "automatic", "dense", "stride", "ranges", "bitmap"
    );
    for case in &CASES {
        let auto = (case.build)(&world);
        assert_eq!(auto.representation(), case.automatic, "{}", case.name);
        let list = members(&auto);
        let mut cells = Vec::new();
        for (policy, kind) in FORCED {
            let g = (case.build)(&world.with_policy(policy));
            assert_eq!(members(&g), list, "{} under {policy:?}", case.name);
            if g.representation() == kind {
                // The automatic choice is the smallest form.
                assert!(auto.memory_bytes() <= g.memory_bytes(), "{}", case.name);
                cells.push(g.memory_bytes().to_string());
            } else {
                cells.push("-".into());
            }
        }
        println!(
            "{:<20} {:>8} {:>16} {:>10} {:>10} {:>10} {:>10}",
            case.name,
            auto.size(),
            format!("{:?} {}", auto.representation(), auto.memory_bytes()),
            cells[0],
            cells[1],
            cells[2],
            cells[3]
        );
        // Dense is the plain table; ranges cost 8 bytes a run in world
        // order and 12 otherwise, whatever the number of members.
        let dense = (case.build)(&world.with_policy(StoragePolicy::Dense));
        assert_eq!(dense.memory_bytes(), header + 4 * list.len());
        let ranges = (case.build)(&world.with_policy(StoragePolicy::Ranges));
        let increasing = list.windows(2).all(|p| p[0] < p[1]);
        let per_run = if increasing { 8 } else { 12 };
        assert_eq!(
            ranges.memory_bytes(),
            header + per_run * count_runs(&list),
            "{}",
            case.name
        );
    }
}

#[test]
fn stride_is_constant_and_ranges_follow_runs_not_members() {
    let big = Group::world(WORLD).unwrap();
    let small = Group::world(1000).unwrap();
    let header = big.memory_bytes();
    // Stride: the same bytes for 500 or 500 000 members, either direction.
    for build in [every_other, first_half, reversed] {
        assert_eq!((build)(&big).memory_bytes(), header);
        assert_eq!((build)(&small).memory_bytes(), header);
    }
    // Ranges: one run costs the same at any size; blocks cost per block.
    let ranges = StoragePolicy::Ranges;
    assert_eq!(
        first_half(&big.with_policy(ranges)).memory_bytes(),
        header + 8
    );
    assert_eq!(
        reversed(&big.with_policy(ranges)).memory_bytes(),
        header + 12
    );
    let blocks_big = blocks_of_64(&big.with_policy(ranges));
    let blocks_small = blocks_of_64(&small.with_policy(ranges));
    assert_eq!(
        blocks_big.memory_bytes(),
        header + 8 * (WORLD as usize).div_ceil(128)
    );
    assert_eq!(blocks_small.memory_bytes(), header + 8 * 8);
    // O(runs), far below a table of the members.
    assert!(blocks_big.memory_bytes() * 30 < 4 * blocks_big.size() as usize);
}

/// The last step of a chain: the group it is made from and the ranks of
/// that group it keeps, in order.
struct ChainEnd {
    name: &'static str,
    parent: Group,
    ranks: Vec<u32>,
}

/// `steps` operations, each keeping `keep(size)` of the group before.
fn chain(world: u32, steps: usize, keep: impl Fn(usize, u32) -> Vec<u32>) -> (Group, Vec<u32>) {
    let mut g = Group::world(world).unwrap();
    for step in 0..steps - 1 {
        g = g.incl(&keep(step, g.size())).unwrap();
    }
    let last = keep(steps - 1, g.size());
    (g, last)
}

fn chain_ends() -> Vec<ChainEnd> {
    let mut out = Vec::new();
    let mut end = |name, (parent, ranks)| {
        out.push(ChainEnd {
            name,
            parent,
            ranks,
        })
    };
    // Every other rank, reversed, every other rank, reversed.
    end(
        "stride of stride x4",
        chain(4_000_000, 4, |step, n| {
            if step % 2 == 0 {
                (0..n).step_by(2).collect()
            } else {
                (0..n).rev().collect()
            }
        }),
    );
    // Three quarters in blocks of 768, 384, 192, 96.
    end(
        "ranges of ranges x4",
        chain(3_200_000, 4, |step, n| {
            let period = 1024 >> step;
            (0..n).filter(|r| r % period < period / 4 * 3).collect()
        }),
    );
    // Random 90 %, 90 %, 90 %, then 50 %.
    end(
        "bitmap of bitmap x4",
        chain(2_750_000, 4, |step, n| {
            let percent = if step == 3 { 50 } else { 90 };
            random_subset(n, percent, 0xB17 + step as u64)
        }),
    );
    // Three random 90 % levels, then every other rank.
    end(
        "stride over 3 bitmaps",
        chain(2_750_000, 4, |step, n| {
            if step == 3 {
                (0..n).step_by(2).collect()
            } else {
                random_subset(n, 90, 0xB17 + step as u64)
            }
        }),
    );
    // Random 90 %, every other rank, all but one block of 64 in 1024,
    // reversed: each far cheaper over its parent than over the world.
    end(
        "kept mixed chain",
        chain(2_750_000, 4, |step, n| match step {
            0 => random_subset(n, 90, 0xB17),
            1 => (0..n).step_by(2).collect(),
            2 => (0..n).filter(|r| r % 1024 >= 64).collect(),
            _ => (0..n).rev().collect(),
        }),
    );
    out
}

#[test]
fn bytes_at_the_end_of_four_step_chains() {
    let header = Group::world(1).unwrap().memory_bytes();
    println!(
        "{:<22} {:>8} {:>8} {:>22} {:>11} {:>10} {:>10} {:>10} {:>10}",
        "chain", "parent", "n", "automatic", "from world", "dense", "stride", "ranges", "bitmap"
    );
    for end in chain_ends() {
        let auto = end.parent.incl(&end.ranks).unwrap();
        let list = members(&auto);
        let flat = Group::world(auto.world_size())
            .unwrap()
            .incl(&list)
            .unwrap();
        assert!(auto.depth() <= MAX_DEPTH);
        // Never larger than the same members built from the world.
        assert!(auto.memory_bytes() <= flat.memory_bytes(), "{}", end.name);
        let mut cells = Vec::new();
        for (policy, kind) in FORCED {
            let g = end.parent.with_policy(policy).incl(&end.ranks).unwrap();
            assert_eq!(members(&g), list, "{} under {policy:?}", end.name);
            if g.representation() == kind {
                // Within the flattening bound of every forced form.
                assert!(
                    auto.memory_bytes() <= FLATTEN_FACTOR as usize * g.memory_bytes(),
                    "{}",
                    end.name
                );
                cells.push(format!("{} d{}", g.memory_bytes(), g.depth()));
            } else {
                cells.push("-".into());
            }
        }
        println!(
            "{:<22} {:>8} {:>8} {:>22} {:>11} {:>10} {:>10} {:>10} {:>10}",
            end.name,
            end.parent.size(),
            auto.size(),
            format!(
                "{:?} d{} {}",
                auto.representation(),
                auto.depth(),
                auto.memory_bytes()
            ),
            flat.memory_bytes(),
            cells[0],
            cells[1],
            cells[2],
            cells[3]
        );
        // Stride chains stay O(1) and ranges chains O(runs).
        match end.name {
            "stride of stride x4" => {
                assert_eq!(auto.representation(), Representation::Stride);
                assert_eq!((auto.depth(), auto.memory_bytes()), (1, header));
            }
            "ranges of ranges x4" => {
                assert_eq!(auto.representation(), Representation::Ranges);
                let increasing = list.windows(2).all(|p| p[0] < p[1]);
                assert!(increasing);
                assert!(auto.memory_bytes() <= header + 8 * count_runs(&list));
                assert!(auto.memory_bytes() * 30 < 4 * list.len());
            }
            _ => {}
        }
    }
}
