//! The parts of the group API a communicator builds on: MPI's triplet
//! rule for `range_incl`/`range_excl` against a naive model, the empty
//! group in every operation, the members walked (`members`,
//! `world_ranks`) against `lookup` in every representation and chain, and
//! `translate_ranks_into` with `PROC_NULL` and `UNDEFINED`.

use fireopal_core::group::{
    Comparison, Group, LengthError, RangeError, RankRange, Representation, SetOpError,
    StoragePolicy, TranslateError, PROC_NULL, UNDEFINED,
};
use proptest::prelude::*;

fn world(n: u32) -> Group {
    Group::world(n).expect("valid world size")
}

/// World ranks of all members by `lookup`, one rank at a time.
fn looked_up(g: &Group) -> Vec<u32> {
    (0..g.size())
        .map(|r| g.lookup(r).expect("rank < size"))
        .collect()
}

/// Tiny xorshift for subsets and shuffles.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn subset(&mut self, size: u32, percent: u64) -> Vec<u32> {
        (0..size).filter(|_| self.next() % 100 < percent).collect()
    }
    fn shuffle(&mut self, v: &mut [u32]) {
        for i in (1..v.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }
}

// ---------------------------------------------------------------------
// Ranges follow MPI.

/// What MPI 4.0 §7.3.2 says `range_incl` computes, written naively: per
/// triplet, `first + k * stride` for k = 0, 1, … while it has not passed
/// `last` in the stride's direction; each must be a rank of the group and
/// not computed before; a zero stride, or a `first` beyond `last` in the
/// stride's direction (as MPICH has it), is an error. The first problem in
/// order is the answer (the walk stops there, so huge triplets end fast).
fn model(ranges: &[RankRange], size: u32) -> Result<Vec<u32>, RangeError> {
    let mut seen = vec![false; size as usize];
    let mut out = Vec::new();
    for (triplet, r) in ranges.iter().enumerate() {
        let (f, l, s) = (i64::from(r.first), i64::from(r.last), i64::from(r.stride));
        if s == 0 {
            return Err(RangeError::ZeroStride { triplet });
        }
        if (s > 0 && f > l) || (s < 0 && f < l) {
            return Err(RangeError::WrongDirection { triplet });
        }
        let mut x = f;
        while (s > 0 && x <= l) || (s < 0 && x >= l) {
            if x < 0 || x >= i64::from(size) {
                return Err(RangeError::OutOfRange {
                    triplet,
                    rank: x as i32,
                    size,
                });
            }
            if std::mem::replace(&mut seen[x as usize], true) {
                return Err(RangeError::Duplicate {
                    triplet,
                    rank: x as u32,
                });
            }
            out.push(x as u32);
            x += s;
        }
    }
    Ok(out)
}

/// A bound or start: mostly near the group, sometimes far off either way.
fn endpoint() -> impl Strategy<Value = i32> {
    prop_oneof![
        8 => -6i32..46,
        1 => Just(i32::MIN),
        1 => Just(i32::MAX),
        1 => any::<i32>(),
    ]
}

fn stride() -> impl Strategy<Value = i32> {
    prop_oneof![
        8 => -7i32..=7,
        1 => -60i32..=60,
        1 => Just(i32::MIN),
        1 => Just(i32::MAX),
    ]
}

fn triplets() -> impl Strategy<Value = Vec<RankRange>> {
    prop::collection::vec(
        (endpoint(), endpoint(), stride()).prop_map(|(f, l, s)| RankRange::new(f, l, s)),
        0..5,
    )
}

