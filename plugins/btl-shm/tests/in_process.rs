//! Checks that need no second process: `query`, parameters, endpoint
//! checks (own rank, other nodes, bad addresses, another job's segment),
//! and two modules of one process talking to each other (each maps the
//! other's segment exactly as a peer process would).

mod common;

use std::time::{Duration, Instant};

use common::{fill, host, matches, open, random_key, Sink};
use fireopal_abi::btl::{
    BtlComponentImpl, Completion, PeerAddress, Reachability, SendiOutcome, Transport,
};
use fireopal_abi::param::ParamValue;
use fireopal_abi::{Availability, ErrorKind};
use fireopal_btl_shm::{ShmComponent, ShmTransport, PARAM_SINGLE_COPY};

fn peer(rank: u32, node_local: bool, address: &[u8]) -> PeerAddress<'_> {
    PeerAddress {
        rank,
        node_local,
        address: address.into(),
    }
}

fn pair() -> (ShmTransport, ShmTransport) {
    let key = random_key();
    let mut a = open(host(0, 2, key, &[]));
    let mut b = open(host(1, 2, key, &[]));
    let (aa, ba) = (a.address().unwrap(), b.address().unwrap());
    let r = a.add_peers(&[peer(1, true, &ba)]).unwrap();
    assert_eq!(r, vec![Reachability::Reachable]);
    let r = b.add_peers(&[peer(0, true, &aa)]).unwrap();
    assert_eq!(r, vec![Reachability::Reachable]);
    (a, b)
}

/// Progresses both modules until `done`, or panics after 20 s.
fn until(
    a: &mut ShmTransport,
    sa: &mut Sink,
    b: &mut ShmTransport,
    sb: &mut Sink,
    done: impl Fn(&Sink, &Sink) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(sa, sb) {
        a.progress(sa).unwrap();
        b.progress(sb).unwrap();
        assert!(Instant::now() < deadline, "timed out");
    }
}

