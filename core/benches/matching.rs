//! The point-to-point matching engine with 10^4 outstanding receives or
//! unexpected messages (100 senders × 100 tags on one context). Each
//! iteration queues 10^4 of one side, then matches every one of them with
//! the other side, leaving the engine empty; the figure is operations
//! (posts plus arrivals) per second:
//!
//! - `exact/posted-first`, `exact/unexpected-first`: receives naming
//!   source and tag; arrivals in reverse posting order;
//! - `any-source/…`: receives on any source with a tag;
//! - `any-tag/…`: receives from one source with any tag;
//! - `any/…`: receives on any source and tag;
//! - `exact/reordered`: posted first, each sender's messages arriving in
//!   swapped pairs (every other one is held, then released).
//!
//! The `one` group measures the path of a ping-pong instead: one source
//! and one tag on one context, one operation outstanding at a time;
//! `one/posted-first` posts an exact receive then hands it its message,
//! `one/unexpected-first` hands a message over then posts its receive.
//! The figure is again operations per second.
//!
//! Run: `cargo bench -p fireopal-core --bench matching -- --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fireopal_core::p2p::{ContextId, Envelope, MatchEngine, RecvSpec, Source, Tag};

const SENDERS: u32 = 100;
const TAGS: u32 = 100;
const N: u32 = SENDERS * TAGS;
const CTX: ContextId = ContextId(0);

#[derive(Clone, Copy)]
enum Shape {
    Exact,
    AnySource,
    AnyTag,
    Any,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Exact => "exact",
            Shape::AnySource => "any-source",
            Shape::AnyTag => "any-tag",
            Shape::Any => "any",
        }
    }

    fn spec(self, source: u32, tag: i32) -> RecvSpec {
        let (s, t) = match self {
            Shape::Exact => (Source::Rank(source), Tag::Tag(tag)),
            Shape::AnySource => (Source::Any, Tag::Tag(tag)),
            Shape::AnyTag => (Source::Rank(source), Tag::Any),
            Shape::Any => (Source::Any, Tag::Any),
        };
        RecvSpec::new(CTX, s, t)
    }
}

/// Message `i`'s sender and tag.
fn envelope(i: u32) -> Envelope {
    Envelope {
        context: CTX,
        source: i % SENDERS,
        tag: (i / SENDERS) as i32,
    }
}

/// One engine kept across iterations, with its senders' next numbers.
struct Bench {
    engine: MatchEngine<u32, u32>,
    next: Vec<u32>,
    events: Vec<fireopal_core::p2p::Event<u32, u32>>,
}

impl Bench {
    fn new() -> Self {
        Bench {
            engine: MatchEngine::new(),
            next: vec![0; SENDERS as usize],
            events: Vec::with_capacity(4),
        }
    }

    fn post_all(&mut self, shape: Shape) {
        for i in 0..N {
            let e = envelope(i);
            black_box(self.engine.post(shape.spec(e.source, e.tag), i));
        }
    }

    /// Arrivals in reverse order of `i`; with `swap`, each sender's
    /// numbers come in swapped pairs.
    fn arrive_all(&mut self, swap: bool) {
        for i in (0..N).rev() {
            let e = envelope(i);
            let seq = &mut self.next[e.source as usize];
            let mut s = *seq;
            *seq = seq.wrapping_add(1);
            if swap {
                // Numbers 2k and 2k+1 of each sender trade places.
                s ^= 1;
            }
            self.events.clear();
            let r = self.engine.arrive(e, s, i, 64, &mut self.events);
            black_box(r.is_ok());
        }
    }
}

fn matching(c: &mut Criterion) {
    let mut g = c.benchmark_group("match");
    g.throughput(Throughput::Elements(2 * u64::from(N)));
    for shape in [Shape::Exact, Shape::AnySource, Shape::AnyTag, Shape::Any] {
        let mut b = Bench::new();
        g.bench_function(format!("{}/posted-first", shape.name()), |bench| {
            bench.iter(|| {
                b.post_all(shape);
                b.arrive_all(false);
                assert_eq!(b.engine.posted(), 0);
            })
        });
        let mut b = Bench::new();
        g.bench_function(format!("{}/unexpected-first", shape.name()), |bench| {
            bench.iter(|| {
                b.arrive_all(false);
                b.post_all(shape);
                assert_eq!(b.engine.unexpected(), 0);
            })
        });
    }
    // SENDERS messages per sender per iteration, an even count: pairs
    // never straddle iterations.
    let mut b = Bench::new();
    g.bench_function("exact/reordered", |bench| {
        bench.iter(|| {
            b.post_all(Shape::Exact);
            b.arrive_all(true);
            assert_eq!(b.engine.posted() + b.engine.held(), 0);
        })
    });
    g.finish();
}

/// Pairs of operations per iteration of the `one` cases.
const ONE: u32 = 1000;

fn one_at_a_time(c: &mut Criterion) {
    let mut g = c.benchmark_group("one");
    g.throughput(Throughput::Elements(2 * u64::from(ONE)));
    let env = Envelope {
        context: CTX,
        source: 1,
        tag: 7,
    };
    let spec = env.exact_spec();
    let mut b = Bench::new();
    g.bench_function("posted-first", |bench| {
        bench.iter(|| {
            for i in 0..ONE {
                black_box(b.engine.post(spec, i));
                let seq = &mut b.next[1];
                b.events.clear();
                let r = b.engine.arrive(env, *seq, i, 8, &mut b.events);
                *seq = seq.wrapping_add(1);
                black_box(r.is_ok());
            }
            assert_eq!(b.engine.posted(), 0);
        })
    });
    let mut b = Bench::new();
    g.bench_function("unexpected-first", |bench| {
        bench.iter(|| {
            for i in 0..ONE {
                let seq = &mut b.next[1];
                b.events.clear();
                let r = b.engine.arrive(env, *seq, i, 8, &mut b.events);
                *seq = seq.wrapping_add(1);
                black_box(r.is_ok());
                black_box(b.engine.post(spec, i));
            }
            assert_eq!(b.engine.unexpected(), 0);
        })
    });
    g.finish();
}

criterion_group!(benches, matching, one_at_a_time);
criterion_main!(benches);
