//! Model-based property test: random chains of group operations over worlds
//! of up to 10^4 processes, every result checked against a plain
//! `Vec<u32>` of world ranks, under every storage policy.

use fireopal_core::group::{
    Comparison, Group, RangeError, RankListError, RankRange, Representation, StoragePolicy,
    MAX_DEPTH, PROC_NULL, UNDEFINED,
};
use proptest::prelude::*;

const POLICIES: [StoragePolicy; 5] = [
    StoragePolicy::Automatic,
    StoragePolicy::Dense,
    StoragePolicy::Stride,
    StoragePolicy::Ranges,
    StoragePolicy::Bitmap,
];

/// Tiny xorshift: operation parameters depend on sizes only known while
/// the chain runs, so each step draws them from its own seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform-ish in `0..n` (`n > 0`).
    fn below(&mut self, n: u32) -> u32 {
        (self.next() % u64::from(n)) as u32
    }
    fn shuffle(&mut self, v: &mut [u32]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u32 + 1) as usize;
            v.swap(i, j);
        }
    }
    fn shuffle_slices(&mut self, v: &mut [Vec<u32>]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u32 + 1) as usize;
            v.swap(i, j);
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Incl,
    Excl,
    RangeIncl,
    RangeExcl,
    Union,
    Intersection,
    Difference,
    BadIncl,
    BadRange,
}

/// Ranks of a group of `size`, in one of several patterns so that every
/// representation gets chosen in automatic mode.
fn pick_ranks(rng: &mut Rng, size: u32) -> Vec<u32> {
    if size == 0 {
        return Vec::new();
    }
    match rng.below(7) {
        // Random subset, random order.
        0 => {
            let keep = rng.below(100) + 1;
            let mut v: Vec<u32> = (0..size).filter(|_| rng.below(100) < keep).collect();
            rng.shuffle(&mut v);
            v
        }
        // Random subset in order (bitmap or dense).
        1 => {
            let keep = rng.below(100) + 1;
            (0..size).filter(|_| rng.below(100) < keep).collect()
        }
        // Arithmetic progression, either direction.
        2 => {
            let step = rng.below(size.min(50)) + 1;
            let first = rng.below(size);
            let v: Vec<u32> = (first..size).step_by(step as usize).collect();
            if rng.below(2) == 0 {
                v.into_iter().rev().collect()
            } else {
                v
            }
        }
        // Blocks of consecutive ranks (ranges).
        3 => {
            let block = rng.below(64) + 1;
            let gap = rng.below(64) + 1;
            (0..size).filter(|r| r % (block + gap) < block).collect()
        }
        // A few scattered ranks.
        4 => {
            let mut v: Vec<u32> = (0..rng.below(8)).map(|_| rng.below(size)).collect();
            v.sort_unstable();
            v.dedup();
            rng.shuffle(&mut v);
            v
        }
        // A few long slices in random order, some reversed: cheap over
        // the parent, so they grow chains over sparse groups.
        5 => {
            let mut cuts: Vec<u32> = (0..rng.below(4) + 1).map(|_| rng.below(size)).collect();
            cuts.push(0);
            cuts.push(size);
            cuts.sort_unstable();
            cuts.dedup();
            let mut slices = Vec::new();
            for c in cuts.windows(2) {
                let slice: Vec<u32> = (c[0]..c[1]).collect();
                match rng.below(3) {
                    0 => {}
                    1 => slices.push(slice.into_iter().rev().collect()),
                    _ => slices.push(slice),
                }
            }
            rng.shuffle_slices(&mut slices);
            slices.concat()
        }
        // Everyone, maybe reversed.
        _ => {
            let v: Vec<u32> = (0..size).collect();
            if rng.below(2) == 0 {
                v.into_iter().rev().collect()
            } else {
                v
            }
        }
    }
}

