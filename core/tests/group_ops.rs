//! One test per MPI group operation: results, order rules, edge cases and
//! every refused input.

use fireopal_core::group::{
    Comparison, Group, RangeError, RankListError, RankRange, Representation, SetOpError,
    StoragePolicy, TranslateError, WorldError, MAX_WORLD_SIZE, PROC_NULL, UNDEFINED,
};

/// World ranks of all members, in group order.
fn members(g: &Group) -> Vec<u32> {
    (0..g.size())
        .map(|r| g.lookup(r).expect("rank < size"))
        .collect()
}

/// Checks `rank_of` over the whole world against the member list.
fn check_rank_of(g: &Group) {
    let list = members(g);
    for w in 0..g.world_size() + 2 {
        let expected = list.iter().position(|&m| m == w).map(|i| i as u32);
        assert_eq!(g.rank_of(w), expected, "world rank {w} in {g:?}");
    }
}

fn world(n: u32) -> Group {
    Group::world(n).expect("valid world size")
}

#[test]
fn world_is_the_identity_and_stored_in_constant_space() {
    let small = world(10);
    let big = world(MAX_WORLD_SIZE);
    assert_eq!(small.size(), 10);
    assert_eq!(small.lookup(9), Some(9));
    assert_eq!(small.lookup(10), None);
    assert_eq!(small.rank_of(3), Some(3));
    assert_eq!(small.rank_of(10), None);
    assert_eq!(small.representation(), Representation::World);
    assert_eq!(small.depth(), 0);
    assert_eq!(small.memory_bytes(), big.memory_bytes());
    assert_eq!(big.lookup(MAX_WORLD_SIZE - 1), Some(MAX_WORLD_SIZE - 1));
    assert_eq!(
        Group::world(MAX_WORLD_SIZE + 1).unwrap_err(),
        WorldError::TooLarge {
            size: MAX_WORLD_SIZE + 1
        }
    );
    let empty_world = world(0);
    assert_eq!(empty_world.size(), 0);
    assert_eq!(empty_world.lookup(0), None);
}

#[test]
fn incl_keeps_the_given_order() {
    let w = world(20);
    let g = w.incl(&[7, 3, 19, 0]).unwrap();
    assert_eq!(members(&g), [7, 3, 19, 0]);
    check_rank_of(&g);
    // Ranks are relative to the group incl is called on.
    let h = g.incl(&[2, 0]).unwrap();
    assert_eq!(members(&h), [19, 7]);
    check_rank_of(&h);
}

#[test]
fn incl_of_nothing_is_the_empty_group() {
    let g = world(50).incl(&[]).unwrap();
    assert_eq!(g.size(), 0);
    assert_eq!(g.lookup(0), None);
    check_rank_of(&g);
    assert_eq!(g.incl(&[]).unwrap().size(), 0);
}

#[test]
fn incl_of_everyone_in_order_shares_the_parent() {
    let w = world(8);
    let g = w.incl(&[0, 1, 2, 3, 4, 5, 6, 7]).unwrap();
    assert_eq!(g.representation(), Representation::World);
    assert_eq!(g.compare(&w), Comparison::Identical);
}

#[test]
fn incl_refuses_bad_ranks() {
    let g = world(10).incl(&[4, 5, 6]).unwrap();
    assert_eq!(
        g.incl(&[0, 3]).unwrap_err(),
        RankListError::OutOfRange {
            index: 1,
            rank: 3,
            size: 3
        }
    );
    assert_eq!(
        g.incl(&[2, 0, 2]).unwrap_err(),
        RankListError::Duplicate { index: 2, rank: 2 }
    );
    assert_eq!(
        g.incl(&[u32::MAX]).unwrap_err(),
        RankListError::OutOfRange {
            index: 0,
            rank: u32::MAX,
            size: 3
        }
    );
    assert!(world(0).incl(&[0]).is_err());
}

