//! Unit tests of the engine's internals: the lists, and invariants of the
//! bins checked after every step of random traffic (the behaviour against
//! a model of MPI matching is in `core/tests/p2p_model.rs`).

use std::vec::Vec;

use super::bins::{BinMap, MIN_KEPT};
use super::list::{Link, List, Node, Slab};
use super::state::{BY_CONTEXT, BY_EXACT, BY_SOURCE, BY_TAG};
use super::{ContextId, Envelope, Event, MatchEngine, Posted, RecvSpec, Source, Tag};

#[derive(Debug)]
struct N2 {
    links: [Link; 2],
}

impl Node<2> for N2 {
    fn links(&self) -> &[Link; 2] {
        &self.links
    }
    fn links_mut(&mut self) -> &mut [Link; 2] {
        &mut self.links
    }
}

fn node() -> N2 {
    N2 {
        links: [Link::UNLINKED; 2],
    }
}

#[test]
fn lists_keep_order_and_unlink_anywhere() {
    let mut slab = Slab::default();
    let ids: Vec<usize> = (0..5).map(|_| slab.insert(node())).collect();
    let (mut all, mut odd) = (List::default(), List::default());
    for &i in &ids {
        all.push_back(&mut slab, i, 0);
        if i % 2 == 1 {
            odd.push_back(&mut slab, i, 1);
        }
    }
    assert_eq!(all.iter(&slab, 0).collect::<Vec<_>>(), ids);
    assert_eq!(odd.iter(&slab, 1).collect::<Vec<_>>(), [1, 3]);
    // Middle, head, tail.
    all.unlink(&mut slab, 2, 0);
    all.unlink(&mut slab, 0, 0);
    all.unlink(&mut slab, 4, 0);
    assert_eq!(all.iter(&slab, 0).collect::<Vec<_>>(), [1, 3]);
    odd.unlink(&mut slab, 3, 1);
    assert_eq!(odd.iter(&slab, 1).collect::<Vec<_>>(), [1]);
    all.unlink(&mut slab, 1, 0);
    all.unlink(&mut slab, 3, 0);
    assert!(all.is_empty());
    assert_eq!(all.head(), None);
    odd.unlink(&mut slab, 1, 1);
    assert!(odd.is_empty());
    // Freed slots are reused.
    assert!(slab.remove(2).is_some());
    assert!(slab.remove(2).is_none());
    assert_eq!(slab.insert(node()), 2);
    assert_eq!(slab.len(), 5);
}

#[test]
fn remove_if_takes_only_what_it_accepts() {
    let mut slab = Slab::default();
    let a = slab.insert(5u32);
    let b = slab.insert(6u32);
    // Refused: the value stays, its slot is not freed.
    assert_eq!(slab.remove_if(a, |v| *v == 6), None);
    assert_eq!(slab.get(a), Some(&5));
    // Accepted: taken out, its slot is the next one filled.
    assert_eq!(slab.remove_if(b, |v| *v == 6), Some(6));
    assert_eq!(slab.get(b), None);
    assert_eq!(slab.remove_if(b, |_| true), None);
    assert_eq!(slab.remove_if(99, |_| true), None);
    assert_eq!(slab.len(), 1);
    assert_eq!(slab.insert(7), b);
}

/// Checks that a bin map counts its empty bins right and keeps no more of
/// them than its limit.
fn check_empties<K>(bins: &BinMap<K>)
where
    K: Eq + core::hash::Hash,
{
    let empty = bins.map.values().filter(|b| b.is_empty()).count();
    assert_eq!(bins.empty, empty, "empty bins are counted");
    assert!(
        empty <= bins.limit(),
        "empty bins are dropped past the limit"
    );
}

