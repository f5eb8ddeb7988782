//! Targeted cases of the point-to-point matching engine: each MPI matching
//! rule, sequence numbers (holding, wraparound, protocol errors), probe,
//! matched probe, cancel, contexts, failed sources, and 10^4 receives
//! matched by 10^4 exact arrivals.
//!
//! Receives are `u32` request ids and messages `u32` message ids; each
//! message's `bytes` is its id too, so that a `Stored` event names it.

use fireopal_core::p2p::{
    Arrival, ArrivalError, ConfigError, ContextId, Counts, Envelope, Event, MatchConfig,
    MatchEngine, Message, PostId, Posted, RecvSpec, RetireError, Source, SpecError, StreamError,
    Tag, ANY_SOURCE, ANY_TAG,
};

type Engine = MatchEngine<u32, u32>;

const C: ContextId = ContextId(1);

fn env(source: u32, tag: i32) -> Envelope {
    Envelope {
        context: C,
        source,
        tag,
    }
}

fn spec(source: Option<u32>, tag: Option<i32>) -> RecvSpec {
    RecvSpec::new(
        C,
        source.map_or(Source::Any, Source::Rank),
        tag.map_or(Tag::Any, Tag::Tag),
    )
}

/// What happened to a message, in short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    /// (receive, message)
    Matched(u32, u32),
    /// message
    Stored(u32),
}

fn short(events: Vec<Event<u32, u32>>) -> Vec<Out> {
    events
        .into_iter()
        .map(|e| match e {
            Event::Matched { req, message, .. } => Out::Matched(req, message.msg),
            Event::Stored { bytes, .. } => Out::Stored(bytes as u32),
        })
        .collect()
}

/// Arrival of message `msg` (also its byte count) from `source` with `tag`
/// and sequence number `seq`; the events in short.
fn arrive(e: &mut Engine, source: u32, tag: i32, seq: u32, msg: u32) -> Vec<Out> {
    let mut events = Vec::new();
    e.arrive(env(source, tag), seq, msg, msg as usize, &mut events)
        .unwrap_or_else(|r| panic!("{r}"));
    short(events)
}

fn queued(p: Posted<u32, u32>) -> PostId {
    match p {
        Posted::Queued(id) => id,
        other => panic!("not queued: {other:?}"),
    }
}

fn matched(p: Posted<u32, u32>) -> (u32, Envelope, u32) {
    match p {
        Posted::Matched { req, message } => (req, message.envelope, message.msg),
        other => panic!("not matched: {other:?}"),
    }
}

#[test]
fn post_before_arrival_and_arrival_before_post() {
    let mut e = Engine::new();
    queued(e.post(spec(Some(0), Some(7)), 100));
    assert_eq!(e.posted(), 1);
    assert_eq!(arrive(&mut e, 0, 7, 0, 1), [Out::Matched(100, 1)]);
    assert_eq!(e.posted(), 0);

    assert_eq!(arrive(&mut e, 0, 7, 1, 2), [Out::Stored(2)]);
    assert_eq!((e.unexpected(), e.unexpected_bytes()), (1, 2));
    assert_eq!(
        matched(e.post(spec(Some(0), Some(7)), 101)),
        (101, env(0, 7), 2)
    );
    assert_eq!(e.counts(), Counts::default());
}

#[test]
fn wildcard_source_and_tag() {
    let mut e = Engine::new();
    queued(e.post(spec(None, Some(5)), 1));
    queued(e.post(spec(Some(2), None), 2));
    queued(e.post(spec(None, None), 3));
    // Tag 5 from anyone: the any-source receive.
    assert_eq!(arrive(&mut e, 9, 5, 0, 10), [Out::Matched(1, 10)]);
    // From rank 2, any tag: the any-tag receive.
    assert_eq!(arrive(&mut e, 2, 40, 0, 11), [Out::Matched(2, 11)]);
    // Anything else: the full wildcard.
    assert_eq!(arrive(&mut e, 7, -3, 0, 12), [Out::Matched(3, 12)]);
    assert_eq!(arrive(&mut e, 7, 5, 1, 13), [Out::Stored(13)]);

    // Stored ones are found by every shape of receive.
    arrive(&mut e, 4, 6, 0, 14);
    arrive(&mut e, 3, 6, 0, 15);
    assert_eq!(matched(e.post(spec(None, Some(6)), 4)).2, 14);
    assert_eq!(matched(e.post(spec(Some(3), None), 5)).2, 15);
    assert_eq!(matched(e.post(spec(None, None), 6)).2, 13);
    assert_eq!(e.unexpected(), 0);
}