#[test]
fn excl_keeps_the_group_order() {
    let g = world(10).incl(&[9, 2, 5, 7, 1]).unwrap();
    let h = g.excl(&[3, 0]).unwrap();
    assert_eq!(members(&h), [2, 5, 1]);
    check_rank_of(&h);
    let none = g.excl(&[]).unwrap();
    assert_eq!(none.compare(&g), Comparison::Identical);
}

#[test]
fn excl_of_everyone_is_the_empty_group() {
    let w = world(6);
    let g = w.excl(&[5, 4, 3, 2, 1, 0]).unwrap();
    assert_eq!(g.size(), 0);
    check_rank_of(&g);
}

#[test]
fn excl_refuses_bad_ranks() {
    let w = world(4);
    assert_eq!(
        w.excl(&[1, 4]).unwrap_err(),
        RankListError::OutOfRange {
            index: 1,
            rank: 4,
            size: 4
        }
    );
    assert_eq!(
        w.excl(&[3, 3]).unwrap_err(),
        RankListError::Duplicate { index: 1, rank: 3 }
    );
}

#[test]
fn range_incl_expands_triplets_in_order() {
    let w = world(30);
    let g = w
        .range_incl(&[
            RankRange::new(0, 9, 4),    // 0 4 8
            RankRange::new(20, 20, 3),  // 20
            RankRange::new(15, 11, -2), // 15 13 11
        ])
        .unwrap();
    assert_eq!(members(&g), [0, 4, 8, 20, 15, 13, 11]);
    check_rank_of(&g);
    // A stride larger than the span still names `first`.
    let one = w.range_incl(&[RankRange::new(5, 6, 100)]).unwrap();
    assert_eq!(members(&one), [5]);
}

#[test]
fn reversed_range_incl_is_one_negative_stride() {
    let w = world(1000);
    let g = w.range_incl(&[RankRange::new(999, 0, -1)]).unwrap();
    assert_eq!(g.size(), 1000);
    assert_eq!(g.lookup(0), Some(999));
    assert_eq!(g.lookup(999), Some(0));
    assert_eq!(g.representation(), Representation::Stride);
    check_rank_of(&g);
    assert_eq!(g.compare(&w), Comparison::Similar);
    // Reversing the reversed group gives the world order back.
    let back = g.range_incl(&[RankRange::new(999, 0, -1)]).unwrap();
    assert_eq!(back.compare(&w), Comparison::Identical);
    assert_eq!(back.representation(), Representation::World);
}

#[test]
fn range_incl_of_nothing_is_the_empty_group() {
    let g = world(5).range_incl(&[]).unwrap();
    assert_eq!(g.size(), 0);
}

#[test]
fn range_incl_refuses_bad_triplets() {
    let w = world(10);
    assert_eq!(
        w.range_incl(&[RankRange::new(0, 1, 1), RankRange::new(3, 5, 0)])
            .unwrap_err(),
        RangeError::ZeroStride { triplet: 1 }
    );
    assert_eq!(
        w.range_incl(&[RankRange::new(10, 2, -1)]).unwrap_err(),
        RangeError::OutOfRange {
            triplet: 0,
            rank: 10,
            size: 10
        }
    );
    // `last` past the group is fine, but not a computed rank past it.
    assert_eq!(
        w.range_incl(&[RankRange::new(0, 12, 5)]).unwrap_err(),
        RangeError::OutOfRange {
            triplet: 0,
            rank: 10,
            size: 10
        }
    );
    assert_eq!(
        w.range_incl(&[RankRange::new(1, -3, -1)]).unwrap_err(),
        RangeError::OutOfRange {
            triplet: 0,
            rank: -1,
            size: 10
        }
    );
    assert_eq!(
        w.range_incl(&[RankRange::new(0, 2, 1), RankRange::new(-4, 0, 2)])
            .unwrap_err(),
        RangeError::OutOfRange {
            triplet: 1,
            rank: -4,
            size: 10
        }
    );
    assert_eq!(
        w.range_incl(&[RankRange::new(0, 9, 3), RankRange::new(7, 5, -1)])
            .unwrap_err(),
        RangeError::Duplicate {
            triplet: 1,
            rank: 6
        }
    );
    // Overlap within one triplet cannot happen, across two it can.
    assert_eq!(
        w.range_incl(&[RankRange::new(9, 0, -3), RankRange::new(0, 0, 1)])
            .unwrap_err(),
        RangeError::Duplicate {
            triplet: 1,
            rank: 0
        }
    );
}

