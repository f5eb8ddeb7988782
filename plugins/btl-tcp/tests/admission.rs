//! Strangers holding handshake slots and dials cut before the handshake
//! ends: the job's own connections always get through, and every message
//! arrives intact; a connection reset during the handshake ends as a
//! close does.

mod common;

use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::Instant;

use common::*;
use fireopal_abi::param::ParamValue;

/// Raises this process's descriptor limit to at least `want` (within the
/// hard limit): the strangers' ends of the connections live here too.
fn raise_fd_limit(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for the call to fill and read.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
    }
}

/// Opens `n` connections to every rank's listener and sends nothing on
/// them, in batches between which the ranks run (so the listen backlog
/// never overflows into slow SYN retries).
fn hold_strangers(procs: &mut [Proc], n: usize, held: &mut Vec<TcpStream>) {
    let addrs: Vec<_> = procs.iter().map(|p| listen_addr(&p.modules[0])).collect();
    for batch in 0..n.div_ceil(32) {
        for addr in &addrs {
            for _ in 0..32.min(n - batch * 32) {
                held.push(TcpStream::connect(addr).expect("connect a stranger"));
            }
        }
        for _ in 0..4 {
            for p in procs.iter_mut() {
                p.progress();
            }
        }
    }
}

/// Sends `count` messages of distinct contents each way between ranks 0
/// and 1, runs `meanwhile` with them posted, and checks every one.
fn exchange(procs: &mut [Proc], round: u64, count: usize, mut meanwhile: impl FnMut(&mut [Proc])) {
    let before = [procs[0].rec.count_from(1), procs[1].rec.count_from(0)];
    for i in 0..count as u64 {
        let len = 100 + (i as usize * 997) % 9000;
        let seed = round * 1000 + i;
        post(procs[0].m(), 1, 3, b"a", &pattern(seed, len), 2 * seed);
        post(
            procs[1].m(),
            0,
            3,
            b"b",
            &pattern(seed + 500, len),
            2 * seed + 1,
        );
    }
    meanwhile(procs);
    drive(procs, "every message", |p| {
        p[0].rec.count_from(1) == before[0] + count && p[1].rec.count_from(0) == before[1] + count
    });
    for i in 0..count as u64 {
        let len = 100 + (i as usize * 997) % 9000;
        let seed = round * 1000 + i;
        for (to, from, seed) in [(1, 0, seed), (0, 1, seed + 500)] {
            let got = &procs[to].rec.from(from).nth(before[to] + i as usize);
            let got = &got.unwrap().payload;
            assert_eq!(got, &pattern(seed, len), "message {i} to rank {to}");
        }
    }
}

fn strangers_do_not_keep_the_job_out(n: usize) {
    raise_fd_limit(2 * n as u64 + 1024);
    let start = Instant::now();
    let mut procs = job(JobSpec::new(2));
    let mut held = Vec::new();
    // Before the ranks dial each other: every slot is taken.
    hold_strangers(&mut procs, n, &mut held);
    exchange(&mut procs, 1, 50, |_| {});
    // And while messages are in flight.
    exchange(&mut procs, 2, 50, |p| hold_strangers(p, n, &mut held));
    // One line per address and 10 s window, however many were dropped.
    let windows = 1 + start.elapsed().as_secs() as usize / 10;
    for p in &procs {
        assert!(p.rec.failed.is_empty(), "{:?}", p.rec.failed);
        assert_eq!(p.rec.repeated_completion(), None);
        // Reported by address, once per window, not once per connection.
        let lines = p
            .logs
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, l)| l.contains("dropped connection from"))
            .count();
        assert!(lines <= windows, "{lines} lines:\n{}", p.log_text());
        assert!(!p.logged("claiming rank"), "{}", p.log_text());
    }
    drop(held);
}

#[test]
fn sixty_four_strangers_on_each_rank_do_not_keep_the_job_out() {
    strangers_do_not_keep_the_job_out(64);
}

#[test]
fn a_thousand_strangers_on_each_rank_do_not_keep_the_job_out() {
    strangers_do_not_keep_the_job_out(1000);
}