#[test]
fn earliest_posted_wins_exact_then_wildcard() {
    for wildcard in [spec(None, Some(1)), spec(Some(0), None), spec(None, None)] {
        let mut e = Engine::new();
        queued(e.post(spec(Some(0), Some(1)), 1));
        queued(e.post(wildcard, 2));
        assert_eq!(arrive(&mut e, 0, 1, 0, 10), [Out::Matched(1, 10)]);
        assert_eq!(arrive(&mut e, 0, 1, 1, 11), [Out::Matched(2, 11)]);
    }
}

#[test]
fn earliest_posted_wins_wildcard_then_exact() {
    for wildcard in [spec(None, Some(1)), spec(Some(0), None), spec(None, None)] {
        let mut e = Engine::new();
        queued(e.post(wildcard, 1));
        queued(e.post(spec(Some(0), Some(1)), 2));
        assert_eq!(arrive(&mut e, 0, 1, 0, 10), [Out::Matched(1, 10)]);
        assert_eq!(arrive(&mut e, 0, 1, 1, 11), [Out::Matched(2, 11)]);
    }
}

#[test]
fn earliest_posted_wins_among_wildcards() {
    let mut e = Engine::new();
    queued(e.post(spec(None, None), 1));
    queued(e.post(spec(Some(0), None), 2));
    queued(e.post(spec(None, Some(1)), 3));
    queued(e.post(spec(Some(0), Some(1)), 4));
    let got: Vec<Out> = (0..4)
        .flat_map(|i| arrive(&mut e, 0, 1, i, 10 + i))
        .collect();
    assert_eq!(
        got,
        [
            Out::Matched(1, 10),
            Out::Matched(2, 11),
            Out::Matched(3, 12),
            Out::Matched(4, 13)
        ]
    );
}

#[test]
fn earliest_arrived_wins() {
    let mut e = Engine::new();
    arrive(&mut e, 3, 1, 0, 10);
    arrive(&mut e, 1, 2, 0, 11);
    arrive(&mut e, 2, 1, 0, 12);
    arrive(&mut e, 1, 1, 1, 13);
    // Any source, tag 1: rank 3's came first.
    assert_eq!(matched(e.post(spec(None, Some(1)), 1)).2, 10);
    // Rank 1, any tag: tag 2 came before tag 1.
    assert_eq!(matched(e.post(spec(Some(1), None), 2)).2, 11);
    assert_eq!(matched(e.post(spec(None, None), 3)).2, 12);
    assert_eq!(matched(e.post(spec(None, None), 4)).2, 13);
    assert!(matches!(e.post(spec(None, None), 5), Posted::Queued(_)));
}

#[test]
fn each_senders_order_holds_under_reordering() {
    // Three senders, four messages each, all with tag 0; arrival order
    // scrambled across and within senders.
    let mut e = Engine::new();
    let arrivals = [
        (2, 3),
        (0, 1),
        (1, 0),
        (2, 1),
        (0, 3),
        (2, 0),
        (0, 2),
        (1, 2),
        (1, 3),
        (2, 2),
        (0, 0),
        (1, 1),
    ];
    let mut stored = Vec::new();
    for (source, seq) in arrivals {
        for out in arrive(&mut e, source, 0, seq, source * 100 + seq) {
            match out {
                Out::Stored(m) => stored.push(m),
                other => panic!("nothing posted: {other:?}"),
            }
        }
    }
    assert_eq!(e.held(), 0);
    assert_eq!(e.unexpected(), 12);
    for source in 0..3 {
        let mine: Vec<u32> = stored
            .iter()
            .copied()
            .filter(|m| m / 100 == source)
            .collect();
        assert_eq!(mine, [0, 1, 2, 3].map(|s| source * 100 + s));
    }
    // Receives from each sender get its messages in sending order.
    for source in 0..3 {
        for s in 0..4 {
            assert_eq!(
                matched(e.post(spec(Some(source), Some(0)), 0)).2,
                source * 100 + s
            );
        }
    }
}

