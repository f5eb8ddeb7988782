//! Model-based test of the point-to-point matching engine: random traffic
//! (receives with random wildcards, messages arriving in any order across
//! and within senders, probes, matched probes, cancels, failed sources,
//! retired contexts, and now and then a bad sequence number) run through
//! the engine and through a naive model of MPI matching written here
//! (lists in order, scanned from the front); every answer must be the
//! same, step by step.

use std::collections::{HashMap, HashSet};

use fireopal_core::p2p::{
    Arrival, ArrivalError, ContextId, Envelope, Event, MatchEngine, PostId, Posted, RecvSpec,
    RetireError, Source, Tag,
};
use proptest::prelude::*;

const CONTEXTS: u32 = 3;
const SOURCES: u32 = 4;
const TAGS: i32 = 4;

/// What one step answered, engine and model alike.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// `post`: matched (receive, message), queued, or failed at once.
    PostMatched(u32, u32),
    PostQueued,
    PostFailed,
    /// `arrive`: per message handed to matching, (receive, message) or a
    /// stored message; `held` if it waits.
    Arrived(Vec<(Option<u32>, u32)>),
    Held,
    Refused(ArrivalError),
    /// `probe` and `take`: the message and its envelope.
    Probed(Option<(Envelope, u32)>),
    Took(Option<(Envelope, u32)>),
    Cancelled(Option<u32>),
    /// `fail_source`: receives in posting order, messages.
    Failed(Vec<u32>, Vec<u32>),
    Retired(Result<(), RetireError>),
}

/// MPI matching the plain way.
#[derive(Default)]
struct Model {
    /// Queued receives in posting order.
    posted: Vec<(RecvSpec, u32)>,
    /// Unexpected messages in arrival order.
    unexpected: Vec<(Envelope, u32)>,
    /// Held messages: (envelope, sequence number, message).
    held: Vec<(Envelope, u32, u32)>,
    expected: HashMap<(u32, u32), u32>,
    failed: HashSet<(u32, u32)>,
}

impl Model {
    fn post(&mut self, spec: RecvSpec, req: u32) -> Answer {
        if let Source::Rank(s) = spec.source {
            if self.failed.contains(&(spec.context.0, s)) {
                return Answer::PostFailed;
            }
        }
        match self.unexpected.iter().position(|(e, _)| spec.matches(e)) {
            Some(i) => Answer::PostMatched(req, self.unexpected.remove(i).1),
            None => {
                self.posted.push((spec, req));
                Answer::PostQueued
            }
        }
    }

    fn deliver(&mut self, env: Envelope, msg: u32) -> (Option<u32>, u32) {
        match self.posted.iter().position(|(s, _)| s.matches(&env)) {
            Some(i) => (Some(self.posted.remove(i).1), msg),
            None => {
                self.unexpected.push((env, msg));
                (None, msg)
            }
        }
    }

    fn arrive(&mut self, env: Envelope, seq: u32, msg: u32, max_ahead: u32) -> Answer {
        let key = (env.context.0, env.source);
        if self.failed.contains(&key) {
            return Answer::Refused(ArrivalError::SourceFailed);
        }
        let expected = *self.expected.get(&key).unwrap_or(&0);
        let ahead = seq.wrapping_sub(expected);
        if ahead >= 1 << 31 {
            return Answer::Refused(ArrivalError::Stale { seq, expected });
        }
        if ahead > max_ahead {
            return Answer::Refused(ArrivalError::TooFarAhead { seq, expected });
        }
        if ahead > 0 {
            if self
                .held
                .iter()
                .any(|(e, s, _)| (e.context.0, e.source) == key && *s == seq)
            {
                return Answer::Refused(ArrivalError::DuplicateHeld { seq });
            }
            self.held.push((env, seq, msg));
            return Answer::Held;
        }
        let mut out = vec![self.deliver(env, msg)];
        let mut next = seq.wrapping_add(1);
        while let Some(i) = self
            .held
            .iter()
            .position(|(e, s, _)| (e.context.0, e.source) == key && *s == next)
        {
            let (e, _, m) = self.held.remove(i);
            out.push(self.deliver(e, m));
            next = next.wrapping_add(1);
        }
        self.expected.insert(key, next);
        Answer::Arrived(out)
    }

    fn probe(&self, spec: RecvSpec) -> Option<(Envelope, u32)> {
        self.unexpected
            .iter()
            .copied()
            .find(|(e, _)| spec.matches(e))
    }

    fn take(&mut self, spec: RecvSpec) -> Option<(Envelope, u32)> {
        let i = self.unexpected.iter().position(|(e, _)| spec.matches(e))?;
        Some(self.unexpected.remove(i))
    }

