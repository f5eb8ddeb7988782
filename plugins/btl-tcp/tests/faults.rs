//! Misbehaving peers and strangers: each is refused or handled, the module
//! keeps working, and other peers are unaffected.

#![allow(unsafe_code)] // MemRegion::new, as the host does

mod common;

use std::io::Write;
use std::time::Duration;

use common::*;
use fireopal_abi::btl::{Completion, MemRegion, RdmaOp, SendiOutcome, Transport};
use fireopal_abi::param::ParamValue;
use fireopal_abi::ErrorKind;
use fireopal_core::wire::tcp::frame::FrameHeader;

fn small_buffers(spec: JobSpec) -> JobSpec {
    spec.param("btl_tcp_sndbuf", ParamValue::Size(1 << 20))
        .param("btl_tcp_rcvbuf", ParamValue::Size(1 << 20))
}

/// Rank 0 and rank 1 still exchange messages both ways.
fn still_working(procs: &mut [Proc], tag: u8) {
    let before = [procs[0].rec.count_from(1), procs[1].rec.count_from(0)];
    post(
        procs[0].m(),
        1,
        tag,
        b"ping",
        &pattern(1, 3000),
        9000 + u64::from(tag),
    );
    post(
        procs[1].m(),
        0,
        tag,
        b"pong",
        &pattern(2, 3000),
        9100 + u64::from(tag),
    );
    drive(procs, "ping and pong", |p| {
        p[0].rec.count_from(1) == before[0] + 1 && p[1].rec.count_from(0) == before[1] + 1
    });
    assert_eq!(
        procs[1].rec.from(0).last().unwrap().payload,
        pattern(1, 3000)
    );
    assert_eq!(
        procs[0].rec.from(1).last().unwrap().payload,
        pattern(2, 3000)
    );
}

fn established(procs: &mut [Proc]) {
    still_working(procs, 0);
}

#[test]
fn a_stranger_sending_random_bytes_is_dropped_and_logged() {
    let mut procs = job(JobSpec::new(2));
    established(&mut procs);
    let mut s = std::net::TcpStream::connect(listen_addr(&procs[0].modules[0])).unwrap();
    s.write_all(&pattern(42, 4096)).unwrap();
    assert!(closed_by_module(&mut procs, &mut s));
    assert!(
        procs[0].logged("dropped connection from"),
        "{}",
        procs[0].log_text()
    );
    assert!(procs[0].logged("bad magic"));
    assert!(procs[0].rec.failed.is_empty());
    assert_eq!(procs[0].m().connection_count(), 1);
    still_working(&mut procs, 1);
}

#[test]
fn a_truncated_hello_is_dropped() {
    let mut procs = job(JobSpec::new(2));
    established(&mut procs);
    let hello = fireopal_core::wire::tcp::handshake::Hello {
        link: 0,
        from_rank: 1,
        to_rank: 0,
        from_entry: 0,
        to_entry: 0,
        nonce: [1; 32],
    }
    .encode();
    let mut s = std::net::TcpStream::connect(listen_addr(&procs[0].modules[0])).unwrap();
    s.write_all(&hello[..20]).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(closed_by_module(&mut procs, &mut s));
    assert!(
        procs[0].rec.failed.is_empty(),
        "nothing authenticated, no peer touched"
    );
    assert_eq!(procs[0].m().connection_count(), 1);
    still_working(&mut procs, 1);
}

#[test]
fn a_silent_stranger_is_dropped_after_the_handshake_timeout() {
    let mut procs =
        job(JobSpec::new(2).param("btl_tcp_handshake_timeout_ms", ParamValue::UInt(500)));
    established(&mut procs);
    let mut s = std::net::TcpStream::connect(listen_addr(&procs[0].modules[0])).unwrap();
    assert!(closed_by_module(&mut procs, &mut s));
    assert!(
        procs[0].logged("no handshake within 500 ms"),
        "{}",
        procs[0].log_text()
    );
    assert_eq!(procs[0].m().connection_count(), 1);
    still_working(&mut procs, 1);
}