/// Checks the bins of every context against the slabs: every list holds
/// exactly the nodes it should, in order, empty bins are counted and
/// bounded, counts add up, and no queued receive matches a stored message.
fn check<R, M>(engine: &MatchEngine<R, M>) {
    let (contexts, store) = engine.state();
    let (mut posted, mut unexpected, mut held) = (0, 0, 0);
    for ctx in contexts.iter() {
        let cid = ctx.id;
        let bins = &ctx.bins;
        check_empties(&ctx.exact);
        check_empties(&bins.by_tag);
        let mut ctx_posted = 0;
        let mut by_tag_posted = 0;
        let post_list = |list: &List, want: &dyn Fn(&RecvSpec) -> bool| -> usize {
            let mut last = None;
            let mut n = 0;
            for idx in list.iter(&store.posts, 0) {
                let node = store.posts.get(idx).expect("listed receive is stored");
                assert_eq!(node.spec.context, cid);
                assert!(want(&node.spec), "{:?} in the wrong bin", node.spec);
                assert!(last < Some(node.stamp), "posted bins are in post order");
                last = Some(node.stamp);
                n += 1;
            }
            n
        };
        let msg_list = |list: &List, k: usize, want: &dyn Fn(&Envelope) -> bool| -> usize {
            let mut n = 0;
            for idx in list.iter(&store.msgs, k) {
                let node = store.msgs.get(idx).expect("listed message is stored");
                assert!(want(&node.env), "{:?} in the wrong list", node.env);
                n += 1;
            }
            n
        };
        let mut exact_msgs = 0;
        for (&(s, t), bin) in &ctx.exact.map {
            assert!(bin.posted.is_empty() || bin.unexpected.is_empty());
            ctx_posted += post_list(&bin.posted, &|sp| {
                sp.source == Source::Rank(s) && sp.tag == Tag::Tag(t)
            });
            exact_msgs += msg_list(&bin.unexpected, BY_EXACT, &|e| e.source == s && e.tag == t);
        }
        let mut tag_msgs = 0;
        for (&t, bin) in &bins.by_tag.map {
            let n = post_list(&bin.posted, &|sp| {
                sp.source == Source::Any && sp.tag == Tag::Tag(t)
            });
            ctx_posted += n;
            by_tag_posted += n;
            tag_msgs += msg_list(&bin.unexpected, BY_TAG, &|e| e.tag == t);
        }
        assert_eq!(by_tag_posted, bins.any_source_posts);
        let mut source_msgs = 0;
        let mut ctx_held = 0;
        let mut failed = 0;
        for stream in ctx.streams.iter() {
            let s = stream.source;
            assert_eq!(ctx.streams.get(s).map(|st| st.source), Some(s));
            failed += usize::from(stream.failed);
            ctx_posted += post_list(&stream.bin.posted, &|sp| {
                sp.source == Source::Rank(s) && sp.tag == Tag::Any
            });
            source_msgs += msg_list(&stream.bin.unexpected, BY_SOURCE, &|e| e.source == s);
            ctx_held += stream.held.len();
            for &seq in stream.held.keys() {
                let ahead = seq.wrapping_sub(stream.expected);
                assert!(ahead != 0 && ahead <= engine.config().max_ahead);
            }
            if stream.failed {
                assert!(stream.bin.is_empty() && stream.held.is_empty());
            }
        }
        assert_eq!(failed, ctx.failed_sources);
        ctx_posted += post_list(&bins.any.posted, &|sp| {
            sp.source == Source::Any && sp.tag == Tag::Any
        });
        if let Some(idx) = ctx.lone {
            let node = store.posts.get(idx).expect("the lone receive is stored");
            assert_eq!(node.spec.context, cid);
            assert_eq!(ctx_posted, 0, "a lone receive is the context's only one");
            ctx_posted += 1;
        }
        let all = msg_list(&bins.any.unexpected, BY_CONTEXT, &|e| e.context == cid);
        assert_eq!(exact_msgs, all);
        assert_eq!(tag_msgs, all);
        assert_eq!(source_msgs, all);
        assert_eq!(bins.tally.posted, ctx_posted);
        assert_eq!(bins.tally.unexpected, all);
        assert_eq!(bins.tally.held, ctx_held);
        // Arrival order in the context list is the order of every other
        // list restricted to its key, and no queued receive matches.
        let order: Vec<usize> = bins.any.unexpected.iter(&store.msgs, BY_CONTEXT).collect();
        for stream in ctx.streams.iter() {
            let s = stream.source;
            let want: Vec<usize> = order
                .iter()
                .copied()
                .filter(|&i| store.msgs.get(i).map(|n| n.env.source) == Some(s))
                .collect();
            let got: Vec<usize> = stream.bin.unexpected.iter(&store.msgs, BY_SOURCE).collect();
            assert_eq!(got, want);
        }
        for &i in &order {
            let env = store.msgs.get(i).map(|n| n.env).expect("stored");
            for sl in [
                ctx.exact.get(&(env.source, env.tag)).map(|b| b.posted),
                bins.by_tag.get(&env.tag).map(|b| b.posted),
                ctx.streams.get(env.source).map(|s| s.bin.posted),
                Some(bins.any.posted),
            ]
            .into_iter()
            .flatten()
            {
                assert!(sl.is_empty(), "a queued receive matches a stored message");
            }
            let lone = ctx.lone.and_then(|idx| store.posts.get(idx));
            assert!(
                !lone.is_some_and(|n| n.spec.matches(&env)),
                "the lone receive matches a stored message"
            );
        }
        posted += ctx_posted;
        unexpected += all;
        held += ctx_held;
    }
    assert_eq!(store.posts.len(), posted);
    assert_eq!(store.msgs.len(), unexpected);
    let counts = engine.counts();
    assert_eq!(
        (counts.posted, counts.unexpected, counts.held),
        (posted, unexpected, held)
    );
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn bins_stay_consistent_under_random_traffic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut engine: MatchEngine<u32, u32> = MatchEngine::new();
    let mut events = Vec::new();
    let mut queued = Vec::new();
    // Per (context, source): the next number to send; sent, not arrived.
    let mut next = [[0u32; 4]; 2];
    let mut in_flight: Vec<(Envelope, u32)> = Vec::new();
    for step in 0..4000u32 {
        let ctx = rng.below(2) as usize;
        let context = ContextId(ctx as u32);
        let source = rng.below(4) as u32;
        let tag = rng.below(3) as i32;
        match rng.below(8) {
            0..=2 => {
                let spec = RecvSpec::new(
                    context,
                    if rng.below(3) == 0 {
                        Source::Any
                    } else {
                        Source::Rank(source)
                    },
                    if rng.below(3) == 0 {
                        Tag::Any
                    } else {
                        Tag::Tag(tag)
                    },
                );
                if let Posted::Queued(id) = engine.post(spec, step) {
                    queued.push(id);
                }
            }
            3 | 4 => {
                let seq = next[ctx][source as usize];
                next[ctx][source as usize] = seq.wrapping_add(1);
                in_flight.push((
                    Envelope {
                        context,
                        source,
                        tag,
                    },
                    seq,
                ));
            }
            5 | 6 if !in_flight.is_empty() => {
                let i = rng.below(in_flight.len() as u64) as usize;
                let (env, seq) = in_flight.swap_remove(i);
                engine
                    .arrive(env, seq, step, 8, &mut events)
                    .expect("in window");
                events.clear();
            }
            7 if !queued.is_empty() => {
                let i = rng.below(queued.len() as u64) as usize;
                let _ = engine.cancel(queued.swap_remove(i));
            }
            _ => {
                let spec = RecvSpec::new(context, Source::Any, Tag::Tag(tag));
                let _ = engine.take(spec);
            }
        }
        check(&engine);
    }
    // Drain: everything arrives, wildcards take every message, and the
    // remaining receives are cancelled; no bin is left behind.
    for (env, seq) in in_flight.drain(..) {
        engine
            .arrive(env, seq, 0, 8, &mut events)
            .expect("in window");
    }
    check(&engine);
    for ctx in 0..2 {
        while engine
            .take(RecvSpec::new(ContextId(ctx), Source::Any, Tag::Any))
            .is_some()
        {}
    }
    for id in queued {
        let _ = engine.cancel(id);
    }
    check(&engine);
    assert_eq!(engine.counts(), super::Counts::default());
    let (contexts, _) = engine.state();
    assert!(contexts.iter().all(|c| c.lists_nothing()));
    for ctx in 0..2 {
        engine.retire_context(ContextId(ctx)).expect("idle context");
    }
    assert_eq!(engine.contexts(), 0);
}