    fn cancel(&mut self, req: u32) -> Option<u32> {
        let i = self.posted.iter().position(|(_, r)| *r == req)?;
        Some(self.posted.remove(i).1)
    }

    fn fail(&mut self, ctx: u32, source: u32) -> Answer {
        self.failed.insert((ctx, source));
        let names = |s: &RecvSpec| s.context.0 == ctx && s.source == Source::Rank(source);
        let receives = self
            .posted
            .iter()
            .filter(|(s, _)| names(s))
            .map(|p| p.1)
            .collect();
        self.posted.retain(|(s, _)| !names(s));
        let from = |e: &Envelope| e.context.0 == ctx && e.source == source;
        let mut msgs: Vec<u32> = self
            .unexpected
            .iter()
            .filter(|(e, _)| from(e))
            .map(|u| u.1)
            .collect();
        self.unexpected.retain(|(e, _)| !from(e));
        let expected = *self.expected.get(&(ctx, source)).unwrap_or(&0);
        let mut held: Vec<(u32, u32)> = self
            .held
            .iter()
            .filter(|(e, _, _)| from(e))
            .map(|(_, s, m)| (s.wrapping_sub(expected), *m))
            .collect();
        held.sort_unstable();
        msgs.extend(held.into_iter().map(|h| h.1));
        self.held.retain(|(e, _, _)| !from(e));
        Answer::Failed(receives, msgs)
    }

    fn retire(&mut self, ctx: u32) -> Answer {
        let posted = self
            .posted
            .iter()
            .filter(|(s, _)| s.context.0 == ctx)
            .count();
        let unexpected = self
            .unexpected
            .iter()
            .filter(|(e, _)| e.context.0 == ctx)
            .count();
        let held = self
            .held
            .iter()
            .filter(|(e, _, _)| e.context.0 == ctx)
            .count();
        if posted + unexpected + held > 0 {
            return Answer::Retired(Err(RetireError::Busy {
                context: ContextId(ctx),
                posted,
                unexpected,
                held,
            }));
        }
        self.expected.retain(|k, _| k.0 != ctx);
        self.failed.retain(|k| k.0 != ctx);
        Answer::Retired(Ok(()))
    }
}

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
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn random_spec(rng: &mut Rng, mix: Mix) -> RecvSpec {
    let (contexts, sources, tags) = mix.widths();
    let context = ContextId(rng.below(u64::from(contexts)) as u32);
    let source = if rng.chance(30) {
        Source::Any
    } else {
        Source::Rank(rng.below(u64::from(sources)) as u32)
    };
    let tag = if rng.chance(30) {
        Tag::Any
    } else {
        Tag::Tag(rng.below(tags as u64) as i32)
    };
    RecvSpec::new(context, source, tag)
}

fn short(events: Vec<Event<u32, u32>>) -> Vec<(Option<u32>, u32)> {
    events
        .into_iter()
        .map(|e| match e {
            Event::Matched { req, message, .. } => {
                assert_eq!(message.bytes, message.msg as usize);
                (Some(req), message.msg)
            }
            Event::Stored { bytes, .. } => (None, bytes as u32),
        })
        .collect()
}

/// How [`run`] picks its operations.
#[derive(Clone, Copy)]
enum Mix {
    /// Every kind, messages arriving in any order.
    Any,
    /// Posts, sends, takes and cancels on a few streams and tags, each
    /// message arriving before the next is sent.
    Conversation,
}

impl Mix {
    /// How many contexts, sources and tags the traffic uses.
    fn widths(self) -> (u32, u32, i32) {
        match self {
            Mix::Any => (CONTEXTS, SOURCES, TAGS),
            Mix::Conversation => (1, 2, 2),
        }
    }
}

