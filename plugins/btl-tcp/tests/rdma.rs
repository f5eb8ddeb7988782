//! `put` and `get` emulated by messages: data, chunking, and the target's
//! checks of keys, rights and ranges.

// The tests lend memory to the modules through `MemRegion::new`, as the
// host does.
#![allow(unsafe_code)]

mod common;

use common::*;
use fireopal_abi::btl::{Access, Completion, MemRegion, RdmaOp, Transport};
use fireopal_abi::param::ParamValue;
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::wire::tcp::frame::RemoteKey;

fn region(buf: &mut [u8]) -> MemRegion {
    // SAFETY: every buffer passed here outlives the operations and
    // registrations that use it, and the test does not touch it while an
    // operation on it is in flight.
    unsafe { MemRegion::new(buf.as_mut_ptr(), buf.len()) }
}

fn op<'a>(peer: u32, local: MemRegion, remote_addr: u64, key: &'a [u8], cookie: u64) -> RdmaOp<'a> {
    RdmaOp {
        peer,
        local,
        local_registration: u64::MAX,
        remote_addr,
        remote_key: key.into(),
        cookie,
    }
}

/// A window of `len` bytes of rank 1's, registered for remote reads and
/// writes: the buffer (its heap block does not move with it), its address,
/// the registration's id and its remote key.
fn window_of_rank_1(procs: &mut [Proc], len: usize) -> (Vec<u8>, u64, u64, Vec<u8>) {
    let mut target = vec![0u8; len];
    let base = target.as_ptr() as u64;
    let reg = procs[1]
        .m()
        .register_mem(
            region(&mut target),
            Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    (target, base, reg.id, reg.remote_key.to_vec())
}

fn wait_rdma(procs: &mut [Proc], rank: usize, cookie: u64) -> Result<(), PluginError> {
    drive(procs, "rdma completion", |p| {
        p[rank].rec.rdma.contains_key(&cookie)
    });
    assert_eq!(procs[rank].rec.repeated_completion(), None);
    procs[rank].rec.rdma[&cookie][0].clone()
}

#[test]
fn bad_keys_and_ranges_are_errors_to_the_initiator_and_touch_nothing() {
    let mut procs = job(JobSpec::new(2));
    let mut target = vec![0xeeu8; 4096];
    let base = target.as_ptr() as u64;
    let rw = procs[1]
        .m()
        .register_mem(
            region(&mut target[..2048]),
            Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let ro = procs[1]
        .m()
        .register_mem(region(&mut target[2048..]), Access::REMOTE_READ)
        .unwrap();
    let rw_key = rw.remote_key.to_vec();
    let ro_key = ro.remote_key.to_vec();
    let mut forged = RemoteKey::parse(&rw_key).unwrap();
    forged.secret ^= 1;
    let forged = forged.encode().to_vec();
    let unknown = RemoteKey { id: 999, secret: 1 }.encode().to_vec();

    let mut src = vec![0x11u8; 4096];
    let cases: [(&str, u64, usize, &[u8]); 6] = [
        ("past the end", base + 2000, 100, &rw_key),
        ("before the start", base - 8, 10, &rw_key),
        ("overlapping the next registration", base + 1, 2048, &rw_key),
        ("read-only registration", base + 2048, 10, &ro_key),
        ("forged secret", base, 10, &forged),
        ("unknown registration", base, 10, &unknown),
    ];
    let mut cookie = 100;
    for (what, addr, len, key) in cases {
        cookie += 1;
        let e = procs[0]
            .m()
            .put(&op(1, region(&mut src[..len]), addr, key, cookie))
            .and_then(|_| wait_rdma(&mut procs, 0, cookie))
            .expect_err(what);
        assert!(is_kind(&e, ErrorKind::INVALID_ARGUMENT), "{what}: {e}");
    }
    // Reads: beyond the range, and without the right.
    let wo = procs[1]
        .m()
        .register_mem(region(&mut target[..16]), Access::REMOTE_WRITE)
        .unwrap();
    let wo_key = wo.remote_key.to_vec();
    for (what, addr, len, key) in [
        ("get past the end", base + 2040, 16usize, &rw_key),
        ("get without read access", base, 8, &wo_key),
        ("get with an unknown key", base, 8, &unknown),
    ] {
        cookie += 1;
        let mut dst = vec![0x77u8; len];
        let e = procs[0]
            .m()
            .get(&op(1, region(&mut dst), addr, key, cookie))
            .and_then(|_| wait_rdma(&mut procs, 0, cookie))
            .expect_err(what);
        assert!(is_kind(&e, ErrorKind::INVALID_ARGUMENT), "{what}: {e}");
        assert!(
            dst.iter().all(|&b| b == 0x77),
            "{what}: local buffer untouched"
        );
    }
    assert!(
        target.iter().all(|&b| b == 0xee),
        "no byte of the target was written"
    );

    // A malformed key fails at once, without a completion.
    let e = procs[0]
        .m()
        .put(&op(1, region(&mut src[..4]), base, &rw_key[..15], 500))
        .unwrap_err();
    assert!(is_kind(&e, ErrorKind::INVALID_ARGUMENT), "{e}");
    // A deregistered key names nothing.
    procs[1].m().deregister_mem(rw.id).unwrap();
    cookie += 1;
    let e = procs[0]
        .m()
        .put(&op(1, region(&mut src[..4]), base, &rw_key, cookie))
        .and_then(|_| wait_rdma(&mut procs, 0, cookie))
        .unwrap_err();
    assert!(e.message.contains("remote key"), "{e}");
    assert!(!procs[0].rec.rdma.contains_key(&500));

    // The connection is still good.
    let ok = procs[1]
        .m()
        .register_mem(region(&mut target[..64]), Access::REMOTE_WRITE)
        .unwrap();
    cookie += 1;
    procs[0]
        .m()
        .put(&op(1, region(&mut src[..64]), base, &ok.remote_key, cookie))
        .unwrap();
    wait_rdma(&mut procs, 0, cookie).unwrap();
    assert_eq!(target[..64], src[..64]);
    assert!(procs[0].rec.failed.is_empty() && procs[1].rec.failed.is_empty());
}

#[test]
fn put_and_get_interleave_with_messages_in_order() {
    let mut procs = job(JobSpec::new(2));
    let (target, base, _, key) = window_of_rank_1(&mut procs, 1 << 20);
    let mut src = pattern(3, 1 << 20);
    post(procs[0].m(), 1, 1, b"before", b"", 1);
    procs[0]
        .m()
        .put(&op(1, region(&mut src), base, &key, 10))
        .unwrap();
    post(procs[0].m(), 1, 1, b"after", b"", 2);
    drive(&mut procs, "messages", |p| p[1].rec.count_from(0) == 2);
    // Frames to one peer are handled in order: the put landed before the
    // second message was delivered.
    assert!(target == src);
    wait_rdma(&mut procs, 0, 10).unwrap();
}

#[test]
fn a_burst_of_small_operations_completes_once_each_and_keeps_message_order() {
    // Small operations started while others are in flight are held for
    // the next progress and written together; none may be lost, doubled
    // or overtaken by a message sent after them.
    let mut procs = job(JobSpec::new(2));
    let (target, base, reg_id, key) = window_of_rank_1(&mut procs, 64 << 10);
    const OPS: u64 = 200;
    let mut sources: Vec<Vec<u8>> = (0..OPS).map(|i| pattern(i + 1, 16)).collect();
    for (i, src) in sources.iter_mut().enumerate() {
        let at = base + 32 * i as u64;
        let done = procs[0]
            .m()
            .put(&op(1, region(src), at, &key, 1 + i as u64))
            .unwrap();
        assert_eq!(done, Completion::Pending);
    }
    post(procs[0].m(), 1, 1, b"after the puts", b"", 1000);
    drive(&mut procs, "the message", |p| p[1].rec.count_from(0) == 1);
    for (i, src) in sources.iter().enumerate() {
        let at = 32 * i;
        assert!(target[at..at + 16] == src[..], "put {i} had not landed");
    }
    let mut backs: Vec<Vec<u8>> = (0..OPS).map(|_| vec![0u8; 16]).collect();
    for (i, back) in backs.iter_mut().enumerate() {
        let at = base + 32 * i as u64;
        procs[0]
            .m()
            .get(&op(1, region(back), at, &key, 2000 + i as u64))
            .unwrap();
    }
    drive(&mut procs, "every completion", |p| {
        p[0].rec.rdma.len() == 2 * OPS as usize
    });
    assert_eq!(procs[0].rec.repeated_completion(), None);
    for i in 0..OPS {
        wait_rdma(&mut procs, 0, 1 + i).unwrap();
        wait_rdma(&mut procs, 0, 2000 + i).unwrap();
    }
    assert!(backs == sources, "a get read other bytes");
    assert_eq!(procs[0].m().rdma_in_flight(), 0);
    procs[1].m().deregister_mem(reg_id).unwrap();
}

/// Two ranks with 64 KiB socket buffers (so a large transfer is still in
/// flight when the test acts), connected by a first message from 0 to 1.
fn connected_with_small_buffers() -> Vec<Proc> {
    let spec = JobSpec::new(2)
        .param("btl_tcp_sndbuf", ParamValue::Size(64 << 10))
        .param("btl_tcp_rcvbuf", ParamValue::Size(64 << 10));
    let mut procs = job(spec);
    post(procs[0].m(), 1, 0, b"", b"hello", 0);
    drive(&mut procs, "connection", |p| p[1].rec.count_from(0) == 1);
    procs
}

#[test]
fn deregistering_during_a_put_stops_the_writes_and_fails_the_put() {
    let mut procs = connected_with_small_buffers();
    let mut target = vec![0xeeu8; 4 << 20];
    let base = target.as_ptr() as u64;
    let reg = procs[1]
        .m()
        .register_mem(region(&mut target), Access::REMOTE_WRITE)
        .unwrap();
    let mut src = vec![0x11u8; 4 << 20];
    procs[0]
        .m()
        .put(&op(1, region(&mut src), base, &reg.remote_key, 1))
        .unwrap();
    // The target starts reading the put in place, then releases the memory.
    procs[0].progress();
    procs[1].progress();
    procs[1].m().deregister_mem(reg.id).unwrap();
    let e = wait_rdma(&mut procs, 0, 1).unwrap_err();
    assert!(e.message.contains("released"), "{e}");
    // Small buffers: far less than the last MiB had arrived by then.
    assert!(
        target[3 << 20..].iter().all(|&b| b == 0xee),
        "no write after release"
    );
    assert!(procs[0].rec.failed.is_empty() && procs[1].rec.failed.is_empty());
    // The stream stayed in step.
    post(procs[0].m(), 1, 0, b"", b"after", 2);
    drive(&mut procs, "a later message", |p| {
        p[1].rec.count_from(0) == 2
    });
}

#[test]
fn get_answers_queued_at_deregistration_carry_the_bytes_of_that_moment() {
    let mut procs = connected_with_small_buffers();
    let original = pattern(9, 2 << 20);
    let mut target = original.clone();
    let base = target.as_ptr() as u64;
    let reg = procs[1]
        .m()
        .register_mem(region(&mut target), Access::REMOTE_READ)
        .unwrap();
    let mut dst = vec![0u8; 2 << 20];
    procs[0]
        .m()
        .get(&op(1, region(&mut dst), base, &reg.remote_key, 1))
        .unwrap();
    // The target reads the request and queues the answer (the socket
    // takes only part), then releases and reuses the memory.
    procs[1].progress();
    assert!(procs[1].m().queued_bytes(0) > 0);
    procs[1].m().deregister_mem(reg.id).unwrap();
    target.fill(0x55);
    wait_rdma(&mut procs, 0, 1).unwrap();
    assert!(
        dst == original,
        "the answer holds the bytes of the moment of release"
    );
}

/// The target's `progress` counts the operations it serves, so a rank that
/// only serves a peer's puts and gets is seen at work: no stall watch or
/// idle-module heuristic above the transport takes it for a silent one.
#[test]
fn serving_puts_and_gets_counts_as_work_at_the_target() {
    let mut procs = job(JobSpec::new(2));
    let (_target, base, _reg_id, key) = window_of_rank_1(&mut procs, 1 << 20);
    // The connection is up before anything is counted.
    post(procs[0].m(), 1, 7, &[], b"hello", 1);
    drive(&mut procs, "the first message", |p| {
        p[1].rec.count_from(0) == 1
    });

    for (cookie, is_put, len) in [
        (10u64, true, 64usize),
        (11, false, 64),
        (12, true, 512 << 10),
    ] {
        let mut local = pattern(cookie, len);
        let started = if is_put {
            procs[0]
                .m()
                .put(&op(1, region(&mut local), base, &key, cookie))
        } else {
            procs[0]
                .m()
                .get(&op(1, region(&mut local), base, &key, cookie))
        };
        assert_eq!(started.unwrap(), Completion::Pending);
        let (mut served, start) = (0usize, std::time::Instant::now());
        while !procs[0].rec.rdma.contains_key(&cookie) {
            procs[0].progress();
            served += procs[1].progress();
            assert!(
                start.elapsed() < LIMIT,
                "operation {cookie} never completed"
            );
        }
        wait_rdma(&mut procs, 0, cookie).unwrap();
        assert_eq!(procs[1].rec.delivered.len(), 1, "the target got no message");
        assert!(
            served >= 1,
            "operation {cookie}: the target reported no work"
        );
    }
}