#[test]
fn fail_source_leaves_consistent_bins() {
    let mut engine: MatchEngine<u32, u32> = MatchEngine::new();
    let c = ContextId(3);
    let mut events = Vec::new();
    for (i, spec) in [
        RecvSpec::new(c, Source::Rank(1), Tag::Tag(5)),
        RecvSpec::new(c, Source::Rank(1), Tag::Any),
        RecvSpec::new(c, Source::Any, Tag::Tag(6)),
        RecvSpec::new(c, Source::Rank(2), Tag::Tag(6)),
    ]
    .into_iter()
    .enumerate()
    {
        assert!(matches!(engine.post(spec, i as u32), Posted::Queued(_)));
    }
    let e = |source, tag| Envelope {
        context: c,
        source,
        tag,
    };
    engine.arrive(e(2, 9), 0, 10, 1, &mut events).unwrap();
    engine.arrive(e(1, 9), 2, 11, 1, &mut events).unwrap();
    check(&engine);
    let f = engine.fail_source(c, 1);
    assert_eq!(
        f.receives.iter().map(|(_, r)| *r).collect::<Vec<_>>(),
        [0, 1]
    );
    assert_eq!(f.messages.iter().map(|m| m.msg).collect::<Vec<_>>(), [11]);
    check(&engine);
    assert_eq!(engine.posted(), 2);
}

