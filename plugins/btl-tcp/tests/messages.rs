//! What tcp adds to the transport suite's message cases: `sendi` against
//! a full socket, partial writes finished by the module, bursts held back
//! until the next `progress`, the write chunk, and tcp's own attributes.

mod common;

use common::*;
use fireopal_abi::btl::{Completion, SendiOutcome, Transport};
use fireopal_abi::param::ParamValue;

fn header_for(i: usize) -> Vec<u8> {
    // Headers of varying length, up to the 256-byte maximum.
    pattern(1000 + i as u64, (i * 37) % 257)
}

#[test]
fn sendi_is_all_or_nothing_and_busy_while_sends_are_queued() {
    let mut procs = job(JobSpec::new(2).param("btl_tcp_sndbuf", ParamValue::Size(64 << 10)));
    // The first sendi starts the connection and sends nothing.
    assert_eq!(
        procs[0].m().sendi(1, 0, b"", b"first").unwrap(),
        SendiOutcome::Busy
    );
    drive(&mut procs, "connection", |p| {
        p[0].modules[0].connection_addresses(1).is_some()
    });

    // Rank 1 stops reading; rank 0 sendi's until the socket is full.
    let mut sent = Vec::new();
    let mut saw_partial = false;
    let mut busy_after_queue = 0;
    for i in 0..10_000u64 {
        let payload = pattern(i, 60_000 + (i as usize % 7));
        let queued_before = procs[0].m().queued_bytes(1);
        match procs[0]
            .m()
            .sendi(1, 3, &i.to_le_bytes(), &payload)
            .unwrap()
        {
            SendiOutcome::Sent => {
                assert_eq!(queued_before, 0, "sendi sent while bytes were queued");
                sent.push(i);
                if procs[0].m().queued_bytes(1) > 0 {
                    // The socket took part: the module kept the rest.
                    saw_partial = true;
                }
            }
            SendiOutcome::Busy => {
                if queued_before > 0 {
                    busy_after_queue += 1;
                }
                if busy_after_queue >= 3 || (queued_before == 0 && !sent.is_empty()) {
                    break;
                }
            }
        }
    }
    assert!(!sent.is_empty());
    eprintln!(
        "sent {} sendi messages, partial write seen: {saw_partial}",
        sent.len()
    );
    if saw_partial {
        assert!(
            busy_after_queue > 0,
            "sendi must answer Busy while bytes are queued"
        );
    }
    // The socket is full, or nearly: the kernel may still move a few
    // segments on to the receiver's buffer (window probes, a collapsed
    // receive queue), so send until one is queued behind, keeping order.
    // sendi answers Busy while it is queued.
    let tail = pattern(99_999, 1000);
    let mut tails = 0u64;
    let tail_cookie = loop {
        let cookie = 77 + tails;
        tails += 1;
        match procs[0].m().send(1, 4, b"tail", &tail, cookie).unwrap() {
            Completion::Pending => break cookie,
            Completion::Done => assert!(tails < 20_000, "the socket never filled"),
        }
    };
    assert!(procs[0].m().queued_bytes(1) > 0);
    assert_eq!(
        procs[0].m().sendi(1, 6, b"", b"tiny").unwrap(),
        SendiOutcome::Busy
    );

    let expected = sent.len() + tails as usize;
    drive(&mut procs, "every sendi message", |p| {
        p[1].rec.count_from(0) == expected
    });
    let msgs: Vec<_> = procs[1].rec.from(0).cloned().collect();
    for (msg, &i) in msgs.iter().zip(&sent) {
        assert_eq!(msg.tag, 3);
        assert_eq!(msg.header, i.to_le_bytes(), "order");
        assert!(
            msg.payload == pattern(i, 60_000 + (i as usize % 7)),
            "message {i} intact"
        );
    }
    for msg in &msgs[sent.len()..] {
        assert_eq!((msg.tag, msg.header.as_slice()), (4, &b"tail"[..]));
        assert_eq!(msg.payload, tail);
    }
    drive(&mut procs, "tail completion", |p| {
        p[0].rec.sends.contains_key(&tail_cookie)
    });
    assert_eq!(procs[0].rec.repeated_completion(), None);
    assert!(procs[0].rec.sends[&tail_cookie][0].is_ok());
    // Once drained, sendi goes straight out again.
    assert_eq!(procs[0].m().queued_bytes(1), 0);
    assert_eq!(
        procs[0].m().sendi(1, 5, b"", b"again").unwrap(),
        SendiOutcome::Sent
    );
}

