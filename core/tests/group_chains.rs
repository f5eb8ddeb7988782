//! Parent chains and the flattening rule: compositions that collapse into
//! one level, chains that are kept because flattening would cost more
//! than the bound allows, the depth backstop, and the memory guarantees
//! stated in the module doc of `fireopal_core::group`.

use fireopal_core::group::{
    Comparison, Group, RankRange, Representation, StoragePolicy, MAX_DEPTH,
};

fn world(n: u32) -> Group {
    Group::world(n).expect("valid world size")
}

/// World ranks of all members, in group order.
fn members(g: &Group) -> Vec<u32> {
    (0..g.size())
        .map(|r| g.lookup(r).expect("rank < size"))
        .collect()
}

/// Checks `lookup` and `rank_of` of `g` against `model` (world ranks).
fn check(g: &Group, model: &[u32]) {
    assert_eq!(members(g), model, "{g:?}");
    let mut inverse = vec![None; g.world_size() as usize];
    for (r, &w) in model.iter().enumerate() {
        inverse[w as usize] = Some(r as u32);
    }
    for (w, &expected) in inverse.iter().enumerate() {
        assert_eq!(g.rank_of(w as u32), expected, "world rank {w} in {g:?}");
    }
    assert_eq!(g.rank_of(g.world_size()), None);
}

/// Tiny xorshift for random subsets.
fn subset(state: &mut u64, size: u32, percent: u64) -> Vec<u32> {
    (0..size)
        .filter(|_| {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            *state % 100 < percent
        })
        .collect()
}

fn every_other(g: &Group) -> Group {
    g.range_incl(&[RankRange::new(0, g.size() as i32 - 1, 2)])
        .unwrap()
}

fn reversed(g: &Group) -> Group {
    g.range_incl(&[RankRange::new(g.size() as i32 - 1, 0, -1)])
        .unwrap()
}

/// The same members built straight from the world, under `g`'s policy.
fn from_world(g: &Group) -> Group {
    world(g.world_size())
        .with_policy(g.policy())
        .incl(&members(g))
        .unwrap()
}

#[test]
fn strides_of_strides_are_one_stride_over_the_world() {
    let w = world(100_000);
    let header = w.memory_bytes();
    let mut g = w.clone();
    let mut model: Vec<u32> = (0..100_000).collect();
    for step in 0..6 {
        g = if step % 2 == 0 {
            every_other(&g)
        } else {
            reversed(&g)
        };
        model = if step % 2 == 0 {
            model.iter().copied().step_by(2).collect()
        } else {
            model.iter().rev().copied().collect()
        };
        assert_eq!(g.representation(), Representation::Stride, "step {step}");
        assert_eq!(g.depth(), 1, "step {step}");
        assert_eq!(g.memory_bytes(), header, "step {step}");
    }
    check(&g, &model);
}

#[test]
fn strides_over_a_bitmap_compose_onto_the_bitmap() {
    let mut state = 0x0123_4567_89AB_CDEF;
    let w = world(50_000);
    let bitmap = w.incl(&subset(&mut state, 50_000, 50)).unwrap();
    assert_eq!(bitmap.representation(), Representation::Bitmap);
    assert_eq!(bitmap.depth(), 1);
    // A stride over the bitmap costs nothing, its world forms (bitmap or
    // table) far more than twice that: the chain is kept.
    let odd = bitmap
        .range_incl(&[RankRange::new(1, bitmap.size() as i32 - 1, 2)])
        .unwrap();
    assert_eq!(
        (odd.representation(), odd.depth()),
        (Representation::Stride, 2)
    );
    // Reversing it is a stride over the bitmap again, not a third level.
    let back = reversed(&odd);
    assert_eq!(
        (back.representation(), back.depth()),
        (Representation::Stride, 2)
    );
    let model: Vec<u32> = members(&bitmap)
        .into_iter()
        .skip(1)
        .step_by(2)
        .rev()
        .collect();
    check(&back, &model);
    // Reversing back gives `odd`'s members: stored like `odd`.
    let again = reversed(&back);
    assert_eq!(again.compare(&odd), Comparison::Identical);
    assert_eq!(again.depth(), 2);
    // And the whole bitmap group back shares the bitmap node.
    let all = odd.union(&bitmap).unwrap();
    assert_eq!(all.compare(&bitmap), Comparison::Similar);
    let order: Vec<u32> = (0..bitmap.size()).collect();
    let same = bitmap.incl(&order).unwrap();
    assert_eq!(same.memory_bytes(), bitmap.memory_bytes());
    assert_eq!(same.depth(), 1);
}