#[test]
fn held_messages_wait_and_are_released_in_order() {
    let mut e = Engine::new();
    queued(e.post(spec(None, None), 1));
    let mut events = Vec::new();
    for seq in [3, 1, 2] {
        let got = e.arrive(env(5, 0), seq, seq, 1, &mut events).unwrap();
        assert_eq!(got, Arrival::Held);
    }
    assert!(events.is_empty());
    assert_eq!(e.held(), 3);
    assert_eq!(e.counts().held_bytes, 3);
    // Held messages are invisible to probe and to receives.
    assert!(e.probe(spec(None, None)).is_none());
    assert_eq!(e.posted(), 1);
    let got = e.arrive(env(5, 0), 0, 0, 1, &mut events).unwrap();
    assert_eq!(got, Arrival::Delivered { released: 3 });
    assert_eq!(
        short(events),
        [
            Out::Matched(1, 0),
            Out::Stored(1),
            Out::Stored(1),
            Out::Stored(1)
        ]
    );
    let taken: Vec<u32> = (0..3)
        .map(|_| e.take(spec(Some(5), None)).unwrap().msg)
        .collect();
    assert_eq!(taken, [1, 2, 3]);
    assert_eq!(e.next_seq(C, 5), 4);
    assert_eq!(e.counts(), Counts::default());
}

#[test]
fn sequence_numbers_wrap_around() {
    let mut e = Engine::new();
    let start = u32::MAX - 2;
    e.set_next_seq(C, 4, start).unwrap();
    // Sent as MAX-2, MAX-1, MAX, 0, 1; arriving backwards.
    let seqs: Vec<u32> = (0..5).map(|i| start.wrapping_add(i)).collect();
    for (i, &seq) in seqs.iter().enumerate().rev().take(4) {
        assert!(arrive(&mut e, 4, 0, seq, i as u32).is_empty());
    }
    let outs = arrive(&mut e, 4, 0, seqs[0], 0);
    assert_eq!(outs, (0..5).map(Out::Stored).collect::<Vec<_>>());
    assert_eq!(e.next_seq(C, 4), 2);
    // MAX is now behind, not far ahead.
    let mut events = Vec::new();
    let r = e
        .arrive(env(4, 0), u32::MAX, 9, 0, &mut events)
        .unwrap_err();
    assert_eq!(
        r.error,
        ArrivalError::Stale {
            seq: u32::MAX,
            expected: 2
        }
    );
}

#[test]
fn protocol_errors_hand_the_message_back() {
    let config = MatchConfig {
        max_ahead: 4,
        max_held: 2,
    };
    let mut e = Engine::with_config(config).unwrap();
    let mut events = Vec::new();
    let mut refuse = |e: &mut Engine, source, seq| {
        let r = e
            .arrive(env(source, 0), seq, 77, 5, &mut events)
            .unwrap_err();
        assert_eq!((r.msg, r.envelope), (77, env(source, 0)));
        r.error
    };
    arrive(&mut e, 0, 0, 0, 1);
    assert_eq!(
        refuse(&mut e, 0, 0),
        ArrivalError::Stale {
            seq: 0,
            expected: 1
        }
    );
    assert_eq!(
        refuse(&mut e, 0, 6),
        ArrivalError::TooFarAhead {
            seq: 6,
            expected: 1
        }
    );
    assert_eq!(
        refuse(&mut e, 0, 1 + (1 << 31)),
        ArrivalError::Stale {
            seq: 1 + (1 << 31),
            expected: 1
        }
    );
    arrive(&mut e, 0, 0, 5, 2); // 4 ahead: the edge of the window
    assert_eq!(refuse(&mut e, 0, 5), ArrivalError::DuplicateHeld { seq: 5 });
    arrive(&mut e, 1, 0, 1, 3);
    assert_eq!(refuse(&mut e, 2, 1), ArrivalError::HeldLimit);
    assert_eq!(e.held(), 2);
    assert_eq!(e.set_next_seq(C, 0, 9), Err(StreamError::Held { held: 1 }));
    // The refusals changed nothing: the expected number is the same.
    assert_eq!(e.next_seq(C, 0), 1);

    assert_eq!(
        Engine::with_config(MatchConfig {
            max_ahead: 1 << 31,
            max_held: 1
        })
        .unwrap_err(),
        ConfigError::WindowTooLarge(1 << 31)
    );
    let mut strict = Engine::with_config(MatchConfig {
        max_ahead: 0,
        max_held: 10,
    })
    .unwrap();
    let r = strict.arrive(env(0, 0), 1, 0, 0, &mut events).unwrap_err();
    assert!(matches!(r.error, ArrivalError::TooFarAhead { .. }));
    // A refused message leaves no state behind for a stream (and a
    // context) that only it named.
    assert_eq!(strict.contexts(), 0);
    assert_eq!(strict.next_seq(C, 0), 0);
}