/// A burst of small messages (no progress between them) leaves in one
/// write: the first at once, the others held back until the next
/// `progress`, as `send`s with a completion (their `sendi` answers
/// `Busy`). A large message flushes them and goes behind them.
#[test]
fn a_burst_of_small_sends_leaves_together_at_the_next_progress() {
    let mut procs = job(JobSpec::new(2));
    assert_eq!(
        procs[0].m().sendi(1, 0, b"", b"").unwrap(),
        SendiOutcome::Busy
    );
    drive(&mut procs, "connection", |p| {
        p[0].modules[0].connection_addresses(1).is_some()
    });
    let payload = |i: u64| pattern(i, 8 + (i as usize * 61) % 2000);
    assert_eq!(
        procs[0]
            .m()
            .sendi(1, 3, &0u64.to_le_bytes(), &payload(0))
            .unwrap(),
        SendiOutcome::Sent
    );
    assert_eq!(procs[0].m().queued_bytes(1), 0, "the first goes at once");
    for i in 1..40u64 {
        let h = i.to_le_bytes();
        assert_eq!(
            procs[0].m().sendi(1, 3, &h, &payload(i)).unwrap(),
            SendiOutcome::Busy,
            "held back for the burst"
        );
        assert_eq!(
            procs[0].m().send(1, 3, &h, &payload(i), 500 + i).unwrap(),
            Completion::Pending
        );
    }
    assert!(procs[0].m().queued_bytes(1) > 0);
    let large = pattern(40, 64 << 10);
    let large_cookie = match procs[0].m().send(1, 3, &40u64.to_le_bytes(), &large, 540) {
        Ok(Completion::Pending) => Some(540),
        Ok(Completion::Done) => None,
        Err(e) => panic!("{e}"),
    };
    drive(&mut procs, "the burst and the large message", |p| {
        p[1].rec.count_from(0) == 41
    });
    for (i, msg) in procs[1].rec.from(0).enumerate() {
        let i = i as u64;
        assert_eq!(msg.header, i.to_le_bytes(), "order");
        let want = if i == 40 { large.clone() } else { payload(i) };
        assert!(msg.payload == want, "message {i} intact");
    }
    drive(&mut procs, "completions", |p| {
        (1..40).all(|i| p[0].rec.sends.contains_key(&(500 + i)))
            && large_cookie.is_none_or(|c| p[0].rec.sends.contains_key(&c))
    });
    assert!(procs[0]
        .rec
        .sends
        .values()
        .all(|s| s.iter().all(|r| r.is_ok())));
    assert_eq!(procs[0].rec.repeated_completion(), None);
    // After a progress the next message is the first of a burst again.
    assert_eq!(
        procs[0].m().sendi(1, 3, b"", b"alone").unwrap(),
        SendiOutcome::Sent
    );
}

/// A burst is per peer: the first message to each of several peers is
/// written at once, a second one to the same peer is held back.
#[test]
fn the_first_message_to_each_peer_goes_at_once() {
    let mut procs = job(JobSpec::new(3));
    for peer in [1, 2] {
        assert_eq!(
            procs[0].m().sendi(peer, 0, b"", b"").unwrap(),
            SendiOutcome::Busy
        );
    }
    drive(&mut procs, "connections", |p| {
        [1, 2]
            .iter()
            .all(|&r| p[0].modules[0].connection_addresses(r).is_some())
    });
    for peer in [1, 2] {
        assert_eq!(
            procs[0].m().sendi(peer, 3, b"", b"first").unwrap(),
            SendiOutcome::Sent,
            "to rank {peer}"
        );
    }
    assert_eq!(
        procs[0].m().sendi(1, 3, b"", b"second").unwrap(),
        SendiOutcome::Busy
    );
    assert_eq!(
        procs[0].m().send(1, 3, b"", b"second", 9).unwrap(),
        Completion::Pending
    );
    drive(&mut procs, "every message", |p| {
        p[1].rec.count_from(0) == 2 && p[2].rec.count_from(0) == 1
    });
    let to_1: Vec<_> = procs[1].rec.from(0).map(|m| m.payload.clone()).collect();
    assert_eq!(to_1, [b"first".to_vec(), b"second".to_vec()]);
    drive(&mut procs, "completion", |p| {
        p[0].rec.sends.contains_key(&9)
    });
}

/// With `btl_tcp_sendi_batch` off every sendi writes at once.
#[test]
fn without_batching_every_sendi_writes_at_once() {
    let mut procs = job(JobSpec::new(2).param("btl_tcp_sendi_batch", ParamValue::Bool(false)));
    assert_eq!(
        procs[0].m().sendi(1, 0, b"", b"").unwrap(),
        SendiOutcome::Busy
    );
    drive(&mut procs, "connection", |p| {
        p[0].modules[0].connection_addresses(1).is_some()
    });
    for i in 0..40u64 {
        assert_eq!(
            procs[0]
                .m()
                .sendi(1, 3, &i.to_le_bytes(), b"small")
                .unwrap(),
            SendiOutcome::Sent
        );
        assert_eq!(procs[0].m().queued_bytes(1), 0);
    }
    drive(&mut procs, "every message", |p| {
        p[1].rec.count_from(0) == 40
    });
}