#[test]
fn a_dial_cut_before_the_handshake_is_dialled_again() {
    // One slot per source: a stranger from the same address, arriving
    // while rank 0's connection is unproven, pushes it out.
    let mut procs = job(JobSpec::new(2).param("btl_tcp_max_unauthenticated", ParamValue::UInt(2)));
    post(procs[0].m(), 1, 1, b"h", &pattern(7, 5000), 1);
    // Rank 1 alone takes rank 0's connection; rank 0 does not run, so the
    // handshake cannot finish before the stranger comes.
    drive_some(&mut procs, &[1], "rank 0's connection accepted", |p| {
        p[1].m().connection_count() == 1
    });
    let stranger = TcpStream::connect(listen_addr(&procs[1].modules[0])).unwrap();
    drive(&mut procs, "the message", |p| p[1].rec.count_from(0) == 1);
    assert_eq!(
        procs[1].rec.from(0).next().unwrap().payload,
        pattern(7, 5000)
    );
    assert!(procs[0].logged("dialling again"), "{}", procs[0].log_text());
    assert!(procs[0].rec.failed.is_empty());
    drop(stranger);
}

#[test]
fn a_rank_that_starts_late_is_reached() {
    for round in 0..20u64 {
        let mut procs = job(JobSpec::new(2));
        post(procs[0].m(), 1, 1, b"h", &pattern(round, 3000), 1);
        // Rank 0 runs alone for a while: its connection waits in rank 1's
        // backlog, its Hello unread.
        for _ in 0..2000 {
            procs[0].progress();
        }
        post(procs[1].m(), 0, 1, b"h", &pattern(round + 100, 3000), 2);
        drive(&mut procs, "both messages", |p| {
            p[1].rec.count_from(0) == 1 && p[0].rec.count_from(1) == 1
        });
        assert_eq!(
            procs[1].rec.from(0).next().unwrap().payload,
            pattern(round, 3000)
        );
        assert_eq!(
            procs[0].rec.from(1).next().unwrap().payload,
            pattern(round + 100, 3000)
        );
        for p in &procs {
            assert!(p.rec.failed.is_empty(), "round {round}: {:?}", p.rec.failed);
        }
    }
}

#[test]
fn a_stranger_is_told_apart_by_its_first_bytes() {
    use std::io::Write;
    // The deadline is long: only the prefix check can end it in time.
    let mut procs =
        job(JobSpec::new(2).param("btl_tcp_handshake_timeout_ms", ParamValue::UInt(600_000)));
    let mut s = TcpStream::connect(listen_addr(&procs[0].modules[0])).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n").unwrap();
    assert!(closed_by_module(&mut procs, &mut s));
    assert!(procs[0].logged("bad magic"), "{}", procs[0].log_text());
    assert!(procs[0].logged("127.0.0.1"), "{}", procs[0].log_text());
}

/// Closes `s` with a reset rather than a FIN, as a socket closed with
/// bytes unread is.
fn reset(s: TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `s` is an open socket, and the option value is a `linger`
    // of the length given.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_LINGER: {}", std::io::Error::last_os_error());
    drop(s);
}

/// The losing end of a simultaneous connect closes with the acceptor's
/// handshake bytes unread, which resets the connection: that ends like an
/// orderly close, logged at debug level, not as a dropped stranger.
#[test]
fn a_reset_during_the_handshake_ends_like_a_close() {
    let mut procs = job(JobSpec::new(2));
    let s = TcpStream::connect(listen_addr(&procs[0].modules[0])).unwrap();
    drive_some(&mut procs, &[0], "the connection accepted", |p| {
        p[0].m().connection_count() == 1
    });
    reset(s);
    drive_some(&mut procs, &[0], "the connection closed", |p| {
        p[0].m().connection_count() == 0
    });
    let log = procs[0].log_text();
    assert!(procs[0].logged("closed during the handshake"), "{log}");
    assert!(!procs[0].logged("dropped connection from"), "{log}");
    assert!(procs[0].rec.failed.is_empty(), "{:?}", procs[0].rec.failed);
}