/// Receives of one source and context, each matched at once by the next
/// message, for every key in `keys`: `first` posts before the arrival,
/// else after it.
fn one_at_a_time(
    engine: &mut MatchEngine<u32, u32>,
    source: u32,
    keys: impl Iterator<Item = i32>,
    posted_first: bool,
) {
    let c = ContextId(0);
    let mut events = Vec::new();
    for tag in keys {
        let env = Envelope {
            context: c,
            source,
            tag,
        };
        let seq = engine.next_seq(c, source);
        if posted_first {
            assert!(matches!(
                engine.post(env.exact_spec(), 0),
                Posted::Queued(_)
            ));
        }
        engine
            .arrive(env, seq, 0, 8, &mut events)
            .expect("in order");
        if !posted_first {
            assert!(matches!(
                engine.post(env.exact_spec(), 0),
                Posted::Matched { .. }
            ));
        }
    }
    assert!(events
        .iter()
        .all(|e| matches!(e, Event::Matched { .. }) != !posted_first));
}

#[test]
fn one_shot_tags_leave_a_bounded_number_of_bins() {
    for posted_first in [true, false] {
        let mut engine: MatchEngine<u32, u32> = MatchEngine::new();
        one_at_a_time(&mut engine, 1, 0..10_000, posted_first);
        check(&engine);
        let (contexts, _) = engine.state();
        let ctx = contexts.get(ContextId(0)).expect("context");
        for (len, cap) in [
            (ctx.exact.map.len(), ctx.exact.map.capacity()),
            (ctx.bins.by_tag.map.len(), ctx.bins.by_tag.map.capacity()),
        ] {
            assert!(len <= MIN_KEPT + 1, "{len} bins kept");
            assert!(cap < 4 * MIN_KEPT, "capacity {cap}");
        }
        // One tag over and over keeps one bin, never swept; a receive
        // posted alone waits in no bin at all.
        let mut engine: MatchEngine<u32, u32> = MatchEngine::new();
        one_at_a_time(&mut engine, 1, core::iter::repeat_n(7, 1000), posted_first);
        let (contexts, _) = engine.state();
        let ctx = contexts.get(ContextId(0)).expect("context");
        let bins = usize::from(!posted_first);
        assert_eq!((ctx.exact.map.len(), ctx.exact.empty), (bins, bins));
    }
}

