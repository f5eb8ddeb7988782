//! Unit tests of the engine's internals: the lists, and invariants of the
//! bins checked after every step of random traffic (the behaviour against
//! a model of MPI matching is in `core/tests/p2p_model.rs`).

use std::vec::Vec;

use super::list::{Link, List, Node, Slab};
use super::state::{BY_CONTEXT, BY_EXACT, BY_SOURCE, BY_TAG};
use super::{ContextId, Envelope, MatchEngine, Posted, RecvSpec, Source, Tag};

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

/// Checks the bins of every context against the slabs: every list holds
/// exactly the nodes it should, in order, bins are dropped when empty,
/// counts add up, and no queued receive matches a stored message.
fn check<R, M>(engine: &MatchEngine<R, M>) {
    let (contexts, store) = engine.state();
    let (mut posted, mut unexpected, mut held) = (0, 0, 0);
    for (&cid, ctx) in contexts {
        let bins = &ctx.bins;
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
        for (&(s, t), bin) in &bins.exact {
            assert!(!bin.is_empty(), "empty exact bins are dropped");
            assert!(bin.posted.is_empty() || bin.unexpected.is_empty());
            ctx_posted += post_list(&bin.posted, &|sp| {
                sp.source == Source::Rank(s) && sp.tag == Tag::Tag(t)
            });
            exact_msgs += msg_list(&bin.unexpected, BY_EXACT, &|e| e.source == s && e.tag == t);
        }
        let mut tag_msgs = 0;
        for (&t, bin) in &bins.by_tag {
            assert!(!bin.is_empty(), "empty tag bins are dropped");
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
        for (&s, stream) in &ctx.streams {
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
        ctx_posted += post_list(&bins.any.posted, &|sp| {
            sp.source == Source::Any && sp.tag == Tag::Any
        });
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
        for (&s, stream) in &ctx.streams {
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
                bins.exact.get(&(env.source, env.tag)).map(|b| b.posted),
                bins.by_tag.get(&env.tag).map(|b| b.posted),
                ctx.streams.get(&env.source).map(|s| s.bin.posted),
                Some(bins.any.posted),
            ]
            .into_iter()
            .flatten()
            {
                assert!(sl.is_empty(), "a queued receive matches a stored message");
            }
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
    assert!(contexts
        .values()
        .all(|c| c.bins.exact.is_empty() && c.bins.by_tag.is_empty()));
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
