//! Ping-pong latency and windowed bandwidth between two forked processes,
//! in the OSU pattern `fireopal bench pingpong` uses: latency is half the
//! round trip of a blocking ping-pong averaged over many iterations after
//! warm-up; bandwidth is windows of 64 back-to-back sends with one
//! acknowledgement per window. The receiver's handler copies each payload
//! into a user buffer, as a host would.
//!
//! Ignored by default (figures, not checks); run with
//! `cargo test --release -p fireopal-btl-shm --test bench -- --ignored --nocapture`.

#![allow(unsafe_code)]

mod common;

use std::time::Instant;

use common::{run, Ctx, Job};
use fireopal_abi::btl::{Completion, EventSink, MemRegion, Rank, SendiOutcome, Transport};
use fireopal_abi::PluginError;
use fireopal_btl_shm::{ShmTransport, TransferBuffer};

/// Copies every payload into `dst`, counts messages and completions.
struct CopySink {
    dst: Vec<u8>,
    received: u64,
    completed: u64,
    errors: u64,
}

impl EventSink for CopySink {
    fn deliver(&mut self, _peer: Rank, _tag: u8, _header: &[u8], payload: &[u8]) {
        if let Some(d) = self.dst.get_mut(..payload.len()) {
            d.copy_from_slice(payload);
        }
        self.received += 1;
    }
    fn send_complete(&mut self, _cookie: u64, status: Result<(), PluginError>) {
        self.completed += 1;
        self.errors += u64::from(status.is_err());
    }
    fn rdma_complete(&mut self, _cookie: u64, _status: Result<(), PluginError>) {}
    fn peer_failed(&mut self, _peer: Rank, _error: PluginError) {
        self.errors += 1;
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    /// `sendi` when it fits, else `send` (payload copied by the sender).
    Copy,
    /// `send_in_place` from a transfer buffer (receiver maps it).
    InPlace,
    /// `send_in_place` from ordinary heap memory (receiver reads it with
    /// process_vm_readv into a bounce buffer).
    InPlaceHeap,
}

struct Bench {
    sink: CopySink,
    src: Vec<u8>,
    buf: TransferBuffer,
    pending: u64,
    max_sendi: usize,
}

impl Bench {
    fn send(&mut self, m: &mut ShmTransport, peer: Rank, size: usize, path: Path) {
        if path != Path::Copy {
            let ptr = if path == Path::InPlace {
                self.buf.as_ptr()
            } else {
                self.src.as_mut_ptr()
            };
            // SAFETY: neither buffer is written while sends from it are
            // in flight.
            let r = unsafe { MemRegion::new(ptr, size) };
            // SAFETY: as above.
            let c = unsafe { m.send_in_place(peer, 1, &[], r, 0) }.expect("send_in_place");
            self.pending += u64::from(c == Completion::Pending);
            return;
        }
        let payload = &self.src[..size];
        if size <= self.max_sendi
            && m.sendi(peer, 1, &[], payload).expect("sendi") == SendiOutcome::Sent
        {
            return;
        }
        let c = m.send(peer, 1, &[], payload, 0).expect("send");
        self.pending += u64::from(c == Completion::Pending);
    }