#[test]
fn range_triplets_follow_mpi_computed_ranks_only() {
    // MPI 4.0 §7.3.2: only the ranks a triplet computes must be valid.
    let one = world(1);
    let g = one.range_incl(&[RankRange::new(0, 1, 2)]).unwrap();
    assert_eq!(members(&g), [0]);
    assert_eq!(
        one.range_excl(&[RankRange::new(0, 1, 2)]).unwrap().size(),
        0
    );
    let w = world(10);
    // `last` past the group, skipped by the stride.
    assert_eq!(
        members(&w.range_incl(&[RankRange::new(1, 12, 4)]).unwrap()),
        [1, 5, 9]
    );
    // A negative `last`, skipped by a negative stride.
    assert_eq!(
        members(&w.range_incl(&[RankRange::new(8, -1, -4)]).unwrap()),
        [8, 4, 0]
    );
    assert_eq!(
        members(&w.range_incl(&[RankRange::new(9, -1, -6)]).unwrap()),
        [9, 3]
    );
    // A stride past `last` in either direction computes `first` alone.
    assert_eq!(
        members(&w.range_incl(&[RankRange::new(0, 9, i32::MAX)]).unwrap()),
        [0]
    );
    assert_eq!(
        members(&w.range_incl(&[RankRange::new(9, 0, i32::MIN)]).unwrap()),
        [9]
    );
    // `first` beyond `last` in the stride's direction runs away from
    // `last`: refused wherever the two lie, as MPICH refuses it.
    for away in [
        RankRange::new(2, 8, -1),
        RankRange::new(8, 2, 3),
        RankRange::new(50, -50, 1),
        RankRange::new(-50, 50, -1),
        RankRange::new(i32::MAX, i32::MIN, 1),
    ] {
        let e = w
            .range_incl(&[RankRange::new(3, 3, 1), away, RankRange::new(5, 6, 1)])
            .unwrap_err();
        assert_eq!(e, RangeError::WrongDirection { triplet: 1 }, "{away:?}");
        let e = w.range_excl(&[away]).unwrap_err();
        assert_eq!(e, RangeError::WrongDirection { triplet: 0 }, "{away:?}");
    }
    // Even over the empty group.
    assert_eq!(
        Group::empty()
            .range_incl(&[RankRange::new(4, 0, 1)])
            .unwrap_err(),
        RangeError::WrongDirection { triplet: 0 }
    );
    assert_eq!(
        Group::empty()
            .range_incl(&[RankRange::new(0, 0, 1)])
            .unwrap_err(),
        RangeError::OutOfRange {
            triplet: 0,
            rank: 0,
            size: 0
        }
    );
}

#[test]
fn range_excl_keeps_the_group_order() {
    let w = world(12);
    let g = w
        .range_excl(&[RankRange::new(11, 1, -2), RankRange::new(0, 0, 1)])
        .unwrap();
    assert_eq!(members(&g), [2, 4, 6, 8, 10]);
    check_rank_of(&g);
}

#[test]
fn range_excl_of_everyone_is_the_empty_group() {
    let w = world(7);
    let g = w.range_excl(&[RankRange::new(6, 0, -1)]).unwrap();
    assert_eq!(g.size(), 0);
    check_rank_of(&g);
}