#[test]
fn a_truncated_frame_header_fails_only_that_peer() {
    let mut procs = job(JobSpec::new(3));
    established(&mut procs);
    let mut s = fake_peer(&mut procs, 0, 2, &KEY).expect("authenticated");
    let header = FrameHeader::active(1, 0, 100).encode();
    s.write_all(&header[..10]).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    drive(&mut procs, "failure of rank 2", |p| {
        p[0].rec.failures_of(2) == 1
    });
    assert_eq!(procs[0].rec.count_from(2), 0);
    settle(&mut procs, Duration::from_millis(50));
    assert_eq!(procs[0].rec.failures_of(2), 1, "reported once");
    assert_eq!(procs[0].rec.failed.len(), 1);
    // Later sends to the failed rank fail at once.
    let e = procs[0].m().send(2, 0, b"", b"x", 1).unwrap_err();
    assert!(is_peer_failure(&e), "{e}");
    still_working(&mut procs, 1);
}

#[test]
fn a_length_of_2_pow_40_is_refused_before_any_allocation() {
    let mut procs = job(JobSpec::new(3));
    established(&mut procs);
    let mut s = fake_peer(&mut procs, 0, 2, &KEY).expect("authenticated");
    // One good message first: the fake peer is a real, authenticated one.
    let mut good = FrameHeader::active(7, 2, 3).encode().to_vec();
    good.extend_from_slice(b"hdabc");
    s.write_all(&good).unwrap();
    drive(&mut procs, "the good message", |p| {
        p[0].rec.count_from(2) == 1
    });
    let msg = procs[0].rec.from(2).next().unwrap().clone();
    assert_eq!(
        (msg.tag, msg.header.as_slice(), msg.payload.as_slice()),
        (7, &b"hd"[..], &b"abc"[..])
    );

    s.write_all(&FrameHeader::active(1, 0, 1 << 40).encode())
        .unwrap();
    s.write_all(&[0u8; 4096]).unwrap();
    assert!(closed_by_module(&mut procs, &mut s));
    assert_eq!(procs[0].rec.failures_of(2), 1);
    let (_, e) = &procs[0].rec.failed[0];
    assert!(is_kind(e, ErrorKind::MALFORMED), "{e}");
    assert!(e.message.contains("1099511627776"), "{e}");
    assert!(
        procs[0].logged("rank 2 lost on this link"),
        "{}",
        procs[0].log_text()
    );
    assert_eq!(procs[0].rec.count_from(2), 1);
    still_working(&mut procs, 1);
}

#[test]
fn unknown_frame_kinds_and_broken_markers_fail_the_peer() {
    for (what, bytes) in [
        ("unknown kind", {
            let mut h = FrameHeader::active(0, 0, 0).encode();
            h[0] = 42;
            h
        }),
        ("broken marker", {
            let mut h = FrameHeader::active(0, 0, 0).encode();
            h[5] = b'X';
            h
        }),
        ("header too long", FrameHeader::active(0, 300, 0).encode()),
    ] {
        let mut procs = job(JobSpec::new(3));
        established(&mut procs);
        let mut s = fake_peer(&mut procs, 0, 2, &KEY).expect("authenticated");
        s.write_all(&bytes).unwrap();
        assert!(closed_by_module(&mut procs, &mut s), "{what}");
        assert_eq!(procs[0].rec.failures_of(2), 1, "{what}");
        assert!(
            is_kind(&procs[0].rec.failed[0].1, ErrorKind::MALFORMED),
            "{what}"
        );
        still_working(&mut procs, 1);
    }
}