#[test]
fn probe_does_not_consume_and_take_does() {
    let mut e = Engine::new();
    assert!(e.probe(spec(None, None)).is_none());
    arrive(&mut e, 1, 3, 0, 10);
    arrive(&mut e, 2, 3, 0, 11);
    for _ in 0..2 {
        let p = e.probe(spec(None, Some(3))).unwrap();
        assert_eq!(
            p,
            Message {
                envelope: env(1, 3),
                msg: &10,
                bytes: 10
            }
        );
    }
    assert_eq!(e.probe(spec(Some(2), None)).unwrap().msg, &11);
    assert!(e.probe(spec(Some(2), Some(4))).is_none());
    assert_eq!(e.unexpected(), 2);

    // A matched probe removes it: neither a receive nor a probe sees it.
    let m = e.take(spec(None, Some(3))).unwrap();
    assert_eq!((m.envelope, m.msg), (env(1, 3), 10));
    assert_eq!(e.probe(spec(None, None)).unwrap().msg, &11);
    assert_eq!(matched(e.post(spec(None, None), 1)).2, 11);
    assert!(e.take(spec(None, None)).is_none());
    assert_eq!(e.counts(), Counts::default());
}

#[test]
fn cancel_takes_a_receive_out_once() {
    let mut e = Engine::new();
    let a = queued(e.post(spec(None, Some(1)), 1));
    let b = queued(e.post(spec(None, Some(1)), 2));
    assert!(a.order() < b.order());
    assert_eq!(e.cancel(a), Some(1));
    assert_eq!(e.cancel(a), None);
    assert_eq!(arrive(&mut e, 0, 1, 0, 10), [Out::Matched(2, 10)]);
    // Matched: nothing to cancel.
    assert_eq!(e.cancel(b), None);
    // A new receive reusing the slot is not touched by the old id.
    let c = queued(e.post(spec(Some(0), Some(1)), 3));
    assert_eq!(e.cancel(a), None);
    assert_eq!(e.cancel(b), None);
    assert_eq!(e.cancel(c), Some(3));
    assert_eq!(e.posted(), 0);
}

#[test]
fn contexts_are_independent() {
    let mut e = Engine::new();
    let other = ContextId(2);
    let mut events = Vec::new();
    queued(e.post(RecvSpec::new(other, Source::Any, Tag::Any), 1));
    // Same source and sequence number on another context: its own stream.
    assert_eq!(arrive(&mut e, 0, 0, 0, 10), [Out::Stored(10)]);
    e.arrive(
        Envelope {
            context: other,
            source: 0,
            tag: 0,
        },
        0,
        11,
        11,
        &mut events,
    )
    .unwrap();
    assert_eq!(short(events), [Out::Matched(1, 11)]);
    assert!(e
        .probe(RecvSpec::new(other, Source::Any, Tag::Any))
        .is_none());
    assert_eq!(e.context_counts(C).unexpected, 1);
    assert_eq!(e.context_counts(other), Counts::default());
    assert_eq!(e.next_seq(C, 0), 1);
    assert_eq!(e.next_seq(other, 0), 1);
    assert_eq!(e.next_seq(ContextId(99), 0), 0);
}