/// Up to four valid triplets computing distinct ranks of a group of
/// `size`. Their `last` is often not reached, or past the group's end (or
/// below 0 for a negative stride) where the stride steps over it: all
/// valid under MPI.
fn pick_ranges(rng: &mut Rng, size: u32) -> Vec<RankRange> {
    let mut taken = vec![false; size as usize];
    let mut out = Vec::new();
    if size == 0 {
        return out;
    }
    for _ in 0..rng.below(5) {
        let first = rng.below(size) as i32;
        let last = rng.below(size) as i32;
        let magnitude = (rng.below(size.min(100)) + 1) as i32;
        let stride = if last < first { -magnitude } else { magnitude };
        let range = match rng.below(4) {
            // Push `last` out to just before the next rank the stride
            // would reach (past the group's end, or below 0, when that
            // rank is): the same ranks computed, `last` not among them.
            0 => {
                let named = model_triplet(RankRange::new(first, last, stride));
                let beyond = named.last().unwrap() + i64::from(stride);
                let last = beyond - i64::from(stride.signum());
                RankRange::new(first, last as i32, stride)
            }
            _ => RankRange::new(first, last, stride),
        };
        let named = model_triplet(range);
        if named.iter().all(|&r| !taken[r as usize]) {
            for &r in &named {
                taken[r as usize] = true;
            }
            out.push(range);
        }
    }
    out
}

/// The ranks a triplet computes, by MPI 4.0's definition written out
/// naively: `first + k * stride` for k = 0, 1, … while it has not passed
/// `last` in the stride's direction (nothing for a zero stride).
fn model_triplet(r: RankRange) -> Vec<i64> {
    let (f, l, s) = (i64::from(r.first), i64::from(r.last), i64::from(r.stride));
    let mut out = Vec::new();
    let mut x = f;
    while s != 0 && ((s > 0 && x <= l) || (s < 0 && x >= l)) {
        out.push(x);
        x += s;
    }
    out
}

/// `out[i]` is whether `i` is listed.
fn marks(len: u32, items: &[u32]) -> Vec<bool> {
    let mut out = vec![false; len as usize];
    for &i in items {
        out[i as usize] = true;
    }
    out
}

/// What `incl`/`excl` must answer for a rank list, per MPI.
fn model_rank_list(ranks: &[u32], size: u32) -> Result<(), RankListError> {
    let mut seen = vec![false; size as usize];
    for (index, &rank) in ranks.iter().enumerate() {
        if rank >= size {
            return Err(RankListError::OutOfRange { index, rank, size });
        }
        if std::mem::replace(&mut seen[rank as usize], true) {
            return Err(RankListError::Duplicate { index, rank });
        }
    }
    Ok(())
}

/// What `range_incl`/`range_excl` must answer for triplets, per MPI:
/// every computed rank valid and computed once, no zero stride, no
/// `first` beyond `last` in the stride's direction; the first problem in
/// triplet order is the error.
fn model_ranges(ranges: &[RankRange], size: u32) -> Result<Vec<u32>, RangeError> {
    let mut seen = vec![false; size as usize];
    let mut out = Vec::new();
    for (triplet, &r) in ranges.iter().enumerate() {
        if r.stride == 0 {
            return Err(RangeError::ZeroStride { triplet });
        }
        if (r.stride > 0 && r.first > r.last) || (r.stride < 0 && r.first < r.last) {
            return Err(RangeError::WrongDirection { triplet });
        }
        for computed in model_triplet(r) {
            if computed < 0 || computed >= i64::from(size) {
                return Err(RangeError::OutOfRange {
                    triplet,
                    rank: computed as i32,
                    size,
                });
            }
            let rank = computed as u32;
            if std::mem::replace(&mut seen[rank as usize], true) {
                return Err(RangeError::Duplicate { triplet, rank });
            }
            out.push(rank);
        }
    }
    Ok(out)
}

fn model_compare(a: &[u32], b: &[u32]) -> Comparison {
    if a == b {
        return Comparison::Identical;
    }
    let (mut x, mut y) = (a.to_vec(), b.to_vec());
    x.sort_unstable();
    y.sort_unstable();
    if x == y {
        Comparison::Similar
    } else {
        Comparison::Unequal
    }
}