#[test]
fn a_wrong_job_key_is_refused_both_ways() {
    let mut spec = JobSpec::new(3);
    spec.wrong_key = vec![2];
    let mut procs = job(spec);
    established(&mut procs);

    // A connector with the wrong key that does not check our proof gets
    // its own proof refused: dropped and logged, no peer touched.
    let wrong = [0xa5; 32];
    let refused = fake_peer(&mut procs, 0, 2, &wrong);
    assert!(refused.is_err());
    assert!(
        procs[0].logged("did not prove it holds the job key"),
        "{}",
        procs[0].log_text()
    );
    assert!(procs[0].rec.failed.is_empty());

    // A real module with the wrong key: it refuses our proof when it dials
    // us, and we refuse its proof when we dial it.
    assert_eq!(
        procs[2].m().send(0, 1, b"", b"intruder", 5).unwrap(),
        Completion::Pending
    );
    drive(&mut procs, "intruder's failure", |p| {
        p[2].rec.sends.contains_key(&5)
    });
    assert!(procs[2].rec.sends[&5][0].is_err());
    assert_eq!(procs[2].rec.failures_of(0), 1);
    assert_eq!(procs[2].rec.failed[0].1.kind, ErrorKind::AUTHENTICATION);
    assert!(procs[2].logged("did not prove it holds the job key"));
    assert_eq!(procs[0].rec.count_from(2), 0, "nothing delivered");

    assert_eq!(
        procs[0].m().send(2, 1, b"", b"secret", 6).unwrap(),
        Completion::Pending
    );
    drive(&mut procs, "our refusal", |p| {
        p[0].rec.sends.contains_key(&6)
    });
    assert!(procs[0].rec.sends[&6][0].is_err());
    assert_eq!(procs[2].rec.count_from(0), 0, "nothing delivered");
    still_working(&mut procs, 1);
}