#[test]
fn a_failed_source_leaves_nothing_behind() {
    let mut e = Engine::new();
    let r_exact = queued(e.post(spec(Some(1), Some(5)), 1));
    let r_any_tag = queued(e.post(spec(Some(1), None), 2));
    queued(e.post(spec(None, Some(5)), 3)); // stays
    queued(e.post(spec(Some(2), Some(5)), 4)); // stays
    queued(e.post(spec(None, None), 5)); // stays
    let r_late = queued(e.post(spec(Some(1), Some(6)), 6));
    // Rank 1: seq 0 matches receive 1 (the earliest that accepts it), seq
    // 1 receive 2, seq 2 receive 3; seq 4 and 5 are held.
    assert_eq!(arrive(&mut e, 1, 5, 0, 10), [Out::Matched(1, 10)]);
    let mut got = arrive(&mut e, 1, 9, 1, 11);
    got.extend(arrive(&mut e, 1, 5, 2, 12));
    assert_eq!(got, [Out::Matched(2, 11), Out::Matched(3, 12)]);
    // Seq 3 (tag 7) goes to the full wildcard; seq 4 (tag 8) is stored.
    assert_eq!(
        arrive(&mut e, 1, 7, 3, 13)
            .into_iter()
            .chain(arrive(&mut e, 1, 8, 4, 14))
            .collect::<Vec<_>>(),
        [Out::Matched(5, 13), Out::Stored(14)]
    );
    assert!(arrive(&mut e, 1, 8, 6, 16).is_empty());
    assert_eq!(e.held(), 1);
    let _ = (r_exact, r_any_tag);

    let f = e.fail_source(C, 1);
    assert_eq!(f.receives, [(r_late, 6)]);
    let msgs: Vec<(Envelope, u32)> = f.messages.iter().map(|m| (m.envelope, m.msg)).collect();
    assert_eq!(msgs, [(env(1, 8), 14), (env(1, 8), 16)]);
    assert_eq!((e.posted(), e.unexpected(), e.held()), (1, 0, 0));
    assert!(e.source_failed(C, 1));
    assert!(!e.source_failed(ContextId(9), 1));

    // Later: its messages are refused, receives naming it fail at once.
    let mut events = Vec::new();
    let r = e.arrive(env(1, 5), 5, 15, 0, &mut events).unwrap_err();
    assert_eq!(r.error, ArrivalError::SourceFailed);
    assert_eq!(e.post(spec(Some(1), None), 7), Posted::SourceFailed(7));
    assert_eq!(e.set_next_seq(C, 1, 0), Err(StreamError::SourceFailed));
    // Other sources still match the receive that stays.
    assert_eq!(arrive(&mut e, 2, 5, 0, 20), [Out::Matched(4, 20)]);
    // Retiring the context forgets the failure.
    e.retire_context(C).unwrap();
    assert!(!e.source_failed(C, 1));
    assert_eq!(arrive(&mut e, 1, 5, 0, 30), [Out::Stored(30)]);
}

#[test]
fn retire_context_refuses_while_busy() {
    let mut e = Engine::new();
    let busy = |posted, unexpected, held| RetireError::Busy {
        context: C,
        posted,
        unexpected,
        held,
    };
    assert_eq!(e.retire_context(C), Ok(()));
    let id = queued(e.post(spec(None, None), 1));
    assert_eq!(e.retire_context(C), Err(busy(1, 0, 0)));
    e.cancel(id);
    arrive(&mut e, 0, 0, 1, 10);
    assert_eq!(e.retire_context(C), Err(busy(0, 0, 1)));
    arrive(&mut e, 0, 0, 0, 11);
    assert_eq!(e.retire_context(C), Err(busy(0, 2, 0)));
    assert_eq!(e.contexts(), 1);
    while e.take(spec(None, None)).is_some() {}
    // Other contexts are not in the way.
    queued(e.post(RecvSpec::new(ContextId(5), Source::Any, Tag::Any), 2));
    assert_eq!(e.retire_context(C), Ok(()));
    assert_eq!(e.contexts(), 1);
    // Streams start again at 0.
    assert_eq!(e.next_seq(C, 0), 0);
    assert_eq!(arrive(&mut e, 0, 0, 0, 12), [Out::Stored(12)]);
}