#[test]
fn query_needs_a_node_local_peer() {
    let key = random_key();
    match ShmComponent::query(&host(0, 1, key, &[])) {
        Availability::Unavailable { reason } => {
            assert!(reason.contains("no other process"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    let priority_and_note = |a: Availability| match a {
        Availability::AvailableWithNote { priority, note } => (priority, note.into_string()),
        other => panic!("{other:?}"),
    };
    let (priority, note) = priority_and_note(ShmComponent::query(&host(0, 2, key, &[])));
    assert_eq!(priority, 80);
    assert!(
        note.starts_with("single copy: memfd mappings on, process_vm_readv "),
        "{note}"
    );
    let custom = [
        (fireopal_btl_shm::PARAM_PRIORITY, ParamValue::UInt(7)),
        (PARAM_SINGLE_COPY, ParamValue::Str("memfd".into())),
    ];
    let (priority, note) = priority_and_note(ShmComponent::query(&host(0, 2, key, &custom)));
    assert_eq!(priority, 7);
    assert!(
        note.ends_with(&format!(
            "process_vm_readv off (disabled by {PARAM_SINGLE_COPY})"
        )),
        "{note}"
    );
}

#[test]
fn bad_parameters_are_refused_by_name() {
    let bogus = [(PARAM_SINGLE_COPY, ParamValue::Str("sometimes".into()))];
    let e = ShmComponent::open(host(0, 2, random_key(), &bogus)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::INVALID_ARGUMENT);
    assert!(e.message.contains(PARAM_SINGLE_COPY), "{e}");
    use fireopal_btl_shm::{
        PARAM_EAGER_LIMIT, PARAM_FBOX_MAX, PARAM_FBOX_SIZE, PARAM_FIFO_SLOTS, PARAM_MAX_SEND,
    };
    let rows = [
        (PARAM_EAGER_LIMIT, ParamValue::Size(10)),
        (PARAM_FBOX_MAX, ParamValue::Size(32)),
        (PARAM_FBOX_MAX, ParamValue::Size(100_000)),
        (PARAM_FBOX_SIZE, ParamValue::Size(1 << 30)),
        (PARAM_FIFO_SLOTS, ParamValue::UInt(100)),
        (PARAM_FIFO_SLOTS, ParamValue::UInt(1 << 20)),
        (PARAM_MAX_SEND, ParamValue::Size(1024)),
    ];
    for (name, value) in rows {
        let e = ShmComponent::open(host(0, 2, random_key(), &[(name, value.clone())]))
            .map(|_| ())
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::INVALID_ARGUMENT, "{name} = {value:?}");
        assert!(e.message.contains(name), "{name} = {value:?}: {e}");
    }
}

#[test]
fn unusable_endpoints_are_reported_with_a_reason() {
    let key = random_key();
    let mut a = open(host(0, 3, key, &[]));
    let own = a.address().unwrap();
    let other_job = open(host(1, 3, random_key(), &[]));
    let foreign = other_job.address().unwrap();
    let mut wrong_rank = open(host(2, 3, key, &[])).address().unwrap();
    wrong_rank[8] ^= 1; // the rank field no longer matches
    let answers = a
        .add_peers(&[
            peer(0, true, &own),
            peer(1, false, &foreign),
            peer(1, true, b"garbage"),
            peer(1, true, &foreign),
            peer(2, true, &wrong_rank),
        ])
        .unwrap();
    let reasons: Vec<String> = answers
        .iter()
        .map(|r| match r {
            Reachability::Unreachable(why) => why.to_string(),
            Reachability::Reachable => "reachable".into(),
        })
        .collect();
    assert!(reasons[0].contains("own rank"), "{reasons:?}");
    assert!(reasons[1].contains("not on this node"), "{reasons:?}");
    assert!(reasons[2].contains("bad address"), "{reasons:?}");
    assert!(reasons[3].contains("job tag"), "{reasons:?}");
    assert!(reasons[4].contains("belongs to rank"), "{reasons:?}");
    let e = a.send(1, 0, &[], b"x", 1).unwrap_err();
    assert_eq!(e.kind, ErrorKind::UNREACHABLE);
}

#[test]
fn two_modules_of_one_process_exchange_every_size() {
    let (mut a, mut b) = pair();
    let attrs = a.attributes().unwrap();
    assert!(
        attrs.max_sendi_size >= 256 && attrs.eager_limit >= 4096 && attrs.max_send_size >= 4 << 20
    );
    let sizes = [0usize, 8, 500, 4000, 9000, 100_000, 3 << 20];
    let (mut sa, mut sb) = (Sink::keeping(), Sink::keeping());
    let mut pending = 0;
    let mut buf = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        buf.resize(n, 0);
        fill(&mut buf, 0, 1, i as u32);
        if a.send(1, 2, &[i as u8], &buf, i as u64).unwrap() == Completion::Pending {
            pending += 1;
        }
        fill(&mut buf, 1, 0, i as u32);
        if b.sendi(0, 2, &[i as u8], &buf).unwrap() == SendiOutcome::Busy {
            b.send(0, 2, &[i as u8], &buf, 100).unwrap();
        }
    }
    until(&mut a, &mut sa, &mut b, &mut sb, |sa, sb| {
        sb.messages.len() == sizes.len()
            && sa.messages.len() == sizes.len()
            && sa.sends.len() >= pending
    });
    for (i, &n) in sizes.iter().enumerate() {
        let (src, tag, h, p) = &sb.messages[i];
        assert_eq!(
            (*src, *tag, h.as_slice(), p.len()),
            (0, 2, &[i as u8][..], n)
        );
        assert!(matches(p, 0, 1, i as u32), "a→b message {i}");
        let (src, _, _, p) = &sa.messages[i];
        assert_eq!(*src, 1);
        assert!(matches(p, 1, 0, i as u32), "b→a message {i}");
    }
    assert_eq!(sa.sends.len(), pending);
    assert!(sa.sends.iter().all(|s| s.1.is_ok()));
}

#[test]
fn removing_a_peer_fails_its_pending_sends_once() {
    let (mut a, mut b) = pair();
    let big = vec![1u8; 1 << 20];
    assert_eq!(a.send(1, 1, &[], &big, 42).unwrap(), Completion::Pending);
    a.remove_peer(1).unwrap();
    let mut sa = Sink::keeping();
    for _ in 0..10 {
        a.progress(&mut sa).unwrap();
    }
    assert_eq!(sa.sends.len(), 1);
    assert_eq!(sa.sends[0].0, 42);
    assert!(sa.sends[0].1.is_err());
    assert_eq!(
        a.send(1, 1, &[], b"x", 1).unwrap_err().kind,
        ErrorKind::UNREACHABLE
    );
    // The other side got the request and answered; nothing breaks there.
    let mut sb = Sink::keeping();
    for _ in 0..10 {
        b.progress(&mut sb).unwrap();
    }
    assert_eq!(sb.messages.len(), 1);
    assert!(sb.failed.is_empty());
}

/// Fast boxes filled and drained in uneven bursts, with entries of mixed
/// sizes and a tiny receive queue, lap after lap: every message arrives
/// once, in order (the reader never takes a stale word for a header).
#[test]
fn uneven_bursts_keep_order_lap_after_lap() {
    let key = random_key();
    let params = [(fireopal_btl_shm::PARAM_FIFO_SLOTS, ParamValue::UInt(2))];
    let mut a = open(host(0, 2, key, &params));
    let mut b = open(host(1, 2, key, &params));
    let (aa, ba) = (a.address().unwrap(), b.address().unwrap());
    a.add_peers(&[peer(1, true, &ba)]).unwrap();
    b.add_peers(&[peer(0, true, &aa)]).unwrap();
    let max = a.attributes().unwrap().max_sendi_size as usize;
    let mut sink = Sink::keeping();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = 0u32;
    let mut buf = vec![0u8; max];
    for _ in 0..3000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Fill until busy, with sizes of one to several lines.
        loop {
            let n = 4 + (x as usize >> 8) % (max - 4);
            x = x.rotate_left(9);
            buf[..4].copy_from_slice(&next.to_le_bytes());
            if a.sendi(1, 3, &[], &buf[..n]).unwrap() == SendiOutcome::Busy {
                break;
            }
            next += 1;
        }
        // Drain one to three times.
        for _ in 0..1 + x % 3 {
            b.progress(&mut sink).unwrap();
        }
    }
    while sink.messages.len() < next as usize {
        assert!(
            b.progress(&mut sink).unwrap() > 0,
            "messages lost: {} of {next}, failures {:?}",
            sink.messages.len(),
            sink.failed
        );
    }
    assert!(sink.failed.is_empty(), "{:?}", sink.failed);
    for (i, m) in sink.messages.iter().enumerate() {
        assert_eq!(u32::from_le_bytes(m.3[..4].try_into().unwrap()), i as u32);
    }
}