    fn wait_received(&mut self, m: &mut ShmTransport, count: u64) {
        while self.sink.received < count {
            m.progress(&mut self.sink).expect("progress");
        }
    }
}

fn latency(ctx: &mut Ctx, b: &mut Bench, size: usize, iters: u64, path: Path) -> f64 {
    let peer = 1 - ctx.rank;
    let warmup = (iters / 10).max(10);
    let mut start = Instant::now();
    for i in 0..warmup + iters {
        if i == warmup {
            start = Instant::now();
        }
        let base = b.sink.received;
        if ctx.rank == 0 {
            b.send(&mut ctx.module, peer, size, path);
            b.wait_received(&mut ctx.module, base + 1);
        } else {
            b.wait_received(&mut ctx.module, base + 1);
            b.send(&mut ctx.module, peer, size, path);
        }
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / iters as f64 / 2.0;
    finish(ctx, b);
    us
}

fn bandwidth(ctx: &mut Ctx, b: &mut Bench, size: usize, windows: u64, path: Path) -> f64 {
    const WINDOW: u64 = 64;
    let peer = 1 - ctx.rank;
    let warmup = 2;
    let mut start = Instant::now();
    for w in 0..warmup + windows {
        if w == warmup {
            start = Instant::now();
        }
        let base = b.sink.received;
        if ctx.rank == 0 {
            for _ in 0..WINDOW {
                b.send(&mut ctx.module, peer, size, path);
                // As a nonblocking send in MPI would, let the transport
                // progress between sends (completions free staging room).
                ctx.module.progress(&mut b.sink).expect("progress");
            }
            b.wait_received(&mut ctx.module, base + 1);
        } else {
            b.wait_received(&mut ctx.module, base + WINDOW);
            b.send(&mut ctx.module, peer, 4, Path::Copy);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    finish(ctx, b);
    (windows * WINDOW * size as u64) as f64 / secs / 1e9
}

/// Collects outstanding completions before the next measurement.
fn finish(ctx: &mut Ctx, b: &mut Bench) {
    while b.sink.completed < b.pending || !ctx.module.is_quiet() {
        ctx.module.progress(&mut b.sink).expect("progress");
    }
    ctx.barrier();
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn pingpong(ctx: &mut Ctx) -> Result<String, String> {
    const MAX: usize = 4 << 20;
    let mut buf = ctx
        .module
        .alloc_transfer_buffer(MAX)
        .map_err(|e| e.to_string())?;
    buf.as_mut_slice().fill(7);
    let max_sendi = ctx
        .module
        .attributes()
        .map_err(|e| e.to_string())?
        .max_sendi_size as usize;
    let mut b = Bench {
        sink: CopySink {
            dst: vec![0; MAX],
            received: 0,
            completed: 0,
            errors: 0,
        },
        src: vec![3; MAX],
        buf,
        pending: 0,
        max_sendi,
    };
    let mut out = Vec::new();
    let reps = 5;
    if std::env::var_os("SHM_BENCH_QUICK").is_some() {
        // The three figures of the targets only, for quick tuning.
        let v: Vec<f64> = (0..reps)
            .map(|_| latency(ctx, &mut b, 8, 200_000, Path::Copy))
            .collect();
        out.push(format!("latency 8 B: {:.3} us", median(v)));
        let v: Vec<f64> = (0..reps)
            .map(|_| latency(ctx, &mut b, 64 << 10, 5_000, Path::InPlace))
            .collect();
        out.push(format!("latency 65536 B in place: {:.3} us", median(v)));
        let v: Vec<f64> = (0..reps)
            .map(|_| bandwidth(ctx, &mut b, 1 << 20, 20, Path::Copy))
            .collect();
        out.push(format!("bandwidth 1048576 B: {:.2} GB/s", median(v)));
        return Ok(out.join("\n"));
    }
    for (size, iters) in [
        (0, 100_000),
        (8, 100_000),
        (64, 100_000),
        (1 << 10, 50_000),
        (8 << 10, 20_000),
        (64 << 10, 5_000),
        (1 << 20, 500),
        (4 << 20, 100),
    ] {
        let v: Vec<f64> = (0..reps)
            .map(|_| latency(ctx, &mut b, size, iters, Path::Copy))
            .collect();
        out.push(format!("latency {size} B: {:.3} us", median(v)));
    }
    for (size, iters) in [(64 << 10, 5_000), (1 << 20, 500), (4 << 20, 100)] {
        let v: Vec<f64> = (0..reps)
            .map(|_| latency(ctx, &mut b, size, iters, Path::InPlace))
            .collect();
        out.push(format!("latency {size} B in place: {:.3} us", median(v)));
    }
    for (size, iters) in [(64 << 10, 5_000), (1 << 20, 500), (4 << 20, 100)] {
        let v: Vec<f64> = (0..reps)
            .map(|_| latency(ctx, &mut b, size, iters, Path::InPlaceHeap))
            .collect();
        out.push(format!(
            "latency {size} B in place, heap (CMA): {:.3} us",
            median(v)
        ));
    }
    for (size, windows) in [(8, 2000), (64 << 10, 100), (1 << 20, 20), (4 << 20, 5)] {
        let v: Vec<f64> = (0..reps)
            .map(|_| bandwidth(ctx, &mut b, size, windows, Path::Copy))
            .collect();
        out.push(format!("bandwidth {size} B: {:.2} GB/s", median(v)));
    }
    for (size, windows) in [(64 << 10, 100), (1 << 20, 20), (4 << 20, 5)] {
        let v: Vec<f64> = (0..reps)
            .map(|_| bandwidth(ctx, &mut b, size, windows, Path::InPlace))
            .collect();
        out.push(format!(
            "bandwidth {size} B in place: {:.2} GB/s",
            median(v)
        ));
    }
    for (size, windows) in [(64 << 10, 100), (1 << 20, 20), (4 << 20, 5)] {
        let v: Vec<f64> = (0..reps)
            .map(|_| bandwidth(ctx, &mut b, size, windows, Path::InPlaceHeap))
            .collect();
        out.push(format!(
            "bandwidth {size} B in place, heap (CMA): {:.2} GB/s",
            median(v)
        ));
    }
    if b.sink.errors != 0 {
        return Err(format!("{} errors", b.sink.errors));
    }
    Ok(out.join("\n"))
}

/// Pins rank `r` to core `r` (of two), so the processes never share a
/// core or migrate with their caches.
fn pin(rank: u32) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET writes inside it;
    // sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(rank as usize % 2, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[test]
#[ignore = "prints figures; run in release with --ignored --nocapture"]
fn pingpong_figures() {
    let out = run(
        Job {
            timeout: std::time::Duration::from_secs(600),
            setup: Some(pin),
            ..Job::default()
        },
        pingpong,
    );
    eprintln!("{}", out[0]);
}

/// Software cost of the small-message path without a second core: two
/// modules of one process, `sendi` of 8 bytes then `progress` on the
/// receiver, per message.
#[test]
#[ignore = "prints figures; run in release with --ignored --nocapture"]
fn small_message_overhead() {
    use fireopal_abi::btl::PeerAddress;
    let key = fireopal_conformance::host::fresh_job_key();
    let mut a = common::open(common::host(0, 2, key, &[]));
    let mut b = common::open(common::host(1, 2, key, &[]));
    let (aa, ba) = (a.address().unwrap(), b.address().unwrap());
    a.add_peers(&[PeerAddress {
        rank: 1,
        node_local: true,
        address: ba.as_slice().into(),
    }])
    .unwrap();
    b.add_peers(&[PeerAddress {
        rank: 0,
        node_local: true,
        address: aa.as_slice().into(),
    }])
    .unwrap();
    let mut sink = CopySink {
        dst: vec![0; 64],
        received: 0,
        completed: 0,
        errors: 0,
    };
    let n = 2_000_000u64;
    for round in 0..3 {
        let start = Instant::now();
        for _ in 0..n {
            assert_eq!(a.sendi(1, 1, &[], &[1u8; 8]).unwrap(), SendiOutcome::Sent);
            b.progress(&mut sink).unwrap();
        }
        let ns = start.elapsed().as_secs_f64() * 1e9 / n as f64;
        eprintln!("round {round}: sendi + progress (8 B, same core): {ns:.1} ns per message");
        let start = Instant::now();
        for _ in 0..n {
            b.progress(&mut sink).unwrap();
        }
        let ns = start.elapsed().as_secs_f64() * 1e9 / n as f64;
        eprintln!("round {round}: empty progress: {ns:.1} ns");
    }
    assert_eq!(sink.received, 3 * n);
}

/// The floor: one cache line bounced between two threads on the two
/// cores (each waits for the other's value and writes the next), half a
/// round trip per step.
#[test]
#[ignore = "prints figures; run in release with --ignored --nocapture"]
fn cache_line_floor() {
    use std::sync::atomic::{AtomicU64, Ordering};
    #[repr(align(64))]
    struct Line(AtomicU64);
    let line = std::sync::Arc::new(Line(AtomicU64::new(0)));
    let n = 2_000_000u64;
    let other = std::sync::Arc::clone(&line);
    let t = std::thread::spawn(move || {
        pin(1);
        let mut v = 1;
        while v < n {
            while other.0.load(Ordering::Acquire) != v {}
            other.0.store(v + 1, Ordering::Release);
            v += 2;
        }
    });
    pin(0);
    let start = Instant::now();
    let mut v = 0;
    while v < n {
        line.0.store(v + 1, Ordering::Release);
        v += 2;
        while v < n && line.0.load(Ordering::Acquire) != v {}
    }
    let ns = start.elapsed().as_secs_f64() * 1e9 / n as f64;
    t.join().unwrap();
    eprintln!("cache line, one way: {ns:.1} ns");
}

/// Where the time of an 8-byte ping-pong goes: time stamp counters read
/// before `sendi`, in the handler, and after the answer's `sendi`, on both
/// sides (the counter is the same on both cores).
#[cfg(target_arch = "x86_64")]
fn latency_breakdown(ctx: &mut Ctx) -> Result<String, String> {
    fn tsc() -> u64 {
        // SAFETY: reading the time stamp counter has no preconditions.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    struct StampSink {
        at: u64,
        received: u64,
    }
    impl EventSink for StampSink {
        fn deliver(&mut self, _: Rank, _: u8, _: &[u8], _: &[u8]) {
            self.at = tsc();
            self.received += 1;
        }
        fn send_complete(&mut self, _: u64, _: Result<(), PluginError>) {}
        fn rdma_complete(&mut self, _: u64, _: Result<(), PluginError>) {}
        fn peer_failed(&mut self, _: Rank, _: PluginError) {}
    }
    let n = 100_000usize;
    let peer = 1 - ctx.rank;
    let mut sink = StampSink { at: 0, received: 0 };
    let mut sent = vec![0u64; n];
    let mut got = vec![0u64; n];
    let mut after = vec![0u64; n];
    let mut call = vec![0u64; n];
    let t0 = (Instant::now(), tsc());
    for i in 0..n {
        if ctx.rank == 0 {
            sent[i] = tsc();
            while ctx
                .module
                .sendi(peer, 1, &[], &[0u8; 8])
                .map_err(|e| e.to_string())?
                != SendiOutcome::Sent
            {}
            after[i] = tsc();
            while sink.received <= i as u64 {
                ctx.module.progress(&mut sink).map_err(|e| e.to_string())?;
            }
            got[i] = sink.at;
        } else {
            while sink.received <= i as u64 {
                call[i] = tsc();
                ctx.module.progress(&mut sink).map_err(|e| e.to_string())?;
            }
            got[i] = sink.at;
            while ctx
                .module
                .sendi(peer, 1, &[], &[0u8; 8])
                .map_err(|e| e.to_string())?
                != SendiOutcome::Sent
            {}
            sent[i] = tsc();
        }
    }
    let ghz = (tsc() - t0.1) as f64 / t0.0.elapsed().as_nanos() as f64;
    let mine: Vec<u8> = sent
        .iter()
        .chain(&got)
        .chain(&after)
        .chain(&call)
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let all = ctx.allgather(&mine);
    if ctx.rank == 1 {
        return Ok(String::new());
    }
    let words = |b: &[u8]| -> Vec<u64> {
        b.chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let (r0, r1) = (words(&all[0]), words(&all[1]));
    let (s0, g0, a0) = (&r0[..n], &r0[n..2 * n], &r0[2 * n..3 * n]);
    let (s1, g1, c1) = (&r1[..n], &r1[n..2 * n], &r1[3 * n..]);
    let med = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let ns = |d: u64| d as f64 / ghz;
    let skip = n / 10;
    let one_way: Vec<f64> = (skip..n).map(|i| ns(g1[i].wrapping_sub(s0[i]))).collect();
    let turn: Vec<f64> = (skip..n).map(|i| ns(s1[i].wrapping_sub(g1[i]))).collect();
    let back: Vec<f64> = (skip..n).map(|i| ns(g0[i].wrapping_sub(s1[i]))).collect();
    let round: Vec<f64> = (skip..n).map(|i| ns(g0[i].wrapping_sub(s0[i]))).collect();
    let sendi: Vec<f64> = (skip..n).map(|i| ns(a0[i].wrapping_sub(s0[i]))).collect();
    let found: Vec<f64> = (skip..n).map(|i| ns(g1[i].wrapping_sub(c1[i]))).collect();
    let seen: Vec<f64> = (skip..n)
        .map(|i| c1[i] as f64 / ghz - a0[i] as f64 / ghz)
        .collect();
    Ok(format!(
        "medians: sendi start to handler {:.0} ns (sendi {:.0} ns; sendi end to the start of the receiver's progress call that found it {:.0} ns; that call to the handler {:.0} ns); handler to answer sent {:.0} ns; answer sent to handler {:.0} ns; round trip {:.0} ns ({ghz:.2} GHz counter)",
        med(one_way),
        med(sendi),
        med(seen),
        med(found),
        med(turn),
        med(back),
        med(round)
    ))
}

#[cfg(target_arch = "x86_64")]
#[test]
#[ignore = "prints figures; run in release with --ignored --nocapture"]
fn latency_breakdown_figures() {
    let out = run(
        Job {
            setup: Some(pin),
            ..Job::default()
        },
        latency_breakdown,
    );
    eprintln!("{}", out[0]);
}

/// The floor of a fast-box ping-pong: the same ring pattern as the fast
/// boxes (each message in the next line of a 128-line ring, a sequence
/// number in its first word, one ring per direction), with no transport
/// code at all.
#[test]
#[ignore = "prints figures; run in release with --ignored --nocapture"]
fn ring_floor() {
    use std::sync::atomic::{AtomicU64, Ordering};
    #[repr(align(64))]
    struct Line([AtomicU64; 8]);
    const LINES: usize = 128;
    let rings: std::sync::Arc<Vec<Line>> =
        std::sync::Arc::new((0..2 * LINES).map(|_| Line(Default::default())).collect());
    let n = 2_000_000u64;
    let other = std::sync::Arc::clone(&rings);
    let t = std::thread::spawn(move || {
        pin(1);
        for i in 1..=n {
            let slot = &other[(i as usize) % LINES].0;
            while slot[0].load(Ordering::Acquire) != i {}
            let back = &other[LINES + (i as usize) % LINES].0;
            back[1].store(i, Ordering::Relaxed);
            back[0].store(i, Ordering::Release);
        }
    });
    pin(0);
    let start = Instant::now();
    for i in 1..=n {
        let slot = &rings[(i as usize) % LINES].0;
        slot[1].store(i, Ordering::Relaxed);
        slot[0].store(i, Ordering::Release);
        let back = &rings[LINES + (i as usize) % LINES].0;
        while back[0].load(Ordering::Acquire) != i {}
    }
    let ns = start.elapsed().as_secs_f64() * 1e9 / n as f64 / 2.0;
    t.join().unwrap();
    eprintln!("cache line ring, one way: {ns:.1} ns");
}

/// Address of a shared anonymous mapping made before the job forks.
static SHARED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The floors in the same setting as the ping-pong (two forked, pinned
/// processes): one line bounced, and the fast-box ring pattern without
/// any transport code.
fn process_floor(ctx: &mut Ctx) -> Result<String, String> {
    use std::sync::atomic::{AtomicU64, Ordering};
    const LINES: usize = 128;
    let base = SHARED.load(Ordering::Relaxed);
    // SAFETY: the parent mapped 2·LINES+1 lines shared before forking; the
    // words are only used atomically.
    let word = |line: usize, w: usize| unsafe {
        AtomicU64::from_ptr((base + line * 64 + w * 8) as *mut u64)
    };
    let n = 1_000_000u64;
    let me = u64::from(ctx.rank);
    ctx.barrier();
    // One line: rank 0 writes odd values, rank 1 even ones.
    let start = Instant::now();
    let line = word(2 * LINES, 0);
    let mut v = me;
    while v < 2 * n {
        while line.load(Ordering::Acquire) != v {}
        line.store(v + 1, Ordering::Release);
        v += 2;
    }
    let single = start.elapsed().as_secs_f64() * 1e9 / (2 * n) as f64;
    ctx.barrier();
    // Ring pattern: each message in the next line of the receiver's ring.
    let (mine, theirs) = if me == 0 { (0, LINES) } else { (LINES, 0) };
    let mut rings = String::new();
    for lines in [2usize, 8, 32, 128] {
        // Fresh sequence numbers: every ring size starts above the last.
        let first = 1 + (lines as u64) * 10 * n;
        let start = Instant::now();
        for i in first..first + n {
            let slot = i as usize % lines;
            if me == 0 {
                word(theirs + slot, 1).store(i, Ordering::Relaxed);
                word(theirs + slot, 0).store(i, Ordering::Release);
                while word(mine + slot, 0).load(Ordering::Acquire) != i {}
            } else {
                while word(mine + slot, 0).load(Ordering::Acquire) != i {}
                word(theirs + slot, 1).store(i, Ordering::Relaxed);
                word(theirs + slot, 0).store(i, Ordering::Release);
            }
        }
        let ring = start.elapsed().as_secs_f64() * 1e9 / (2 * n) as f64;
        rings.push_str(&format!("; ring of {lines} lines: {ring:.1} ns"));
        ctx.barrier();
    }
    Ok(format!(
        "cache line (processes), one way: {single:.1} ns{rings}"
    ))
}

#[test]
#[ignore = "prints figures; run in release with --ignored --nocapture"]
fn process_floor_figures() {
    // SAFETY: a fresh shared anonymous mapping, never unmapped (the test
    // process ends soon after).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            64 * 257,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    SHARED.store(p as usize, std::sync::atomic::Ordering::Relaxed);
    let out = run(
        Job {
            setup: Some(pin),
            ..Job::default()
        },
        process_floor,
    );
    eprintln!("{}", out[0]);
}