#[test]
fn range_excl_refuses_bad_triplets() {
    let w = world(10);
    assert_eq!(
        w.range_excl(&[RankRange::new(0, 0, 0)]).unwrap_err(),
        RangeError::ZeroStride { triplet: 0 }
    );
    assert_eq!(
        w.range_excl(&[RankRange::new(0, 10, 1)]).unwrap_err(),
        RangeError::OutOfRange {
            triplet: 0,
            rank: 10,
            size: 10
        }
    );
    assert_eq!(
        w.range_excl(&[RankRange::new(3, 3, 1), RankRange::new(-1, -1, 1)])
            .unwrap_err(),
        RangeError::OutOfRange {
            triplet: 1,
            rank: -1,
            size: 10
        }
    );
    assert_eq!(
        w.range_excl(&[RankRange::new(3, 2, 1)]).unwrap_err(),
        RangeError::WrongDirection { triplet: 0 }
    );
    assert_eq!(
        w.range_excl(&[RankRange::new(1, 3, 1), RankRange::new(3, 3, 1)])
            .unwrap_err(),
        RangeError::Duplicate {
            triplet: 1,
            rank: 3
        }
    );
}

#[test]
fn union_is_first_group_then_the_rest_of_the_second_in_its_order() {
    let w = world(10);
    let a = w.incl(&[5, 1, 3]).unwrap();
    let b = w.incl(&[3, 7, 1, 0]).unwrap();
    let u = a.union(&b).unwrap();
    assert_eq!(members(&u), [5, 1, 3, 7, 0]);
    check_rank_of(&u);
    let v = b.union(&a).unwrap();
    assert_eq!(members(&v), [3, 7, 1, 0, 5]);
    assert_eq!(u.compare(&v), Comparison::Similar);

    let empty = w.incl(&[]).unwrap();
    assert_eq!(members(&a.union(&empty).unwrap()), [5, 1, 3]);
    assert_eq!(members(&empty.union(&b).unwrap()), [3, 7, 1, 0]);
    assert_eq!(empty.union(&empty).unwrap().size(), 0);
    // A subset adds nothing.
    let sub = w.incl(&[1]).unwrap();
    assert_eq!(a.union(&sub).unwrap().compare(&a), Comparison::Identical);
}

#[test]
fn intersection_keeps_the_first_group_order() {
    let w = world(10);
    let a = w.incl(&[5, 1, 3, 7]).unwrap();
    let b = w.incl(&[7, 3, 9]).unwrap();
    let i = a.intersection(&b).unwrap();
    assert_eq!(members(&i), [3, 7]);
    check_rank_of(&i);
    assert_eq!(members(&b.intersection(&a).unwrap()), [7, 3]);
    let disjoint = w.incl(&[0, 2]).unwrap();
    assert_eq!(a.intersection(&disjoint).unwrap().size(), 0);
    assert_eq!(
        a.intersection(&w).unwrap().compare(&a),
        Comparison::Identical
    );
}

#[test]
fn difference_keeps_the_first_group_order() {
    let w = world(10);
    let a = w.incl(&[5, 1, 3, 7]).unwrap();
    let b = w.incl(&[7, 3, 9]).unwrap();
    let d = a.difference(&b).unwrap();
    assert_eq!(members(&d), [5, 1]);
    check_rank_of(&d);
    assert_eq!(members(&b.difference(&a).unwrap()), [9]);
    assert_eq!(a.difference(&a).unwrap().size(), 0);
    assert_eq!(a.difference(&w).unwrap().size(), 0);
    let empty = w.incl(&[]).unwrap();
    assert_eq!(
        a.difference(&empty).unwrap().compare(&a),
        Comparison::Identical
    );
}

#[test]
fn set_operations_refuse_groups_of_different_worlds() {
    let a = world(10).incl(&[1, 2]).unwrap();
    let b = world(11).incl(&[1, 2]).unwrap();
    let expected = SetOpError::DifferentWorlds {
        left: 10,
        right: 11,
    };
    assert_eq!(a.union(&b).unwrap_err(), expected);
    assert_eq!(a.intersection(&b).unwrap_err(), expected);
    assert_eq!(a.difference(&b).unwrap_err(), expected);
    // Two worlds of the same size name the same processes.
    let c = world(10).incl(&[2]).unwrap();
    assert_eq!(members(&a.intersection(&c).unwrap()), [2]);
}