/// Runs `steps` random operations from `seed` through the engine and the
/// model, comparing every answer; returns how many matches and holds it
/// saw, and how many matches took the lone receive's fast path.
/// Runs `steps` random operations; returns the matches, the holds, and
/// the arrivals taken by the lone and by a posted receive's fast path.
fn run(seed: u64, steps: usize, mix: Mix) -> (usize, usize, usize, usize) {
    let mut rng = Rng::new(seed);
    let mut engine: MatchEngine<u32, u32> = MatchEngine::new();
    let max_ahead = engine.config().max_ahead;
    let mut model = Model::default();
    let mut events = Vec::new();
    // Sender side: next sequence number per stream; sent, not arrived.
    let mut next_send: HashMap<(u32, u32), u32> = HashMap::new();
    let mut in_flight: Vec<(Envelope, u32, u32)> = Vec::new();
    let mut ids: HashMap<u32, PostId> = HashMap::new();
    let (mut matches, mut holds, mut lone_taken, mut posted_taken) = (0, 0, 0, 0);
    let mut last_queued = None;
    // Some streams start just below the wrap.
    for ctx in 0..CONTEXTS {
        for src in 0..SOURCES {
            if rng.chance(50) {
                let start = u32::MAX - rng.below(8) as u32;
                engine.set_next_seq(ContextId(ctx), src, start).unwrap();
                model.expected.insert((ctx, src), start);
                next_send.insert((ctx, src), start);
            }
        }
    }
    for step in 0..steps as u32 {
        let op = match mix {
            Mix::Any => rng.below(100),
            // One message in flight at a time, delivered at once: few
            // receives wait, often one alone.
            Mix::Conversation if !in_flight.is_empty() => 55,
            Mix::Conversation => [0, 0, 0, 30, 30, 30, 100, 100, 100, 90][rng.below(10) as usize],
        };
        let (got, want) = match op {
            0..=29 => {
                let spec = random_spec(&mut rng, mix);
                let want = model.post(spec, step);
                let got = match engine.post(spec, step) {
                    Posted::Matched { req, message } => {
                        assert_eq!(message.bytes, message.msg as usize);
                        Answer::PostMatched(req, message.msg)
                    }
                    Posted::Queued(id) => {
                        ids.insert(step, id);
                        last_queued = Some(spec);
                        Answer::PostQueued
                    }
                    Posted::SourceFailed(req) => {
                        assert_eq!(req, step);
                        Answer::PostFailed
                    }
                };
                (got, want)
            }
            30..=54 => {
                // Send: the message is in flight until an arrival picks it.
                let (contexts, sources, tags) = mix.widths();
                let mut ctx = rng.below(u64::from(contexts)) as u32;
                let mut src = rng.below(u64::from(sources)) as u32;
                let mut tag = rng.below(tags as u64) as i32;
                // A conversation mostly answers the receive posted last.
                if let (Mix::Conversation, Some(spec)) = (mix, last_queued.take()) {
                    if rng.chance(70) {
                        ctx = spec.context.0;
                        if let Source::Rank(r) = spec.source {
                            src = r;
                        }
                        if let Tag::Tag(t) = spec.tag {
                            tag = t;
                        }
                    }
                }
                let seq = next_send.entry((ctx, src)).or_insert(0);
                let env = Envelope {
                    context: ContextId(ctx),
                    source: src,
                    tag,
                };
                in_flight.push((env, *seq, step));
                *seq = seq.wrapping_add(1);
                continue;
            }
            55..=79 if !in_flight.is_empty() => {
                // Any message in flight, whichever stream or position.
                let i = rng.below(in_flight.len() as u64) as usize;
                let (env, seq, msg) = in_flight.swap_remove(i);
                if rng.chance(3) {
                    // A bad number instead (a replay, or one beyond the
                    // window); the real message still comes later.
                    in_flight.push((env, seq, msg));
                    let key = (env.context.0, env.source);
                    let expected = *model.expected.get(&key).unwrap_or(&0);
                    let bad = if rng.chance(50) {
                        expected.wrapping_sub(1 + rng.below(3) as u32)
                    } else {
                        expected.wrapping_add(max_ahead + 1)
                    };
                    let want = model.arrive(env, bad, msg, max_ahead);
                    let got = match engine.arrive(env, bad, msg, msg as usize, &mut events) {
                        Ok(_) => Answer::Arrived(short(std::mem::take(&mut events))),
                        Err(r) => {
                            assert_eq!((r.envelope, r.msg), (env, msg));
                            Answer::Refused(r.error)
                        }
                    };
                    (got, want)
                } else {
                    let want = model.arrive(env, seq, msg, max_ahead);
                    // Through the fast paths first (always in a conversation,
                    // else half the time), the lone receive's then a posted
                    // receive's: each must take exactly what `arrive` would.
                    let fast = matches!(mix, Mix::Conversation) || rng.chance(50);
                    let lone = if fast {
                        engine.arrive_lone(env, seq)
                    } else {
                        None
                    };
                    let posted = match lone {
                        None if fast => engine.arrive_posted(env, seq),
                        _ => None,
                    };
                    let got = if let Some((_, req)) = lone {
                        lone_taken += 1;
                        Answer::Arrived(vec![(Some(req), msg)])
                    } else if let Some((_, req)) = posted {
                        posted_taken += 1;
                        Answer::Arrived(vec![(Some(req), msg)])
                    } else {
                        match engine.arrive(env, seq, msg, msg as usize, &mut events) {
                            Ok(Arrival::Held) => {
                                assert!(events.is_empty());
                                Answer::Held
                            }
                            Ok(Arrival::Delivered { released }) => {
                                assert_eq!(events.len(), released + 1);
                                Answer::Arrived(short(std::mem::take(&mut events)))
                            }
                            Err(r) => {
                                assert_eq!((r.envelope, r.msg), (env, msg));
                                Answer::Refused(r.error)
                            }
                        }
                    };
                    (got, want)
                }
            }
            80..=85 => {
                let spec = random_spec(&mut rng, mix);
                let got = engine.probe(spec).map(|m| {
                    assert_eq!(m.bytes, *m.msg as usize);
                    (m.envelope, *m.msg)
                });
                (Answer::Probed(got), Answer::Probed(model.probe(spec)))
            }
            86..=89 => {
                let spec = random_spec(&mut rng, mix);
                let got = engine.take(spec).map(|m| (m.envelope, m.msg));
                (Answer::Took(got), Answer::Took(model.take(spec)))
            }
            100 => {
                // Whatever waits in a context, so that it empties.
                let ctx = rng.below(u64::from(CONTEXTS)) as u32;
                let spec = RecvSpec::new(ContextId(ctx), Source::Any, Tag::Any);
                let got = engine.take(spec).map(|m| (m.envelope, m.msg));
                (Answer::Took(got), Answer::Took(model.take(spec)))
            }
            90..=97 if !ids.is_empty() => {
                // Any id ever queued: most are still queued, some matched,
                // cancelled or failed already.
                let keys: Vec<u32> = ids.keys().copied().collect();
                let req = match mix {
                    Mix::Any => keys[rng.below(keys.len() as u64) as usize],
                    // The latest, most likely still queued: few wait.
                    Mix::Conversation => keys.iter().copied().max().unwrap_or(0),
                };
                let got = engine.cancel(ids[&req]);
                if rng.chance(80) {
                    ids.remove(&req);
                }
                (Answer::Cancelled(got), Answer::Cancelled(model.cancel(req)))
            }
            98 => {
                let ctx = rng.below(u64::from(CONTEXTS)) as u32;
                let src = rng.below(u64::from(SOURCES)) as u32;
                let f = engine.fail_source(ContextId(ctx), src);
                let got = Answer::Failed(
                    f.receives.iter().map(|r| r.1).collect(),
                    f.messages.iter().map(|m| m.msg).collect(),
                );
                (got, model.fail(ctx, src))
            }
            99 => {
                let ctx = rng.below(u64::from(CONTEXTS)) as u32;
                if in_flight.iter().any(|(e, _, _)| e.context.0 == ctx) {
                    continue; // the senders would still be using it
                }
                let want = model.retire(ctx);
                if want == Answer::Retired(Ok(())) {
                    next_send.retain(|k, _| k.0 != ctx);
                }
                (Answer::Retired(engine.retire_context(ContextId(ctx))), want)
            }
            _ => continue,
        };
        assert_eq!(got, want, "seed {seed:#x}, step {step}");
        if let Answer::Arrived(outs) = &got {
            matches += outs.iter().filter(|o| o.0.is_some()).count();
        }
        match got {
            Answer::PostMatched(..) => matches += 1,
            Answer::Held => holds += 1,
            _ => {}
        }
        let counts = engine.counts();
        assert_eq!(
            (counts.posted, counts.unexpected, counts.held),
            (model.posted.len(), model.unexpected.len(), model.held.len()),
            "seed {seed:#x}, step {step}"
        );
        let bytes: u64 = model.unexpected.iter().map(|u| u64::from(u.1)).sum();
        assert_eq!(counts.unexpected_bytes, bytes);
    }
    (matches, holds, lone_taken, posted_taken)
}

#[test]
fn random_traffic_matches_the_model() {
    let (mut matches, mut holds, mut lone, mut posted) = (0, 0, 0, 0);
    for seed in 0..40u64 {
        let mix = if seed % 2 == 1 {
            Mix::Conversation
        } else {
            Mix::Any
        };
        let (m, h, l, p) = run(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15), 3000, mix);
        matches += m;
        holds += h;
        lone += l;
        posted += p;
    }
    // The traffic does match, hold and take both fast paths (the test is
    // not vacuous).
    assert!(
        matches > 5_000 && holds > 1_000 && lone > 100 && posted > 100,
        "{matches} matches, {holds} holds, {lone} through the lone receive, \
         {posted} through a posted one"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn any_seed_matches_the_model(seed in any::<u64>()) {
        let _ = run(seed, 1500, Mix::Any);
        let _ = run(seed, 1500, Mix::Conversation);
    }
}