#[test]
fn bitmaps_of_bitmaps_flatten_while_they_keep_most_of_the_world() {
    let mut state = 0x5EED_5EED_5EED_5EED;
    let w = world(200_000);
    let mut g = w.clone();
    let mut model: Vec<u32> = (0..200_000).collect();
    for step in 0..4 {
        let keep = subset(&mut state, g.size(), 85);
        g = g.incl(&keep).unwrap();
        model = keep.iter().map(|&r| model[r as usize]).collect();
        // A bitmap over the world is less than twice one over the parent.
        assert_eq!(g.representation(), Representation::Bitmap, "step {step}");
        assert_eq!(g.depth(), 1, "step {step}");
        assert_eq!(g.memory_bytes(), from_world(&g).memory_bytes());
    }
    check(&g, &model);
    // Keeping a tenth of a tenth: a bitmap over the world would be over
    // twice one over the parent, so the chain is kept.
    let tenth = subset(&mut state, 200_000, 10);
    let a = w.incl(&tenth).unwrap();
    let keep = subset(&mut state, a.size(), 10);
    let b = a.incl(&keep).unwrap();
    let flat = from_world(&b);
    assert_eq!(b.depth(), 2, "{b:?}");
    assert!(flat.memory_bytes() > 2 * b.memory_bytes());
    check(&b, &members(&flat));
}

#[test]
fn chained_ranges_stay_in_runs_and_flatten_when_runs_allow() {
    let w = world(1_000_000).with_policy(StoragePolicy::Ranges);
    let header = w.memory_bytes();
    // Blocks of 64 in every 128, then the same over that: the world runs
    // are the group's own runs, so it flattens.
    let blocks = |g: &Group| {
        let keep: Vec<u32> = (0..g.size()).filter(|r| r % 128 < 64).collect();
        g.incl(&keep).unwrap()
    };
    let a = blocks(&w);
    let b = blocks(&a);
    assert_eq!((b.representation(), b.depth()), (Representation::Ranges, 1));
    let runs = 1_000_000usize.div_ceil(256);
    assert_eq!(b.memory_bytes(), header + 8 * runs);
    // A few long runs over a group of many short ones: kept, and O(runs).
    let c = b
        .range_incl(&[
            RankRange::new(1000, 99_999, 1),
            RankRange::new(150_000, 199_999, 1),
        ])
        .unwrap();
    assert_eq!((c.representation(), c.depth()), (Representation::Ranges, 2));
    assert_eq!(c.memory_bytes(), header + 2 * 8);
    let model: Vec<u32> = (1000..100_000)
        .chain(150_000..200_000)
        .map(|r| b.lookup(r).unwrap())
        .collect();
    assert_eq!(members(&c), model);
    assert!(from_world(&c).memory_bytes() > 2 * c.memory_bytes());
}