#[test]
fn translate_ranks_maps_proc_null_and_non_members() {
    let w = world(10);
    let a = w.incl(&[4, 8, 2, 6]).unwrap();
    let b = w.incl(&[6, 5, 4]).unwrap();
    let t = a.translate_ranks(&[0, 1, PROC_NULL, 3, 2], &b).unwrap();
    assert_eq!(t, [2, UNDEFINED, PROC_NULL, 0, UNDEFINED]);
    assert_eq!(a.translate_ranks(&[], &b).unwrap(), []);
    assert_eq!(
        a.translate_ranks(&[1, 4], &b).unwrap_err(),
        TranslateError::OutOfRange {
            index: 1,
            rank: 4,
            size: 4
        }
    );
    // UNDEFINED is not a rank either.
    assert!(a.translate_ranks(&[UNDEFINED], &b).is_err());
    assert_eq!(
        a.translate_ranks(&[0], &world(3)).unwrap_err(),
        TranslateError::DifferentWorlds { left: 10, right: 3 }
    );
    let to_world = a.translate_ranks(&[0, 1, 2, 3], &w).unwrap();
    assert_eq!(to_world, [4, 8, 2, 6]);
}

#[test]
fn compare_tells_identical_similar_and_unequal() {
    let w = world(10);
    let a = w.incl(&[1, 2, 3]).unwrap();
    assert_eq!(a.compare(&a.clone()), Comparison::Identical);
    // Built separately, stored differently, still identical.
    let a2 = w.range_incl(&[RankRange::new(1, 3, 1)]).unwrap();
    let a3 = w
        .with_policy(StoragePolicy::Dense)
        .incl(&[1, 2, 3])
        .unwrap();
    assert_eq!(a3.representation(), Representation::Dense);
    assert_eq!(a.compare(&a2), Comparison::Identical);
    assert_eq!(a2.compare(&a3), Comparison::Identical);
    assert_eq!(a.compare(&w.incl(&[3, 1, 2]).unwrap()), Comparison::Similar);
    assert_eq!(a.compare(&w.incl(&[1, 2, 4]).unwrap()), Comparison::Unequal);
    assert_eq!(a.compare(&w.incl(&[1, 2]).unwrap()), Comparison::Unequal);

    let e1 = w.incl(&[]).unwrap();
    let e2 = a.excl(&[0, 1, 2]).unwrap();
    assert_eq!(e1.compare(&e2), Comparison::Identical);
    assert_eq!(e1.compare(&a), Comparison::Unequal);
    assert_eq!(a.compare(&e1), Comparison::Unequal);
    // Empty groups are all MPI_GROUP_EMPTY, whatever world they came from.
    assert_eq!(
        world(5)
            .incl(&[])
            .unwrap()
            .compare(&world(6).incl(&[]).unwrap()),
        Comparison::Identical
    );
    assert_eq!(
        world(5)
            .incl(&[1])
            .unwrap()
            .compare(&world(6).incl(&[1]).unwrap()),
        Comparison::Unequal
    );
}

#[test]
fn size_and_rank_answer_for_the_calling_process() {
    let w = world(100);
    let g = w.incl(&[40, 10, 90]).unwrap();
    assert_eq!(g.size(), 3);
    // MPI_Group_rank: the caller knows its world rank.
    assert_eq!(g.rank_of(90), Some(2));
    assert_eq!(g.rank_of(11), None);
    assert_eq!(g.rank_of(u32::MAX), None);
}

#[test]
fn representation_follows_the_member_pattern() {
    let w = world(100_000);
    let every_third = w.range_incl(&[RankRange::new(1, 99_999, 3)]).unwrap();
    assert_eq!(every_third.representation(), Representation::Stride);
    let blocks: Vec<u32> = (0..100_000).filter(|r| r % 1000 < 500).collect();
    let runs = w.incl(&blocks).unwrap();
    assert_eq!(runs.representation(), Representation::Ranges);
    let dense_ish: Vec<u32> = (0..100_000).filter(|r| r % 7 != 0 && r % 5 != 0).collect();
    let bitmap = w.incl(&dense_ish).unwrap();
    assert_eq!(bitmap.representation(), Representation::Bitmap);
    let scattered: Vec<u32> = (0..200).map(|i| (i * 7919) % 100_000).collect();
    let dense = w.incl(&scattered).unwrap();
    assert_eq!(dense.representation(), Representation::Dense);
    for g in [&every_third, &runs, &bitmap, &dense] {
        let list = members(g);
        for (r, &m) in list.iter().enumerate() {
            assert_eq!(g.rank_of(m), Some(r as u32));
        }
    }
    // Subgroups of a sparse group may stay relative to it.
    let inner = bitmap
        .incl(&(0..bitmap.size()).step_by(2).collect::<Vec<_>>())
        .unwrap();
    assert_eq!(inner.representation(), Representation::Stride);
    assert_eq!(inner.depth(), 2);
    assert_eq!(inner.lookup(1), bitmap.lookup(2));
}