/// Groups of `size` members stored in different forms, so the triplet
/// rule is seen to depend on ranks only.
fn bases(size: u32) -> Vec<Group> {
    let w = world(size.max(1) * 3);
    let strided: Vec<u32> = (0..size).map(|i| 3 * i + 1).collect();
    let mut scattered = strided.clone();
    Rng(u64::from(size) + 7).shuffle(&mut scattered);
    vec![
        world(size),
        w.incl(&strided).unwrap(),
        w.with_policy(StoragePolicy::Bitmap).incl(&strided).unwrap(),
        w.incl(&scattered).unwrap(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn range_incl_and_excl_follow_the_mpi_model(
        size in 0u32..40,
        ranges in triplets(),
    ) {
        let want = model(&ranges, size);
        for g in bases(size) {
            let members = looked_up(&g);
            match &want {
                Ok(ranks) => {
                    let inc = g.range_incl(&ranges).unwrap();
                    let expected: Vec<u32> =
                        ranks.iter().map(|&r| members[r as usize]).collect();
                    prop_assert_eq!(looked_up(&inc), expected);
                    let exc = g.range_excl(&ranges).unwrap();
                    let kept: Vec<u32> = (0..size)
                        .filter(|r| !ranks.contains(r))
                        .map(|r| members[r as usize])
                        .collect();
                    prop_assert_eq!(looked_up(&exc), kept);
                }
                Err(e) => {
                    prop_assert_eq!(g.range_incl(&ranges).unwrap_err(), *e);
                    prop_assert_eq!(g.range_excl(&ranges).unwrap_err(), *e);
                }
            }
        }
    }

    #[test]
    fn valid_triplets_with_far_bounds_match_their_tight_form(
        size in 1u32..200,
        first in 0u32..200,
        magnitude in prop_oneof![1i32..300, 1i32..=i32::MAX],
        down in any::<bool>(),
        slack in 0i64..(1 << 31),
    ) {
        // Any `last` between the last computed rank and the next one the
        // stride would reach (inside or outside the group, negative too)
        // computes the same ranks as the tight triplet.
        let first = (first % size) as i32;
        let stride = if down { -magnitude } else { magnitude };
        let mut ranks = Vec::new();
        let mut x = i64::from(first);
        while (0..i64::from(size)).contains(&x) {
            ranks.push(x as u32);
            x += i64::from(stride);
        }
        let end = i64::from(*ranks.last().unwrap() as i32);
        // From `end` to just before `x`, then clamped into an i32.
        let room = (x - end).abs() - 1;
        let last = end + i64::from(stride.signum()) * (slack % (room + 1));
        let last = last.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
        let w = world(size);
        let g = w.range_incl(&[RankRange::new(first, last, stride)]).unwrap();
        prop_assert_eq!(looked_up(&g), ranks.clone());
        let tight = w
            .range_incl(&[RankRange::new(first, end as i32, stride)])
            .unwrap();
        prop_assert_eq!(g.compare(&tight), Comparison::Identical);
    }
}

#[test]
fn range_model_cases_from_the_standard() {
    // The examples the model must get right, checked by hand.
    assert_eq!(model(&[RankRange::new(0, 1, 2)], 1), Ok(vec![0]));
    assert_eq!(model(&[RankRange::new(6, -1, -3)], 7), Ok(vec![6, 3, 0]));
    assert_eq!(
        model(&[RankRange::new(2, 8, -1)], 10),
        Err(RangeError::WrongDirection { triplet: 0 })
    );
    assert_eq!(
        model(&[RankRange::new(0, 4, 2), RankRange::new(4, 3, -1)], 5),
        Err(RangeError::Duplicate {
            triplet: 1,
            rank: 4
        })
    );
    assert_eq!(
        model(&[RankRange::new(1, -2, -1)], 5),
        Err(RangeError::OutOfRange {
            triplet: 0,
            rank: -1,
            size: 5
        })
    );
    // And the library agrees on each.
    let five = world(5);
    assert_eq!(
        five.range_incl(&[RankRange::new(1, -2, -1)]).unwrap_err(),
        RangeError::OutOfRange {
            triplet: 0,
            rank: -1,
            size: 5
        }
    );
    assert_eq!(
        looked_up(&world(7).range_incl(&[RankRange::new(6, -1, -3)]).unwrap()),
        [6, 3, 0]
    );
}

// ---------------------------------------------------------------------
// The empty group.

#[test]
fn the_empty_group_is_accepted_by_every_operation() {
    let e = Group::empty();
    assert_eq!((e.size(), e.world_size()), (0, 0));
    assert!(e.is_empty());
    assert_eq!(e.lookup(0), None);
    assert_eq!(e.rank_of(0), None);
    assert_eq!(e.members().len(), 0);
    assert_eq!(e.world_ranks(&mut []), Ok(()));
    assert_eq!(e.compare(&Group::world(0).unwrap()), Comparison::Identical);

    // incl, excl and the ranges of nothing.
    assert!(e.incl(&[]).unwrap().is_empty());
    assert!(e.excl(&[]).unwrap().is_empty());
    assert!(e.range_incl(&[]).unwrap().is_empty());
    assert!(e.range_excl(&[]).unwrap().is_empty());
    assert!(e.incl(&[0]).is_err());

    let w = world(10);
    let g = w.incl(&[7, 2, 5]).unwrap();
    let ident = |a: &Group, b: &Group| a.compare(b) == Comparison::Identical;
    for other in [&g, &w, &e, &w.incl(&[]).unwrap()] {
        // union with empty is the other group, either way round.
        assert!(ident(&e.union(other).unwrap(), other), "{other:?}");
        assert!(ident(&other.union(&e).unwrap(), other), "{other:?}");
        // intersection with empty is empty; difference leaves the other.
        assert!(e.intersection(other).unwrap().is_empty());
        assert!(other.intersection(&e).unwrap().is_empty());
        assert!(e.difference(other).unwrap().is_empty());
        assert!(ident(&other.difference(&e).unwrap(), other), "{other:?}");
        // compare: only empty groups are identical to it.
        let want = if other.is_empty() {
            Comparison::Identical
        } else {
            Comparison::Unequal
        };
        assert_eq!(e.compare(other), want);
        assert_eq!(other.compare(&e), want);
    }
    // The union keeps the other group's order and world.
    let u = e.union(&g).unwrap();
    assert_eq!(looked_up(&u), [7, 2, 5]);
    assert_eq!(u.world_size(), 10);
    // Empty results of any world are MPI_GROUP_EMPTY too.
    let none = g.difference(&g).unwrap();
    assert_eq!(none.compare(&e), Comparison::Identical);
    assert_eq!(
        world(3)
            .excl(&[0, 1, 2])
            .unwrap()
            .compare(&world(4).range_excl(&[RankRange::new(0, 3, 1)]).unwrap()),
        Comparison::Identical
    );

    // Translations into and out of the empty group.
    assert_eq!(
        g.translate_ranks(&[0, PROC_NULL, 2], &e).unwrap(),
        [UNDEFINED, PROC_NULL, UNDEFINED]
    );
    assert_eq!(e.translate_ranks(&[PROC_NULL], &g).unwrap(), [PROC_NULL]);
    assert_eq!(e.translate_ranks(&[], &g).unwrap(), []);
    assert_eq!(
        e.translate_ranks(&[0], &g).unwrap_err(),
        TranslateError::OutOfRange {
            index: 0,
            rank: 0,
            size: 0
        }
    );

    // Non-empty groups of different worlds are still refused.
    let other_world = world(11).incl(&[1]).unwrap();
    assert_eq!(
        g.union(&other_world).unwrap_err(),
        SetOpError::DifferentWorlds {
            left: 10,
            right: 11
        }
    );
    // But an empty group of another world is not.
    assert!(ident(&g.union(&world(11).incl(&[]).unwrap()).unwrap(), &g));
}

// ---------------------------------------------------------------------
// Members walked.

/// Checks `members`, `world_ranks` and skipping against `lookup`.
fn check_members(g: &Group) {
    let want = looked_up(g);
    let walk = g.members();
    assert_eq!(walk.len(), want.len(), "{g:?}");
    assert_eq!(walk.collect::<Vec<_>>(), want, "{g:?}");
    let mut table = vec![UNDEFINED; want.len()];
    g.world_ranks(&mut table).unwrap();
    assert_eq!(table, want, "{g:?}");
    // Lengths other than the size are refused, and nothing is written.
    for len in [want.len() + 1, want.len().saturating_sub(1)] {
        if len == want.len() {
            continue;
        }
        let mut wrong = vec![7; len];
        assert_eq!(
            g.world_ranks(&mut wrong),
            Err(LengthError {
                expected: want.len(),
                given: len
            })
        );
        assert!(wrong.iter().all(|&w| w == 7));
    }
    // Skipping (nth) lands where lookup says, across chunk edges, and the
    // length stays exact.
    for skip in [0usize, 1, 63, 64, 65, 127, 128, 1000, want.len() / 2] {
        let mut it = g.members();
        assert_eq!(it.nth(skip), want.get(skip).copied(), "{g:?} nth {skip}");
        assert_eq!(it.len(), want.len().saturating_sub(skip + 1));
        let rest: Vec<u32> = it.collect();
        assert_eq!(
            rest,
            want.get(skip + 1..).unwrap_or(&[]),
            "{g:?} after {skip}"
        );
    }
    // Interleaved next and nth.
    let mut it = g.members();
    let mut at = 0usize;
    loop {
        let got = if at % 3 == 0 {
            it.next()
        } else {
            it.nth(at % 70)
        };
        let pos = if at % 3 == 0 { at } else { at + at % 70 };
        // `at` counts positions consumed before this call.
        let expected = want.get(pos).copied();
        assert_eq!(got, expected, "{g:?} at {pos}");
        if got.is_none() {
            assert_eq!(it.next(), None);
            break;
        }
        at = pos + 1;
    }
}

#[test]
fn members_walk_equals_lookup_in_every_representation() {
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let w = world(20_000);
    let mut seen = std::collections::HashSet::new();
    let mut groups = vec![w.clone(), Group::empty(), w.incl(&[]).unwrap()];
    for policy in [
        StoragePolicy::Automatic,
        StoragePolicy::Dense,
        StoragePolicy::Stride,
        StoragePolicy::Ranges,
        StoragePolicy::Bitmap,
    ] {
        let w = w.with_policy(policy);
        let mut shuffled = rng.subset(20_000, 30);
        rng.shuffle(&mut shuffled);
        let blocks: Vec<u32> = (0..20_000).filter(|r| r % 100 < 37).collect();
        let descending: Vec<u32> = (0..20_000).rev().filter(|r| r % 50 >= 10).collect();
        for g in [
            w.range_incl(&[RankRange::new(3, 19_999, 7)]).unwrap(),
            w.range_incl(&[RankRange::new(19_990, -1, -3)]).unwrap(),
            w.incl(&blocks).unwrap(),
            w.incl(&descending).unwrap(),
            w.incl(&rng.subset(20_000, 50)).unwrap(),
            w.incl(&rng.subset(20_000, 2)).unwrap(),
            w.incl(&shuffled).unwrap(),
            w.incl(&[19_999]).unwrap(),
        ] {
            groups.push(g);
        }
    }
    // Chains: each group above, then a few operations on it, so that
    // every form also serves as a base below another.
    let tops = groups.clone();
    for g in &tops {
        let mut level = g.clone();
        for step in 0..4 {
            if level.is_empty() {
                // No triplet of an empty group runs towards its `last`.
                break;
            }
            let n = level.size() as i32;
            let next = match step {
                0 => level.range_incl(&[RankRange::new(0, n - 1, 2)]),
                1 => level.range_incl(&[RankRange::new(n - 1, 0, -1)]),
                2 => {
                    let keep: Vec<u32> = (0..level.size()).filter(|r| r % 200 >= 30).collect();
                    Ok(level.incl(&keep).unwrap())
                }
                _ => {
                    let keep = rng.subset(level.size(), 80);
                    Ok(level.incl(&keep).unwrap())
                }
            };
            level = next.unwrap();
            groups.push(level.clone());
        }
    }
    for g in &groups {
        seen.insert((g.representation(), g.depth().min(2)));
        check_members(g);
    }
    // Every form was walked, over the world and over another base.
    for kind in [
        Representation::Dense,
        Representation::Stride,
        Representation::Ranges,
        Representation::Bitmap,
    ] {
        let depth = u32::from(kind != Representation::Dense);
        assert!(
            seen.contains(&(kind, depth)),
            "{kind:?} at {depth}: {seen:?}"
        );
        if kind != Representation::Dense {
            assert!(seen.contains(&(kind, 2)), "{kind:?} chained: {seen:?}");
        }
    }
    assert!(seen.contains(&(Representation::World, 0)));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn members_walk_equals_lookup_for_random_groups(
        n in 1u32..3000,
        seed in any::<u64>(),
        percents in prop::collection::vec(1u64..=100, 1..5),
        shuffle in any::<bool>(),
    ) {
        let mut rng = Rng(seed | 1);
        let mut g = world(n);
        for &percent in &percents {
            let mut keep = rng.subset(g.size(), percent);
            if shuffle && percent < 50 {
                rng.shuffle(&mut keep);
            }
            g = g.incl(&keep).unwrap();
            let walked: Vec<u32> = g.members().collect();
            prop_assert_eq!(walked, looked_up(&g), "{:?}", g);
        }
    }
}

// ---------------------------------------------------------------------
// translate_ranks_into.

#[test]
fn translate_into_a_slice_maps_proc_null_and_non_members() {
    let w = world(10);
    let a = w.incl(&[4, 8, 2, 6]).unwrap();
    let b = w.range_incl(&[RankRange::new(6, 3, -1)]).unwrap(); // 6 5 4 3
    let ranks = [0, 1, PROC_NULL, 3, 2, 0];
    let mut out = [0u32; 6];
    a.translate_ranks_into(&ranks, &b, &mut out).unwrap();
    assert_eq!(out, [2, UNDEFINED, PROC_NULL, 0, UNDEFINED, 2]);
    assert_eq!(a.translate_ranks(&ranks, &b).unwrap(), out);
    // Into the world: the world ranks; into itself: the identity.
    let mut out = [0u32; 4];
    a.translate_ranks_into(&[0, 1, 2, 3], &w, &mut out).unwrap();
    assert_eq!(out, [4, 8, 2, 6]);
    a.translate_ranks_into(&[3, 2, 1, 0], &a, &mut out).unwrap();
    assert_eq!(out, [3, 2, 1, 0]);
    // Nothing to translate.
    a.translate_ranks_into(&[], &b, &mut []).unwrap();

    // The constants are distinct and above every rank.
    const {
        assert!(PROC_NULL != UNDEFINED);
        assert!(PROC_NULL > fireopal_core::group::MAX_WORLD_SIZE);
        assert!(UNDEFINED > fireopal_core::group::MAX_WORLD_SIZE);
    }
}

#[test]
fn translate_into_a_slice_refuses_bad_input_without_panicking() {
    let w = world(10);
    let a = w.incl(&[4, 8, 2, 6]).unwrap();
    let b = w.incl(&[6, 5, 4]).unwrap();
    let mut short = [0u32; 2];
    assert_eq!(
        a.translate_ranks_into(&[0, 1, 2], &b, &mut short),
        Err(TranslateError::OutputLength {
            expected: 3,
            given: 2
        })
    );
    let mut long = [0u32; 4];
    assert_eq!(
        a.translate_ranks_into(&[0, 1, 2], &b, &mut long),
        Err(TranslateError::OutputLength {
            expected: 3,
            given: 4
        })
    );
    // UNDEFINED and ranks past the group are not ranks: the error names
    // the first; the translations before it are written.
    let mut out = [99u32; 4];
    assert_eq!(
        a.translate_ranks_into(&[0, PROC_NULL, UNDEFINED, 9], &b, &mut out),
        Err(TranslateError::OutOfRange {
            index: 2,
            rank: UNDEFINED,
            size: 4
        })
    );
    assert_eq!(out[..2], [2, PROC_NULL]);
    let mut out = [0u32; 1];
    assert_eq!(
        a.translate_ranks_into(&[0], &world(3).incl(&[0]).unwrap(), &mut out),
        Err(TranslateError::DifferentWorlds { left: 10, right: 3 })
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn translate_into_matches_a_model(
        n in 1u32..500,
        seed in any::<u64>(),
        pa in 0u64..=100,
        pb in 0u64..=100,
        picks in prop::collection::vec(any::<u32>(), 0..80),
    ) {
        let mut rng = Rng(seed | 1);
        let w = world(n);
        let mut la = rng.subset(n, pa);
        rng.shuffle(&mut la);
        let lb = rng.subset(n, pb);
        let (a, b) = (w.incl(&la).unwrap(), w.incl(&lb).unwrap());
        // Valid ranks of `a` and PROC_NULL, in any order and repeated.
        let ranks: Vec<u32> = picks
            .iter()
            .filter_map(|&p| match (p % 7, la.len() as u32) {
                (0, _) => Some(PROC_NULL),
                (_, 0) => None,
                (_, len) => Some(p % len),
            })
            .collect();
        let mut out = vec![0; ranks.len()];
        a.translate_ranks_into(&ranks, &b, &mut out).unwrap();
        for (&r, &t) in ranks.iter().zip(&out) {
            let want = if r == PROC_NULL {
                PROC_NULL
            } else {
                let world_rank = la[r as usize];
                lb.iter()
                    .position(|&x| x == world_rank)
                    .map_or(UNDEFINED, |p| p as u32)
            };
            prop_assert_eq!(t, want);
        }
    }
}