/// A peer that stops reading shuts its window: sends queue, memory stays
/// bounded, and the peer is not failed, however long it stays shut (here
/// fifteen times the acknowledgement limit), since its kernel answers.
#[test]
fn a_peer_that_stops_reading_makes_sends_queue_then_drain() {
    const N: u64 = 48;
    const SIZE: usize = 1 << 20;
    // Socket buffers far below what is sent, whatever the kernel allows.
    let mut procs =
        job(small_buffers(JobSpec::new(2)).param("btl_tcp_ack_timeout_ms", ParamValue::UInt(200)));
    established(&mut procs);
    let mut pending = Vec::new();
    let mut sent_bytes = 0;
    for i in 0..N {
        let payload = pattern(i, SIZE);
        sent_bytes += SIZE + 16 + 8;
        if procs[0]
            .m()
            .send(1, 2, &i.to_le_bytes(), &payload, i)
            .unwrap()
            == Completion::Pending
        {
            pending.push(i);
        }
        // Only the sender progresses: the receiver stopped reading.
        procs[0].progress();
    }
    drive_some(&mut procs, &[0], "a full socket", |p| {
        let q = p[0].modules[0].queued_bytes(1);
        q > 0 && q <= sent_bytes
    });
    // Shut for 3 s of the clock the module's check reads, and for enough
    // progress calls that the check runs many times however slowly the
    // machine goes.
    let shut = std::time::Instant::now();
    let mut calls = 0;
    while calls < 3000 || shut.elapsed() < Duration::from_secs(3) {
        procs[0].progress();
        calls += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(procs[0].rec.failures_of(1), 0, "{:?}", procs[0].rec.failed);
    let queued = procs[0].m().queued_bytes(1);
    assert!(queued > 0, "sends queue while the peer does not read");
    assert!(queued <= sent_bytes, "memory bounded by what was sent");
    assert!(!pending.is_empty());
    assert!(procs[0].rec.sends.len() < pending.len());
    assert_eq!(
        procs[0].m().sendi(1, 3, b"", b"x").unwrap(),
        SendiOutcome::Busy
    );

    // The peer resumes: everything drains, in order, each completion once.
    drive(&mut procs, "all messages", |p| {
        p[1].rec.count_from(0) == N as usize + 1
    });
    drive(&mut procs, "all completions", |p| {
        p[0].rec.sends.len() >= pending.len()
    });
    assert_eq!(procs[0].rec.repeated_completion(), None);
    for c in &pending {
        assert!(procs[0].rec.sends[c][0].is_ok());
    }
    for (i, m) in procs[1].rec.from(0).skip(1).enumerate() {
        assert_eq!(m.header, (i as u64).to_le_bytes());
        assert!(m.payload == pattern(i as u64, SIZE), "message {i} intact");
    }
    assert_eq!(procs[0].m().queued_bytes(1), 0);
}

#[test]
fn a_peer_whose_socket_closes_is_reported_once_and_its_operations_fail_once() {
    const SIZE: usize = 1 << 20;
    let mut procs = job(small_buffers(JobSpec::new(3)));
    established(&mut procs);
    post(procs[0].m(), 2, 0, b"hi", b"", 1);
    drive(&mut procs, "rank 2 connected", |p| {
        p[2].rec.count_from(0) == 1
    });

    // Fill the socket to rank 1 so sends queue, and start RDMA to it.
    let mut pending = Vec::new();
    for i in 0..32u64 {
        if procs[0]
            .m()
            .send(1, 2, b"", &pattern(i, SIZE), 100 + i)
            .unwrap()
            == Completion::Pending
        {
            pending.push(100 + i);
        }
        procs[0].progress();
    }
    assert!(procs[0].m().queued_bytes(1) > 0);
    let mut local = vec![0u8; 4096];
    // SAFETY: `local` outlives the operation, which fails below.
    let region = unsafe { MemRegion::new(local.as_mut_ptr(), local.len()) };
    let key = fireopal_core::wire::tcp::frame::RemoteKey { id: 1, secret: 2 }.encode();
    let get = RdmaOp {
        peer: 1,
        local: region,
        local_registration: u64::MAX,
        remote_addr: 4096,
        remote_key: key[..].into(),
        cookie: 500,
    };
    assert_eq!(procs[0].m().get(&get).unwrap(), Completion::Pending);

    // Rank 1 dies.
    let dead = procs[1].modules.drain(..).collect::<Vec<_>>();
    drop(dead);
    drive_some(&mut procs, &[0, 2], "failure of rank 1", |p| {
        p[0].rec.failures_of(1) == 1
    });
    settle(&mut procs, Duration::from_millis(50));
    assert_eq!(procs[0].rec.failures_of(1), 1, "reported once");
    let why = &procs[0].rec.failed[0].1;
    // Closed in order, or reset if its socket held unread bytes.
    assert!(
        matches!(
            why.kind,
            ErrorKind::CONNECTION_CLOSED | ErrorKind::CONNECTION_RESET
        ),
        "{why}"
    );
    assert_eq!(procs[0].rec.repeated_completion(), None);
    let completed_ok = pending
        .iter()
        .filter(|c| procs[0].rec.sends.get(c).is_some_and(|v| v[0].is_ok()))
        .count();
    let completed_err = pending
        .iter()
        .filter(|c| procs[0].rec.sends.get(c).is_some_and(|v| v[0].is_err()))
        .count();
    assert_eq!(
        completed_ok + completed_err,
        pending.len(),
        "every pending send completed"
    );
    assert!(completed_err > 0);
    let rdma = &procs[0].rec.rdma[&500];
    assert_eq!(rdma.len(), 1);
    assert!(is_peer_failure(rdma[0].as_ref().unwrap_err()));
    assert_eq!(procs[0].m().rdma_in_flight(), 0);
    assert_eq!(procs[0].m().queued_bytes(1), 0, "queue released");

    // Later calls fail fast.
    for e in [
        procs[0].m().send(1, 0, b"", b"late", 900).unwrap_err(),
        procs[0].m().sendi(1, 0, b"", b"late").unwrap_err(),
        procs[0]
            .m()
            .get(&RdmaOp { cookie: 901, ..get })
            .unwrap_err(),
        procs[0]
            .m()
            .put(&RdmaOp { cookie: 902, ..get })
            .unwrap_err(),
    ] {
        assert!(is_peer_failure(&e), "{e}");
    }
    assert!(!procs[0].rec.sends.contains_key(&900));
    assert!(!procs[0].rec.rdma.contains_key(&901));
    assert!(!procs[0].rec.rdma.contains_key(&902));

    // Rank 2 is unaffected.
    post(procs[0].m(), 2, 0, b"still", b"here", 2);
    post(procs[2].m(), 0, 0, b"and", b"back", 3);
    drive_some(&mut procs, &[0, 2], "rank 2 traffic", |p| {
        p[2].rec.count_from(0) == 2 && p[0].rec.count_from(2) == 1
    });
    assert!(procs[2].rec.failed.is_empty());
}

/// Rank 1 sends messages rank 0 has not read yet, then leaves. Rank 0's
/// next writes find it gone (the first draws a reset, a later one a
/// broken pipe); what rank 1 sent before is still delivered, in order,
/// and only then is rank 1 reported failed, once.
#[test]
fn what_a_peer_sent_before_it_left_is_delivered_though_a_write_found_it_gone() {
    // Each sendi writes at once: a burst would be held back until a
    // progress, and this test writes without one.
    let mut procs = job(JobSpec::new(2).param("btl_tcp_sendi_batch", ParamValue::Bool(false)));
    established(&mut procs);
    let before = procs[0].rec.count_from(1);
    for i in 0..8u64 {
        post(
            procs[1].m(),
            0,
            3,
            &i.to_le_bytes(),
            &pattern(i, 5000),
            700 + i,
        );
    }
    drive_some(&mut procs, &[1], "rank 1's sends", |p| {
        p[1].m().queued_bytes(0) == 0
    });
    let dead = procs[1].modules.drain(..).collect::<Vec<_>>();
    drop(dead);
    // Write until the module sees the peer gone; no progress meanwhile,
    // so nothing of what rank 1 sent has been read.
    let mut refused = None;
    for i in 0..1000u64 {
        match procs[0].m().sendi(1, 3, b"late", &pattern(i, 64)) {
            Ok(SendiOutcome::Sent | SendiOutcome::Busy) => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let refused = refused.expect("a write to a peer that left fails");
    assert_eq!(refused.kind, ErrorKind::CONNECTION_RESET, "{refused}");
    drive_some(&mut procs, &[0], "the failure of rank 1", |p| {
        p[0].rec.failures_of(1) == 1
    });
    let late: Vec<_> = procs[0].rec.from(1).skip(before).collect();
    assert_eq!(late.len(), 8, "every message rank 1 sent arrived");
    for (i, m) in late.iter().enumerate() {
        assert_eq!(m.header, (i as u64).to_le_bytes());
        assert_eq!(m.payload, pattern(i as u64, 5000));
    }
    settle(&mut procs[..1], Duration::from_millis(20));
    assert_eq!(procs[0].rec.failures_of(1), 1, "reported once");
}

#[test]
fn a_peer_that_is_gone_before_we_dial_fails_its_sends_once() {
    let mut procs = job(JobSpec::new(3));
    // Rank 2 exits before anyone talked to it: its port is closed.
    drop(procs[2].modules.drain(..).collect::<Vec<_>>());
    let done = procs[0].m().send(2, 0, b"", b"anyone?", 1);
    match done {
        // The refusal may come at once or from progress.
        Ok(Completion::Pending) => {
            drive_some(&mut procs, &[0], "refusal", |p| {
                p[0].rec.sends.contains_key(&1)
            });
            assert!(procs[0].rec.sends[&1][0].is_err());
        }
        Ok(Completion::Done) => panic!("sent to a closed port"),
        Err(e) => assert!(is_peer_failure(&e), "{e}"),
    }
    drive_some(&mut procs, &[0], "failure report", |p| {
        p[0].rec.failures_of(2) == 1
    });
    settle(&mut procs[..2], Duration::from_millis(20));
    assert_eq!(procs[0].rec.failures_of(2), 1);
    assert_eq!(procs[0].rec.repeated_completion(), None);
    let e = procs[0].m().sendi(2, 0, b"", b"x").unwrap_err();
    assert!(is_peer_failure(&e), "{e}");
    still_working(&mut procs, 1);
}

/// Runs `ip` with these arguments, failing the test if it fails.
fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace made by a test, removed when dropped.
struct Netns(String);

impl Netns {
    /// A new namespace with `lo` up, or why there is none (no `ip`, no
    /// privilege).
    fn create() -> Result<Self, String> {
        let name = format!("fo{}ka", std::process::id() % 100_000);
        let out = std::process::Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .map_err(|e| format!("cannot run ip: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
        }
        let ns = Self(name);
        ip(&["-n", &ns.0, "link", "set", "lo", "up"]);
        Ok(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .output();
    }
}

/// Runs the ignored test `inner` of this file inside a network namespace
/// of its own, where it may take `lo` down without touching the machine's
/// network, and fails if it fails. Skipped, saying why, where namespaces
/// cannot be made.
fn run_in_own_netns(inner: &str) {
    use std::io::Read;
    use std::process::{Command, Stdio};
    use std::time::Instant;

    let ns = match Netns::create() {
        Ok(ns) => ns,
        Err(why) => {
            eprintln!("skipped: cannot create a network namespace here: {why}");
            return;
        }
    };
    let exe = std::env::current_exe().expect("test executable");
    let mut child = Command::new("ip")
        .args(["netns", "exec", &ns.0])
        .arg(exe)
        .args([inner, "--exact", "--ignored", "--nocapture"])
        .env("FO_TCP_OWN_NETNS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the inner test");
    // Drained on threads, so a full pipe cannot stall the child.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("stdout")));
    let err = drain(Box::new(child.stderr.take().expect("stderr")));
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the inner test") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let report = format!(
        "stdout:\n{}\nstderr:\n{}",
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default()
    );
    let status = status.unwrap_or_else(|| panic!("inner test timed out\n{report}"));
    assert!(status.success(), "inner test failed\n{report}");
    assert!(
        report.contains("1 passed"),
        "inner test did not run\n{report}"
    );
}

#[test]
fn a_silent_peer_is_failed_whether_idle_or_with_data_in_flight() {
    run_in_own_netns("silent_peer_in_own_netns");
}

/// Cuts the network under established connections (`lo` down in a
/// namespace of its own): an idle connection is failed by keepalive, one
/// with data unacknowledged by the module's acknowledgement check
/// (`btl_tcp_ack_timeout_ms`) or by `btl_tcp_user_timeout_ms`.
#[test]
#[ignore = "run inside a network namespace of its own by a_silent_peer_is_failed_whether_idle_or_with_data_in_flight"]
fn silent_peer_in_own_netns() {
    use std::time::Instant;
    assert!(
        std::env::var_os("FO_TCP_OWN_NETNS").is_some(),
        "takes lo down: run only in a namespace of its own"
    );

    // Idle: both ends probe, and both give up after 1 s + 2 x 1 s.
    let mut procs = job(JobSpec::new(2)
        .param("btl_tcp_keepalive_time", ParamValue::UInt(1))
        .param("btl_tcp_keepalive_intvl", ParamValue::UInt(1))
        .param("btl_tcp_keepalive_probes", ParamValue::UInt(2)));
    established(&mut procs);
    // Idle means nothing unacknowledged: wait for the delayed acks.
    drive(&mut procs, "every byte acknowledged", |_| {
        nothing_unacknowledged()
    });
    // The lower bound counts from before `lo` can be down, the upper one
    // from when it surely is, so a slow `ip` moves neither.
    let cutting = Instant::now();
    ip(&["link", "set", "lo", "down"]);
    let cut = Instant::now();
    drive(&mut procs, "keepalive failures", |p| {
        p[0].rec.failures_of(1) == 1 && p[1].rec.failures_of(0) == 1
    });
    let (since_cutting, took) = (cutting.elapsed(), cut.elapsed());
    eprintln!("idle connection failed after {took:?}");
    assert!(
        since_cutting >= Duration::from_secs(1),
        "failed before any probe: {since_cutting:?}"
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
    let (_, why) = &procs[0].rec.failed[0];
    assert_eq!(why.kind, ErrorKind::TIMED_OUT, "{why}");
    assert!(why.to_string().contains("timed out"), "{why}");
    let late = procs[0].m().send(1, 0, b"", b"late", 1).unwrap_err();
    assert!(is_peer_failure(&late), "{late}");
    drop(procs);
    ip(&["link", "set", "lo", "up"]);

    // Data in flight, no keepalive, no user timeout: the module's
    // acknowledgement check fails the peer.
    data_in_flight_to_a_silent_peer(
        JobSpec::new(2)
            .param("btl_tcp_keepalive_time", ParamValue::UInt(0))
            .param("btl_tcp_ack_timeout_ms", ParamValue::UInt(2000)),
        Duration::ZERO,
        "acknowledged nothing for",
    );
    ip(&["link", "set", "lo", "up"]);

    // The same after the connection sat idle for longer than the limit:
    // the silence is counted from the first unanswered segment, so the
    // peer still gets the whole limit.
    data_in_flight_to_a_silent_peer(
        JobSpec::new(2)
            .param("btl_tcp_keepalive_time", ParamValue::UInt(0))
            .param("btl_tcp_ack_timeout_ms", ParamValue::UInt(2000)),
        Duration::from_secs(3),
        "acknowledged nothing for",
    );
    ip(&["link", "set", "lo", "up"]);

    // The same with the check off: the kernel's user timeout does it.
    data_in_flight_to_a_silent_peer(
        JobSpec::new(2)
            .param("btl_tcp_keepalive_time", ParamValue::UInt(0))
            .param("btl_tcp_ack_timeout_ms", ParamValue::UInt(0))
            .param("btl_tcp_user_timeout_ms", ParamValue::UInt(2000)),
        Duration::ZERO,
        "timed out",
    );
}

/// Whether every established tcp connection of this network namespace had
/// all it sent acknowledged (`tx_queue`, write_seq - snd_una, in
/// /proc/net/tcp and tcp6).
fn nothing_unacknowledged() -> bool {
    ["/proc/self/net/tcp", "/proc/self/net/tcp6"]
        .iter()
        .all(|path| {
            // No tcp6 table without IPv6: nothing there to wait for.
            std::fs::read_to_string(path).map_or(true, |table| {
                table.lines().skip(1).all(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let established = fields.get(3) == Some(&"01");
                    !established || fields.get(4).is_some_and(|q| q.starts_with("00000000:"))
                })
            })
        })
}

/// Cuts `lo` under an established job of `spec`, idle for `idle`, and
/// sends 256 KiB: rank 0 must fail rank 1 within 1 to 20 s (the limit
/// `spec` sets is 2 s), with a reason containing `why`, and fail the send
/// once.
fn data_in_flight_to_a_silent_peer(spec: JobSpec, idle: Duration, why: &str) {
    use std::time::Instant;
    let mut procs = job(spec);
    established(&mut procs);
    settle(&mut procs, idle);
    ip(&["link", "set", "lo", "down"]);
    let cut = Instant::now();
    // Taken into the socket's buffer, or queued: either way unacknowledged.
    let pending = post(procs[0].m(), 1, 3, b"lost", &pattern(7, 256 << 10), 77);
    drive_some(&mut procs, &[0], "silent-peer failure", |p| {
        p[0].rec.failures_of(1) == 1
    });
    let took = cut.elapsed();
    eprintln!("connection with data in flight failed after {took:?}");
    assert!(took >= Duration::from_secs(1), "{took:?}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    match pending {
        Some(cookie) => {
            let send = &procs[0].rec.sends[&cookie];
            assert!(is_peer_failure(send[0].as_ref().unwrap_err()));
        }
        None => assert!(!procs[0].rec.sends.contains_key(&77)),
    }
    let (_, reason) = &procs[0].rec.failed[0];
    assert_eq!(reason.kind, ErrorKind::TIMED_OUT, "{reason}");
    assert!(reason.to_string().contains(why), "{reason}");
    let late = procs[0].m().send(1, 0, b"", b"late", 2).unwrap_err();
    assert!(is_peer_failure(&late), "{late}");
    assert_eq!(procs[0].rec.repeated_completion(), None);
}