#[test]
fn forced_policies_apply_where_they_can() {
    let w = world(1000);
    let odd = RankRange::new(1, 999, 2);
    let reversed = [RankRange::new(900, 100, -1)];
    for (policy, kind) in [
        (StoragePolicy::Dense, Representation::Dense),
        (StoragePolicy::Stride, Representation::Stride),
        (StoragePolicy::Ranges, Representation::Ranges),
        (StoragePolicy::Bitmap, Representation::Bitmap),
    ] {
        let g = w.with_policy(policy).range_incl(&[odd]).unwrap();
        assert_eq!(g.representation(), kind);
        assert_eq!(g.policy(), policy);
        assert_eq!(g.lookup(10), Some(21));
        assert_eq!(g.rank_of(21), Some(10));
        assert_eq!(g.rank_of(20), None);
    }
    // A bitmap cannot hold a reversed order: the automatic choice is used.
    let g = w
        .with_policy(StoragePolicy::Bitmap)
        .range_incl(&reversed)
        .unwrap();
    assert_eq!(g.representation(), Representation::Stride);
    // Nor can a stride hold an irregular list.
    let g = w
        .with_policy(StoragePolicy::Stride)
        .incl(&[1, 2, 4, 8])
        .unwrap();
    assert_eq!(g.representation(), Representation::Dense);
    let g = w
        .with_policy(StoragePolicy::Ranges)
        .range_incl(&reversed)
        .unwrap();
    assert_eq!(g.representation(), Representation::Ranges);
    check_rank_of(&g);
}

#[test]
fn dense_reverse_index_is_built_on_first_use_and_counted() {
    let w = world(1 << 20);
    let scattered: Vec<u32> = (0..1000).map(|i| (i * 104_729) % (1 << 20)).collect();
    let g = w.incl(&scattered).unwrap();
    assert_eq!(g.representation(), Representation::Dense);
    let before = g.memory_bytes();
    assert_eq!(g.rank_of(scattered[500]), Some(500));
    assert!(g.memory_bytes() > before);
}

#[test]
fn groups_can_be_shared_across_threads() {
    fn shareable<T: Send + Sync + Clone>(_: &T) {}
    let g = world(1000)
        .range_incl(&[RankRange::new(0, 998, 2)])
        .unwrap();
    shareable(&g);
    let copy = g.clone();
    let seen = std::thread::spawn(move || copy.lookup(10)).join().unwrap();
    assert_eq!(seen, Some(20));
}

#[test]
fn errors_read_well() {
    let text = RankListError::Duplicate { index: 2, rank: 7 }.to_string();
    assert!(text.contains('7') && text.contains("twice"), "{text}");
    let text = RangeError::OutOfRange {
        triplet: 3,
        rank: -2,
        size: 9,
    }
    .to_string();
    assert!(text.contains("triplet 3") && text.contains("-2"), "{text}");
    let text = TranslateError::OutputLength {
        expected: 4,
        given: 3,
    }
    .to_string();
    assert!(text.contains('4') && text.contains('3'), "{text}");
    let text = TranslateError::DifferentWorlds { left: 4, right: 5 }.to_string();
    assert!(text.contains("4 and 5"), "{text}");
    let text = WorldError::TooLarge { size: u32::MAX }.to_string();
    assert!(text.contains(&u32::MAX.to_string()), "{text}");
}