/// What the chains of one run reached, to show they exercise flattening.
#[derive(Debug, Default, Clone, Copy)]
struct Reached {
    /// Deepest chain seen.
    depth: u32,
    /// Results stored over a base deeper than one link.
    chained: u32,
    /// Results made from a group at depth 1 or more and stored shallower
    /// than over it (over the world or a base further down the chain).
    flattened: u32,
}

/// Checks every query of `g` against `model` (world ranks in order), and
/// the memory rules of the flattening policy.
fn check(g: &Group, model: &[u32], policy: StoragePolicy) -> Result<(), TestCaseError> {
    let n = g.world_size();
    prop_assert_eq!(g.size() as usize, model.len());
    prop_assert!(g.depth() <= MAX_DEPTH, "{:?}", g);
    // Before `rank_of` builds a dense index into the count.
    let bytes = g.memory_bytes();
    let flat = Group::world(n)
        .unwrap()
        .with_policy(policy)
        .incl(model)
        .unwrap();
    let flat_bytes = flat.memory_bytes();
    for (r, &w) in model.iter().enumerate() {
        prop_assert_eq!(g.lookup(r as u32), Some(w), "rank {} of {:?}", r, g);
    }
    prop_assert_eq!(g.lookup(g.size()), None);
    // The walks give the same members as the lookups.
    let walked: Vec<u32> = g.members().collect();
    prop_assert_eq!(&walked[..], model, "members of {:?}", g);
    let mut table = vec![UNDEFINED; model.len()];
    prop_assert!(g.world_ranks(&mut table).is_ok());
    prop_assert_eq!(&table[..], model, "world_ranks of {:?}", g);
    let mut inverse = vec![None; n as usize];
    for (r, &w) in model.iter().enumerate() {
        inverse[w as usize] = Some(r as u32);
    }
    for (w, &expected) in inverse.iter().enumerate() {
        prop_assert_eq!(g.rank_of(w as u32), expected, "world rank {} in {:?}", w, g);
    }
    prop_assert_eq!(g.rank_of(n), None);
    // A forced kind is used whenever it can hold the group over the world.
    let increasing = model.windows(2).all(|p| p[0] < p[1]);
    let arithmetic = model
        .windows(3)
        .all(|p| i64::from(p[1]) - i64::from(p[0]) == i64::from(p[2]) - i64::from(p[1]));
    let forced = match policy {
        StoragePolicy::Automatic => None,
        StoragePolicy::Dense => Some(Representation::Dense),
        StoragePolicy::Ranges => Some(Representation::Ranges),
        StoragePolicy::Stride => arithmetic.then_some(Representation::Stride),
        StoragePolicy::Bitmap => increasing.then_some(Representation::Bitmap),
    };
    if let Some(kind) = forced {
        let r = g.representation();
        prop_assert!(
            r == kind || r == Representation::World,
            "{:?} under {:?}",
            g,
            policy
        );
    }
    // Never more than the same members built from the world (when that
    // build takes the same kind: always, unless a forced kind only fits a
    // base on the chain); a kept chain means the world form is dearer.
    // Dense groups are left out: a shared one may already count the
    // `rank_of` index an earlier check built.
    let dense = g.representation() == Representation::Dense;
    if !dense && (policy == StoragePolicy::Automatic || forced.is_some()) {
        prop_assert!(bytes <= flat_bytes, "{:?}: {} > {}", g, bytes, flat_bytes);
        if g.depth() >= 2 {
            prop_assert!(bytes < flat_bytes, "{:?} kept at {} bytes", g, bytes);
        }
    }
    Ok(())
}