#[test]
fn chains_never_exceed_the_depth_bound() {
    // Each step is cheap over its parent and dear over anything flatter:
    // every other rank (a stride), then two long runs (ranges), over a
    // random bitmap. The chain grows to the bound, then the next group is
    // stored over a base that leaves it within the bound.
    let mut state = 0xFEED_FACE_CAFE_BEEF;
    let w = world(40_000);
    let keep = subset(&mut state, 40_000, 50);
    let mut g = w.incl(&keep).unwrap();
    let mut model = keep.clone();
    let mut depths = vec![g.depth()];
    for step in 0..8 {
        let n = g.size();
        let ranks: Vec<u32> = if step % 2 == 0 {
            (0..n).step_by(2).collect()
        } else {
            (0..n).filter(|&r| r < n / 3 || r >= 2 * n / 3).collect()
        };
        g = g.incl(&ranks).unwrap();
        model = ranks.iter().map(|&r| model[r as usize]).collect();
        assert!(g.depth() <= MAX_DEPTH, "{g:?}");
        assert!(g.memory_bytes() <= from_world(&g).memory_bytes(), "{g:?}");
        depths.push(g.depth());
        check(&g, &model);
    }
    assert!(depths.contains(&MAX_DEPTH), "{depths:?}");
    assert!(
        depths.windows(2).any(|d| d[1] <= d[0]),
        "the bound stopped the growth: {depths:?}"
    );
}

#[test]
fn forced_kinds_flatten_within_their_kind() {
    let mut state = 0xABCD_EF01_2345_6789;
    let w = world(100_000);
    for policy in [StoragePolicy::Bitmap, StoragePolicy::Ranges] {
        let mut g = w.with_policy(policy);
        let mut model: Vec<u32> = (0..100_000).collect();
        for _ in 0..4 {
            let keep = subset(&mut state, g.size(), 90);
            g = g.incl(&keep).unwrap();
            model = keep.iter().map(|&r| model[r as usize]).collect();
            let kind = match policy {
                StoragePolicy::Bitmap => Representation::Bitmap,
                _ => Representation::Ranges,
            };
            assert_eq!(g.representation(), kind, "{g:?}");
            let flat = from_world(&g);
            assert_eq!(flat.representation(), kind);
            if policy == StoragePolicy::Bitmap {
                // A bitmap over the world is within the bound: taken, and
                // it is what building from the world gives.
                assert_eq!(g.depth(), 1, "{g:?}");
                assert_eq!(g.memory_bytes(), flat.memory_bytes());
            } else {
                // Random breaks add up level by level: ranges over the
                // world may exceed the bound, never the group itself.
                assert!(g.memory_bytes() <= flat.memory_bytes(), "{g:?}");
            }
        }
        check(&g, &model);
    }
    // A forced stride that only the parent can hold stays over it.
    let every_third: Vec<u32> = (0..100_000).filter(|r| r % 3 != 0).collect();
    let base = w.incl(&every_third).unwrap();
    let strided = base
        .with_policy(StoragePolicy::Stride)
        .range_incl(&[RankRange::new(0, base.size() as i32 - 1, 1)])
        .unwrap();
    assert_eq!(strided.compare(&base), Comparison::Identical);
    let half = base
        .with_policy(StoragePolicy::Stride)
        .range_incl(&[RankRange::new(0, base.size() as i32 / 2, 1)])
        .unwrap();
    assert_eq!(
        (half.representation(), half.depth()),
        (Representation::Stride, base.depth() + 1)
    );
}

#[test]
fn memory_stays_within_the_flattening_bound() {
    // Whatever the chain, a group costs no more than the same members
    // built from the world, and a kept chain means the world form costs
    // more than FLATTEN_FACTOR times the group.
    let mut state = 0x1357_9BDF_2468_ACE0;
    let w = world(30_000);
    let a = w.incl(&subset(&mut state, 30_000, 60)).unwrap();
    let b = every_other(&a);
    let c = b.incl(&subset(&mut state, b.size(), 70)).unwrap();
    let d = reversed(&c);
    for g in [&a, &b, &c, &d] {
        let flat = from_world(g);
        assert!(g.memory_bytes() <= flat.memory_bytes(), "{g:?}");
        if g.depth() >= 2 {
            // Kept: the world form is over FLATTEN_FACTOR times the
            // smallest form, itself at most the group's size.
            assert!(flat.memory_bytes() > g.memory_bytes(), "{g:?}");
        }
        check(g, &members(&flat));
    }
}