#[test]
fn swept_and_reused_bins_match_in_order() {
    let c = ContextId(0);
    let mut engine: MatchEngine<u32, u32> = MatchEngine::new();
    let mut events = Vec::new();
    let exact = |source, tag| RecvSpec::new(c, Source::Rank(source), Tag::Tag(tag));
    // Live bins, two receives each, outlast the sweeps around them.
    for round in 0..2 {
        for tag in 0..8 {
            let req = round * 100 + tag as u32;
            assert!(matches!(engine.post(exact(2, tag), req), Posted::Queued(_)));
        }
    }
    one_at_a_time(&mut engine, 1, 100..1100, true);
    one_at_a_time(&mut engine, 1, 2000..3000, false);
    check(&engine);
    {
        let (contexts, _) = engine.state();
        let ctx = contexts.get(c).expect("context");
        assert!(ctx.exact.map.len() <= MIN_KEPT + 1 + 8);
        assert!(ctx.exact.get(&(1, 100)).is_none(), "swept");
    }
    for round in 0..2 {
        for tag in 0..8 {
            let env = Envelope {
                context: c,
                source: 2,
                tag,
            };
            let seq = engine.next_seq(c, 2);
            engine.arrive(env, seq, 0, 8, &mut events).unwrap();
            let Some(Event::Matched { req, .. }) = events.pop() else {
                panic!("no match")
            };
            assert_eq!(req, round * 100 + tag as u32);
        }
    }
    check(&engine);

    // A swept key used again: receives keep their posting order across
    // bins, messages their arrival order.
    let any_source = RecvSpec::new(c, Source::Any, Tag::Tag(100));
    for (spec, req) in [(exact(1, 100), 1), (any_source, 2), (exact(1, 100), 3)] {
        assert!(matches!(engine.post(spec, req), Posted::Queued(_)));
    }
    let env = Envelope {
        context: c,
        source: 1,
        tag: 100,
    };
    for msg in 10..15 {
        let seq = engine.next_seq(c, 1);
        engine.arrive(env, seq, msg, 8, &mut events).unwrap();
        check(&engine);
    }
    let matched: Vec<(u32, u32)> = events
        .drain(..)
        .filter_map(|e| match e {
            Event::Matched { req, message, .. } => Some((req, message.msg)),
            Event::Stored { .. } => None,
        })
        .collect();
    assert_eq!(matched, [(1, 10), (2, 11), (3, 12)]);
    for want in [13, 14] {
        let Posted::Matched { message, .. } = engine.post(exact(1, 100), 0) else {
            panic!("stored message not taken")
        };
        assert_eq!(message.msg, want);
    }
    check(&engine);
    assert_eq!(engine.counts(), super::Counts::default());
}

#[test]
fn bins_after_a_burst_stay_within_the_capacity_reached() {
    let c = ContextId(0);
    let mut engine: MatchEngine<u32, u32> = MatchEngine::new();
    let mut events = Vec::new();
    for tag in 0..5000 {
        let spec = RecvSpec::new(c, Source::Rank(1), Tag::Tag(tag));
        assert!(matches!(engine.post(spec, 0), Posted::Queued(_)));
    }
    for tag in 0..5000 {
        let env = Envelope {
            context: c,
            source: 1,
            tag,
        };
        engine.arrive(env, tag as u32, 0, 8, &mut events).unwrap();
    }
    check(&engine);
    // The table's allocation, not `capacity()`: that one also counts down
    // the slots of removed entries, which depend on where the (randomly
    // seeded) hashes put them.
    let sizes = |engine: &MatchEngine<u32, u32>| {
        let (contexts, _) = engine.state();
        let map = &contexts.get(c).expect("context").exact.map;
        (map.allocation_size(), map.capacity(), map.len())
    };
    let (before, _, _) = sizes(&engine);
    one_at_a_time(&mut engine, 1, 10_000..30_000, true);
    check(&engine);
    let (after, capacity, len) = sizes(&engine);
    assert_eq!(before, after, "the bins' table grew");
    assert!(len <= MIN_KEPT.max(capacity / 8) + 1, "{len} bins kept");
}