#[test]
fn raw_values_map_to_specs() {
    assert_eq!(
        RecvSpec::from_raw(C, ANY_SOURCE, ANY_TAG),
        Ok(spec(None, None))
    );
    assert_eq!(RecvSpec::from_raw(C, 3, 0), Ok(spec(Some(3), Some(0))));
    assert_eq!(RecvSpec::from_raw(C, -1, 0), Err(SpecError::BadSource(-1)));
    assert_eq!(RecvSpec::from_raw(C, 0, -5), Err(SpecError::BadTag(-5)));
    assert!(spec(None, Some(2)).matches(&env(4, 2)));
    assert!(!spec(None, Some(2)).matches(&Envelope {
        context: ContextId(0),
        ..env(4, 2)
    }));
    assert_eq!(env(4, 2).exact_spec(), spec(Some(4), Some(2)));
}

#[test]
fn ten_thousand_exact_receives_then_ten_thousand_arrivals() {
    const N: u32 = 10_000;
    let mut e = Engine::new();
    // 100 senders, 100 tags each: 10^4 distinct exact receives.
    for i in 0..N {
        queued(e.post(spec(Some(i % 100), Some((i / 100) as i32)), i));
    }
    assert_eq!(e.posted(), N as usize);
    let mut events = Vec::with_capacity(1);
    let mut next_seq = [0u32; 100];
    // Arrivals in reverse posting order; each sender's in sequence.
    for i in (0..N).rev() {
        let source = i % 100;
        let seq = next_seq[source as usize];
        next_seq[source as usize] += 1;
        events.clear();
        e.arrive(env(source, (i / 100) as i32), seq, i, 1, &mut events)
            .unwrap();
        match events.as_slice() {
            [Event::Matched { req, message, .. }] => assert_eq!((*req, message.msg), (i, i)),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(e.counts(), Counts::default());

    // And the other way: 10^4 unexpected, then 10^4 exact receives.
    for i in 0..N {
        let source = i % 100;
        let seq = next_seq[source as usize];
        next_seq[source as usize] += 1;
        e.arrive(env(source, (i / 100) as i32), seq, i, 1, &mut events)
            .unwrap();
    }
    assert_eq!(e.unexpected(), N as usize);
    for i in (0..N).rev() {
        assert_eq!(
            matched(e.post(spec(Some(i % 100), Some((i / 100) as i32)), i)).2,
            i
        );
    }
    assert_eq!(e.counts(), Counts::default());
}

#[test]
fn a_failed_sources_arrived_messages_can_still_be_received() {
    let mut e = Engine::new();
    let r_late = queued(e.post(spec(Some(1), Some(6)), 1));
    // Seq 0 and 1 arrive and are stored; seq 3 is held behind the gap.
    assert_eq!(arrive(&mut e, 1, 5, 0, 10), [Out::Stored(10)]);
    assert_eq!(arrive(&mut e, 1, 8, 1, 11), [Out::Stored(11)]);
    assert!(arrive(&mut e, 1, 5, 3, 13).is_empty());

    let f = e.fail_source_keeping_arrived(C, 1);
    assert_eq!(f.receives, [(r_late, 1)], "it could never match");
    let msgs: Vec<u32> = f.messages.iter().map(|m| m.msg).collect();
    assert_eq!(msgs, [13], "only the held message goes");
    assert_eq!((e.posted(), e.unexpected(), e.held()), (0, 2, 0));
    assert!(e.source_failed(C, 1));

    // Receives naming it take what arrived, in order, then fail.
    let Posted::Matched { message, .. } = e.post(spec(Some(1), None), 2) else {
        panic!("the first arrived message")
    };
    assert_eq!(message.msg, 10);
    assert_eq!(e.probe(spec(Some(1), Some(8))).map(|m| *m.msg), Some(11));
    let Posted::Matched { message, .. } = e.post(spec(None, Some(8)), 3) else {
        panic!("an any-source receive takes it too")
    };
    assert_eq!(message.msg, 11);
    assert_eq!(e.post(spec(Some(1), None), 4), Posted::SourceFailed(4));
    // Later arrivals are refused.
    let mut events = Vec::new();
    let r = e.arrive(env(1, 5), 2, 12, 0, &mut events).unwrap_err();
    assert_eq!(r.error, ArrivalError::SourceFailed);
}
