//! Checks that need no second process: `query`, parameters, endpoint
//! checks (own rank, other nodes, bad addresses, another job's segment),
//! limits, removal, fast boxes lapped with a tiny receive queue, and the
//! count of what waits behind a full one. The
//! transport contract itself (sizes, order, volume, RDMA) is checked by
//! the suite in `tests/conformance.rs`.

mod common;

use common::{host, open};
use fireopal_abi::btl::{
    BtlComponentImpl, Completion, PeerAddress, Reachability, SendiOutcome, Transport,
};
use fireopal_abi::param::ParamValue;
use fireopal_abi::{Availability, ErrorKind};
use fireopal_btl_shm::{ShmComponent, ShmTransport, PARAM_SINGLE_COPY};
use fireopal_conformance::host::fresh_job_key;
use fireopal_conformance::Recorder;

fn peer(rank: u32, node_local: bool, address: &[u8]) -> PeerAddress<'_> {
    PeerAddress {
        rank,
        node_local,
        address: address.into(),
    }
}

fn pair() -> (ShmTransport, ShmTransport) {
    pair_with(&[])
}

/// Ranks 0 and 1 of one job, each reaching the other, with `params`.
fn pair_with(params: &[(&str, ParamValue)]) -> (ShmTransport, ShmTransport) {
    let key = fresh_job_key();
    let mut a = open(host(0, 2, key, params));
    let mut b = open(host(1, 2, key, params));
    let (aa, ba) = (a.address().unwrap(), b.address().unwrap());
    let r = a.add_peers(&[peer(1, true, &ba)]).unwrap();
    assert_eq!(r, vec![Reachability::Reachable]);
    let r = b.add_peers(&[peer(0, true, &aa)]).unwrap();
    assert_eq!(r, vec![Reachability::Reachable]);
    (a, b)
}

#[test]
fn query_needs_a_node_local_peer() {
    let key = fresh_job_key();
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
    let e = ShmComponent::open(host(0, 2, fresh_job_key(), &bogus)).unwrap_err();
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
        let e = ShmComponent::open(host(0, 2, fresh_job_key(), &[(name, value.clone())]))
            .map(|_| ())
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::INVALID_ARGUMENT, "{name} = {value:?}");
        assert!(e.message.contains(name), "{name} = {value:?}: {e}");
    }
}

#[test]
fn unusable_endpoints_are_reported_with_a_reason() {
    let key = fresh_job_key();
    let mut a = open(host(0, 3, key, &[]));
    let own = a.address().unwrap();
    let other_job = open(host(1, 3, fresh_job_key(), &[]));
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

/// The limits the transport suite's sizes reach up to, and a header one
/// byte over its limit refused as an invalid argument by `sendi` and
/// `send` alike (the suite never sends one).
#[test]
fn limits_cover_4_mib_and_refuse_long_headers() {
    let (mut a, _b) = pair();
    let attrs = a.attributes().unwrap();
    assert!(
        attrs.max_sendi_size >= 256 && attrs.eager_limit >= 4096 && attrs.max_send_size >= 4 << 20,
        "{attrs:?}"
    );
    let long_header = vec![0u8; attrs.max_header_size as usize + 1];
    let e = a.sendi(1, 1, &long_header, &[]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::INVALID_ARGUMENT, "{e}");
    let e = a.send(1, 1, &long_header, &[], 1).unwrap_err();
    assert_eq!(e.kind, ErrorKind::INVALID_ARGUMENT, "{e}");
}

/// What the transport suite's `remove_peer` leaves out: the pending send
/// completes with an error, a later send is `UNREACHABLE`, and the
/// removed peer (which already had the request) delivers it and reports
/// no failure.
#[test]
fn removing_a_peer_fails_its_pending_sends_once() {
    let (mut a, mut b) = pair();
    let big = vec![1u8; 1 << 20];
    assert_eq!(a.send(1, 1, &[], &big, 42).unwrap(), Completion::Pending);
    a.remove_peer(1).unwrap();
    let mut sa = Recorder::default();
    for _ in 0..10 {
        a.progress(&mut sa).unwrap();
    }
    assert_eq!(sa.sends.len(), 1, "{:?}", sa.sends);
    assert!(
        matches!(sa.sends[&42].as_slice(), [Err(_)]),
        "{:?}",
        sa.sends
    );
    assert_eq!(
        a.send(1, 1, &[], b"x", 1).unwrap_err().kind,
        ErrorKind::UNREACHABLE
    );
    // The other side got the request and answered; nothing breaks there.
    let mut sb = Recorder::default();
    for _ in 0..10 {
        b.progress(&mut sb).unwrap();
    }
    assert_eq!(sb.delivered.len(), 1);
    assert!(sb.failed.is_empty());
}

/// Fast boxes filled and drained in uneven bursts, with entries of mixed
/// sizes and a tiny receive queue, lap after lap: every message arrives
/// once, in order (the reader never takes a stale word for a header).
#[test]
fn uneven_bursts_keep_order_lap_after_lap() {
    let (mut a, mut b) = pair_with(&[(fireopal_btl_shm::PARAM_FIFO_SLOTS, ParamValue::UInt(2))]);
    let max = a.attributes().unwrap().max_sendi_size as usize;
    let mut sink = Recorder::default();
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
    while sink.delivered.len() < next as usize {
        assert!(
            b.progress(&mut sink).unwrap() > 0,
            "messages lost: {} of {next}, failures {:?}",
            sink.delivered.len(),
            sink.failed
        );
    }
    assert!(sink.failed.is_empty(), "{:?}", sink.failed);
    for (i, m) in sink.delivered.iter().enumerate() {
        assert_eq!(
            u32::from_le_bytes(m.payload[..4].try_into().unwrap()),
            i as u32
        );
    }
}

/// Sends that wait behind a full receive queue count as unsent until
/// `progress` has written them, and only until then.
#[test]
fn sends_behind_a_full_queue_count_as_unsent_until_written() {
    let (mut a, mut b) = pair_with(&[(fireopal_btl_shm::PARAM_FIFO_SLOTS, ParamValue::UInt(2))]);
    assert_eq!(a.unsent(), 0);
    let len = a.attributes().unwrap().eager_limit as usize;
    let payload = vec![7u8; len];
    let mut sent = 0u64;
    let queued = loop {
        assert!(sent < 10_000, "the receive queue never filled");
        sent += 1;
        if a.send(1, 2, &[], &payload, sent).unwrap() == Completion::Pending {
            break sent;
        }
    };
    assert!(a.unsent() >= len as u64, "unsent {}", a.unsent());
    let (mut sa, mut sb) = (Recorder::default(), Recorder::default());
    for _ in 0..10_000 {
        if a.unsent() == 0 {
            break;
        }
        b.progress(&mut sb).unwrap();
        a.progress(&mut sa).unwrap();
    }
    assert_eq!(a.unsent(), 0);
    assert!(
        matches!(sa.sends.get(&queued).map(Vec::as_slice), Some([Ok(())])),
        "{:?}",
        sa.sends
    );
    for _ in 0..10_000 {
        if sb.delivered.len() as u64 == sent {
            break;
        }
        b.progress(&mut sb).unwrap();
    }
    assert_eq!(sb.delivered.len() as u64, sent);
    assert!(sb.delivered.iter().all(|m| m.payload == payload));
}