fn run_chain(
    world_size: u32,
    policy: StoragePolicy,
    ops: &[(Op, u64)],
) -> Result<Reached, TestCaseError> {
    let mut reached = Reached::default();
    let world = Group::world(world_size).unwrap().with_policy(policy);
    let mut pool: Vec<(Group, Vec<u32>)> = vec![(world, (0..world_size).collect())];
    for &(op, seed) in ops {
        let mut rng = Rng::new(seed);
        // Mostly extend the newest group, so that chains grow deep.
        let from = if rng.below(4) == 0 {
            rng.below(pool.len() as u32) as usize
        } else {
            pool.len() - 1
        };
        let (g, model) = pool[from].clone();
        let (h, other) = pool[rng.below(pool.len() as u32) as usize].clone();
        let size = g.size();
        let (result, expected) = match op {
            Op::Incl => {
                let ranks = pick_ranks(&mut rng, size);
                let expected = ranks.iter().map(|&r| model[r as usize]).collect();
                (g.incl(&ranks).unwrap(), expected)
            }
            Op::Excl => {
                // Often drop only a few percent: the result stays in parent
                // order and large, which grows sparse chains.
                let ranks = if rng.below(2) == 0 {
                    let drop = rng.below(10) + 1;
                    let mut v: Vec<u32> = (0..size).filter(|_| rng.below(100) < drop).collect();
                    rng.shuffle(&mut v);
                    v
                } else {
                    pick_ranks(&mut rng, size)
                };
                let gone = marks(size, &ranks);
                let out: Vec<u32> = (0..size).filter(|&r| !gone[r as usize]).collect();
                let expected = out.iter().map(|&r| model[r as usize]).collect();
                (g.excl(&ranks).unwrap(), expected)
            }
            Op::RangeIncl => {
                let ranges = pick_ranges(&mut rng, size);
                let ranks = model_ranges(&ranges, size).unwrap();
                let expected = ranks.iter().map(|&r| model[r as usize]).collect();
                (g.range_incl(&ranges).unwrap(), expected)
            }
            Op::RangeExcl => {
                let ranges = pick_ranges(&mut rng, size);
                let gone = marks(size, &model_ranges(&ranges, size).unwrap());
                let expected = (0..size)
                    .filter(|&r| !gone[r as usize])
                    .map(|r| model[r as usize])
                    .collect();
                (g.range_excl(&ranges).unwrap(), expected)
            }
            Op::Union => {
                let mine = marks(world_size, &model);
                let mut expected = model.clone();
                expected.extend(other.iter().filter(|&&w| !mine[w as usize]));
                (g.union(&h).unwrap(), expected)
            }
            Op::Intersection => {
                let theirs = marks(world_size, &other);
                let expected = model
                    .iter()
                    .copied()
                    .filter(|&w| theirs[w as usize])
                    .collect();
                (g.intersection(&h).unwrap(), expected)
            }
            Op::Difference => {
                let theirs = marks(world_size, &other);
                let expected = model
                    .iter()
                    .copied()
                    .filter(|&w| !theirs[w as usize])
                    .collect();
                (g.difference(&h).unwrap(), expected)
            }
            Op::BadIncl => {
                // A valid list with one bad entry spliced in.
                let mut ranks = pick_ranks(&mut rng, size);
                let bad = match (rng.below(2), ranks.first()) {
                    (0, Some(&r)) => r,
                    _ => size + rng.below(3),
                };
                let at = rng.below(ranks.len() as u32 + 1) as usize;
                ranks.insert(at, bad);
                let want = model_rank_list(&ranks, size);
                prop_assert!(want.is_err());
                prop_assert_eq!(g.incl(&ranks).map(|_| ()), want);
                prop_assert_eq!(g.excl(&ranks).map(|_| ()), want);
                continue;
            }
            Op::BadRange => {
                // Often bad (out of the group, zero stride, overlapping),
                // sometimes valid after all: either way as the model says.
                let mut ranges = pick_ranges(&mut rng, size);
                let first = rng.below(size + 4) as i32 - 2;
                let last = rng.below(size + 4) as i32 - 2;
                let stride = rng.below(7) as i32 - 3;
                ranges.insert(
                    rng.below(ranges.len() as u32 + 1) as usize,
                    RankRange::new(first, last, stride),
                );
                let want = model_ranges(&ranges, size).map(|_| ());
                prop_assert_eq!(g.range_incl(&ranges).map(|_| ()), want);
                prop_assert_eq!(g.range_excl(&ranges).map(|_| ()), want);
                continue;
            }
        };
        check(&result, &expected, policy)?;
        reached.depth = reached.depth.max(result.depth());
        reached.chained += u32::from(result.depth() >= 2);
        // A derived group over its parent would be one link deeper.
        let derived = !matches!(op, Op::Union);
        reached.flattened += u32::from(
            derived && g.depth() >= 1 && result.depth() >= 1 && result.depth() <= g.depth(),
        );
        // Cross-check translate and compare against another pool member.
        let mut ranks: Vec<u32> = (0..result.size().min(64)).collect();
        ranks.push(PROC_NULL);
        let translated = result.translate_ranks(&ranks, &h).unwrap();
        let mut into = vec![0; ranks.len()];
        result.translate_ranks_into(&ranks, &h, &mut into).unwrap();
        prop_assert_eq!(&into, &translated);
        for (&r, &t) in ranks.iter().zip(&translated) {
            let want = if r == PROC_NULL {
                PROC_NULL
            } else {
                let w = expected[r as usize];
                other
                    .iter()
                    .position(|&x| x == w)
                    .map_or(UNDEFINED, |p| p as u32)
            };
            prop_assert_eq!(t, want);
        }
        prop_assert_eq!(result.compare(&h), model_compare(&expected, &other));
        pool.push((result, expected));
    }
    Ok(reached)
}