#[test]
fn attributes_and_addresses() {
    let mut procs = job(JobSpec::new(2));
    let a = procs[0].m().attributes().unwrap();
    assert_eq!(a.max_sendi_size, 256 << 10);
    assert_eq!(a.eager_limit, 256 << 10);
    assert_eq!(a.max_send_size, 8 << 20);
    assert_eq!(a.registration_handle_size, 16);
    assert!(a
        .flags
        .contains(fireopal_abi::btl::BtlFlags::PUT | fireopal_abi::btl::BtlFlags::GET));
    let addr = procs[0].m().address().unwrap();
    let entries = fireopal_core::wire::tcp::address::parse_addresses(&addr).unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].ip.to_string(), "127.0.0.1");
    assert!(entries[0].loopback);
}

#[test]
fn a_sendi_the_socket_takes_only_in_part_is_finished_by_the_module() {
    // Small socket buffers and a large eager limit, so one sendi is
    // certain to be taken only in part while the receiver does not read.
    let mut procs = job(JobSpec::new(2)
        .param("btl_tcp_sndbuf", ParamValue::Size(64 << 10))
        .param("btl_tcp_rcvbuf", ParamValue::Size(64 << 10))
        .param("btl_tcp_eager_limit", ParamValue::Size(4 << 20)));
    assert_eq!(
        procs[0].m().sendi(1, 0, b"", b"").unwrap(),
        SendiOutcome::Busy
    );
    drive(&mut procs, "connection", |p| {
        p[0].modules[0].connection_addresses(1).is_some()
    });
    let big = pattern(7, 3 << 20);
    assert_eq!(
        procs[0].m().sendi(1, 1, b"big", &big).unwrap(),
        SendiOutcome::Sent
    );
    let queued = procs[0].m().queued_bytes(1);
    assert!(
        queued > 0 && queued < big.len(),
        "the socket took part: {queued} queued"
    );
    for _ in 0..3 {
        assert_eq!(
            procs[0].m().sendi(1, 2, b"", b"small").unwrap(),
            SendiOutcome::Busy,
            "bytes are queued"
        );
    }
    assert_eq!(
        procs[0].m().send(1, 2, b"", b"after", 5).unwrap(),
        Completion::Pending
    );
    drive(&mut procs, "both messages", |p| p[1].rec.count_from(0) == 2);
    let msgs: Vec<_> = procs[1].rec.from(0).cloned().collect();
    assert_eq!(msgs[0].header, b"big");
    assert!(
        msgs[0].payload == big,
        "the receiver never sees a partial message"
    );
    assert_eq!(msgs[1].payload, b"after");
    drive(&mut procs, "completion", |p| {
        p[0].rec.sends.contains_key(&5)
    });
    assert_eq!(procs[0].rec.sends.len(), 1, "no completion for the sendi");
    assert_eq!(procs[0].rec.repeated_completion(), None);
}

#[test]
fn a_sendi_over_the_write_chunk_goes_in_pieces_and_arrives_whole() {
    // Pieces of 1000 bytes: the frame header (16 bytes), the message
    // header and the payload are cut at varying places, in one piece, two,
    // and many.
    let mut procs = job(JobSpec::new(2).param("btl_tcp_write_chunk", ParamValue::Size(1000)));
    assert_eq!(
        procs[0].m().sendi(1, 0, b"", b"").unwrap(),
        SendiOutcome::Busy
    );
    drive(&mut procs, "connection", |p| {
        p[0].modules[0].connection_addresses(1).is_some()
    });
    let sizes = [983, 984, 985, 1999, 2000, 60_000];
    for (i, &size) in sizes.iter().enumerate() {
        let header = header_for(i);
        let payload = pattern(50 + i as u64, size);
        // Each sendi the first of its burst, so written at once.
        procs[0].progress();
        assert_eq!(
            procs[0].m().sendi(1, i as u8, &header, &payload).unwrap(),
            SendiOutcome::Sent,
            "{size} bytes"
        );
    }
    drive(&mut procs, "every message", |p| {
        p[1].rec.count_from(0) == sizes.len()
    });
    for (i, msg) in procs[1].rec.from(0).enumerate() {
        assert_eq!((msg.tag, &msg.header), (i as u8, &header_for(i)));
        assert!(
            msg.payload == pattern(50 + i as u64, sizes[i]),
            "message {i}"
        );
    }
    assert!(procs[0].rec.sends.is_empty(), "no completion for a sendi");
}