fn op() -> impl Strategy<Value = Op> {
    prop::sample::select(vec![
        Op::Incl,
        Op::Excl,
        Op::RangeIncl,
        Op::RangeExcl,
        Op::Union,
        Op::Intersection,
        Op::Difference,
        Op::BadIncl,
        Op::BadRange,
    ])
}

/// Fixed chains, each step drawn from `seed`: the property test's
/// operations without proptest's choice, to measure what they reach.
fn fixed_chain(seed: u64, len: usize) -> Vec<(Op, u64)> {
    let ops = [
        Op::Incl,
        Op::Excl,
        Op::RangeIncl,
        Op::RangeExcl,
        Op::Union,
        Op::Intersection,
        Op::Difference,
    ];
    let mut rng = Rng::new(seed);
    (0..len)
        .map(|_| (ops[rng.below(ops.len() as u32) as usize], rng.next()))
        .collect()
}

#[test]
fn chains_grow_deep_and_get_flattened_under_every_sparse_policy() {
    // The property test's generator must build deep chains, keep some and
    // flatten others, under the automatic policy and each forced sparse
    // kind, or it would not be testing the flattening rule.
    for policy in [
        StoragePolicy::Automatic,
        StoragePolicy::Stride,
        StoragePolicy::Ranges,
        StoragePolicy::Bitmap,
    ] {
        let mut total = Reached::default();
        for seed in 1..=60u64 {
            let reached = run_chain(10_000, policy, &fixed_chain(seed, 24)).unwrap();
            total.depth = total.depth.max(reached.depth);
            total.chained += reached.chained;
            total.flattened += reached.flattened;
        }
        println!("{policy:?}: {total:?}");
        // Forced kinds keep fewer chains (a ranges level over ranges only
        // stays when it has far fewer runs), so three links suffice there.
        let deep = if policy == StoragePolicy::Automatic {
            MAX_DEPTH
        } else {
            3
        };
        assert!(total.depth >= deep, "{policy:?}: {total:?}");
        assert!(
            total.chained > 0 && total.flattened > 0,
            "{policy:?}: {total:?}"
        );
    }
    // Dense groups never chain.
    let dense = run_chain(3000, StoragePolicy::Dense, &fixed_chain(7, 24)).unwrap();
    assert_eq!(dense.depth, 0, "{dense:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn chains_of_operations_match_the_vec_model(
        world_size in prop_oneof![1 => 1u32..=64, 3 => 65u32..=10_000],
        ops in prop::collection::vec((op(), any::<u64>()), 1..16),
    ) {
        for policy in POLICIES {
            run_chain(world_size, policy, &ops)?;
        }
    }
}
