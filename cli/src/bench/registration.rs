//! `fireopal bench registration`: what the messenger's registration cache
//! and its memory monitor cost, each figure beside its own baseline from
//! the same run, in alternating rounds.
//!
//! - **Rendezvous from a reused buffer against a fresh one.** Blocking
//!   tagged ping-pong of rendezvous sizes between ranks 0 and 1: the
//!   sender's buffer is the same each time (a cache hit), the same with
//!   its registration dropped before each send (a miss: the transport
//!   registers it again), or a buffer never used before (a miss on memory
//!   out of the processor's caches). Fresh buffers are mapped and filled
//!   before the timed loop and unmapped after it.
//! - **A hit and a miss on the send path**: `register_memory` and
//!   `deregister_memory` of a 1 MiB buffer, cached or just invalidated,
//!   next to the reused-buffer rendezvous it is part of.
//! - **The monitor's cost per `munmap`** of a 64 KiB range: never
//!   registered (a bare `munmap`), watched by the monitor but not cached
//!   (registered once and dropped), and holding a cached registration;
//!   then what applying that invalidation costs the messenger's next call.

use std::time::{Duration, Instant};

use fireopal::btl::Messenger;
use fireopal::p2p::{self, Communicator, P2p, Tag};
use fireopal_abi::btl::{Access, MemRegion};

use super::super::json::Json;
use super::super::{CommonArgs, Failure};
use super::{human_size, open_front_door, FrontDoor};

const TAG_PING: i32 = 3;
const SIZES: [usize; 3] = [256 << 10, 1 << 20, 4 << 20];
/// Bytes of each range of the `munmap` measurements.
const UNMAP_LEN: usize = 64 << 10;

/// An anonymous mapping, filled so that its pages exist; unmapped on drop.
struct Mapping {
    addr: *mut u8,
    len: usize,
}

impl Mapping {
    #[allow(unsafe_code)]
    fn new(len: usize, fill: u8) -> Result<Self, Failure> {
        // SAFETY: a new private anonymous mapping that nothing else uses.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(format!("mmap of {len} bytes: {}", std::io::Error::last_os_error()).into());
        }
        // SAFETY: the mapping is `len` writable bytes, owned here.
        unsafe { std::ptr::write_bytes(addr.cast::<u8>(), fill, len) };
        Ok(Self {
            addr: addr.cast(),
            len,
        })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `len` readable bytes, alive as long as `self`.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.addr, self.len)
        }
    }

    #[allow(unsafe_code)]
    fn region(&self) -> MemRegion {
        // SAFETY: the mapping outlives every registration made of it here.
        unsafe { MemRegion::new(self.addr, self.len) }
    }

    /// Unmaps it now; returns how long the `munmap` took.
    #[allow(unsafe_code)]
    fn unmap_timed(self) -> Duration {
        let this = std::mem::ManuallyDrop::new(self);
        let start = Instant::now();
        // SAFETY: owned here, and never used again (not dropped either).
        unsafe { libc::munmap(this.addr.cast(), this.len) };
        start.elapsed()
    }
}

impl Drop for Mapping {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: owned here.
        unsafe { libc::munmap(self.addr.cast(), self.len) };
    }
}

/// Where the sender's bytes come from, each time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum From {
    /// One buffer: a cache hit.
    Reused,
    /// One buffer whose registration is dropped before each send.
    Reregistered,
    /// A buffer never sent from before.
    Fresh,
}

const SOURCES: [From; 3] = [From::Reused, From::Reregistered, From::Fresh];

/// Per size and source: latencies (µs) of each round.
#[derive(Default)]
struct Rendezvous {
    reused: Vec<f64>,
    reregistered: Vec<f64>,
    fresh: Vec<f64>,
}

impl Rendezvous {
    fn of(&mut self, source: From) -> &mut Vec<f64> {
        match source {
            From::Reused => &mut self.reused,
            From::Reregistered => &mut self.reregistered,
            From::Fresh => &mut self.fresh,
        }
    }
}

/// Per-operation times (ns) of each round.
#[derive(Default)]
struct Local {
    hit: Vec<f64>,
    miss: Vec<f64>,
    munmap_bare: Vec<f64>,
    munmap_watched: Vec<f64>,
    munmap_cached: Vec<f64>,
    apply: Vec<f64>,
}

pub(super) fn run(
    common: &CommonArgs,
    json: bool,
    quick: bool,
    rounds: usize,
) -> Result<(), Failure> {
    let FrontDoor {
        mut rt,
        world,
        rank,
        peer,
        module,
        ..
    } = open_front_door(common, "registration")?;
    let monitor = rt.messenger().memory_monitor().to_string();
    let p2p = rt.p2p();
    let rounds = if quick { 1 } else { rounds.max(1) };
    let mut rendezvous: Vec<Rendezvous> = SIZES.iter().map(|_| Rendezvous::default()).collect();
    let mut local = Local::default();
    for round in 0..rounds {
        for (i, &n) in SIZES.iter().enumerate() {
            let iters = iterations(n, quick);
            // Rotate which goes first, so that none always runs on a
            // warmer machine.
            for k in 0..SOURCES.len() {
                let source = SOURCES[(k + round) % SOURCES.len()];
                let t = pingpong(p2p, &world, peer, n, iters, source)?;
                let us = t.as_secs_f64() * 1e6 / (2.0 * iters as f64);
                rendezvous[i].of(source).push(us);
            }
        }
        if rank == 0 {
            measure_local(p2p.messenger(), peer, quick, &mut local)?;
        }
    }
    if rank == 0 {
        if json {
            println!(
                "{}",
                to_json(&rendezvous, &local, &module, &monitor).render()
            );
        } else {
            print!(
                "{}",
                to_table(&rendezvous, &local, &module, &monitor, rounds)
            );
        }
    }
    rt.finalize().map_err(|e| e.to_string())?;
    Ok(())
}

fn iterations(n: usize, quick: bool) -> usize {
    let iters = if n <= 1 << 20 { 200 } else { 50 };
    if quick {
        5
    } else {
        iters
    }
}

/// Blocking ping-pong of `n` bytes, `iters` timed round trips after a few
/// untimed ones; each side sends from where `source` says. Returns the
/// time of the timed round trips.
fn pingpong(
    p2p: &mut P2p,
    world: &Communicator,
    peer: u32,
    n: usize,
    iters: usize,
    source: From,
) -> Result<Duration, Failure> {
    let fresh = source == From::Fresh;
    const WARMUP: usize = 3;
    let total = WARMUP + iters;
    let sources: Vec<Mapping> = if fresh {
        (0..total)
            .map(|i| Mapping::new(n, i as u8))
            .collect::<Result<_, _>>()?
    } else {
        vec![Mapping::new(n, 7)?]
    };
    let mut landing = vec![0u8; n];
    let from = p2p::Source::Rank(peer);
    let first = world.rank() == 0 || world.size() == 1;
    let mut start = Instant::now();
    for i in 0..total {
        if i == WARMUP {
            start = Instant::now();
        }
        let buffer = &sources[if fresh { i } else { 0 }];
        if source == From::Reregistered {
            p2p.messenger()
                .invalidate_memory(buffer.addr as usize, buffer.len);
        }
        let data = buffer.bytes();
        if first {
            p2p.send(world, peer, TAG_PING, data)
                .map_err(|e| e.to_string())?;
            p2p.recv(world, from, Tag::Tag(TAG_PING), &mut landing)
                .map_err(|e| e.to_string())?;
        } else {
            p2p.recv(world, from, Tag::Tag(TAG_PING), &mut landing)
                .map_err(|e| e.to_string())?;
            p2p.send(world, peer, TAG_PING, data)
                .map_err(|e| e.to_string())?;
        }
    }
    let elapsed = start.elapsed();
    let expected = if fresh { (total - 1) as u8 } else { 7 };
    if landing.iter().any(|&b| b != expected) {
        return Err(format!("{n}-byte messages arrived with other bytes").into());
    }
    Ok(elapsed)
}

/// The in-process figures of one round: hits and misses on the send path,
/// and `munmap` of ranges the monitor does or does not watch.
fn measure_local(
    m: &mut Messenger,
    peer: u32,
    quick: bool,
    out: &mut Local,
) -> Result<(), Failure> {
    let ops = if quick { 50 } else { 2000 };
    let buffer = Mapping::new(1 << 20, 1)?;
    let register = |m: &mut Messenger| -> Result<(), Failure> {
        let h = m
            .register_memory(peer, buffer.region(), Access::REMOTE_READ)
            .map_err(|e| e.to_string())?;
        m.deregister_memory(h).map_err(|e| e.to_string())?;
        Ok(())
    };
    register(m)?;
    let start = Instant::now();
    for _ in 0..ops {
        register(m)?;
    }
    out.hit.push(per_op(start.elapsed(), ops));
    let mut miss = Duration::ZERO;
    for _ in 0..ops {
        m.invalidate_memory(buffer.addr as usize, buffer.len);
        let start = Instant::now();
        register(m)?;
        miss += start.elapsed();
    }
    out.miss.push(per_op(miss, ops));
    drop(buffer);

    // Three kinds of ranges, made before any is timed.
    let bare: Vec<Mapping> = (0..ops)
        .map(|_| Mapping::new(UNMAP_LEN, 2))
        .collect::<Result<_, _>>()?;
    let watched: Vec<Mapping> = (0..ops)
        .map(|_| Mapping::new(UNMAP_LEN, 3))
        .collect::<Result<_, _>>()?;
    let cached: Vec<Mapping> = (0..ops)
        .map(|_| Mapping::new(UNMAP_LEN, 4))
        .collect::<Result<_, _>>()?;
    for map in watched.iter().chain(&cached) {
        let h = m
            .register_memory(peer, map.region(), Access::REMOTE_READ)
            .map_err(|e| e.to_string())?;
        m.deregister_memory(h).map_err(|e| e.to_string())?;
    }
    for map in &watched {
        m.invalidate_memory(map.addr as usize, map.len);
    }
    let sum = |maps: Vec<Mapping>| maps.into_iter().map(Mapping::unmap_timed).sum::<Duration>();
    out.munmap_bare.push(per_op(sum(bare), ops));
    out.munmap_watched.push(per_op(sum(watched), ops));
    // Each cached range's invalidation is applied by the messenger's next
    // call: one `progress` after each `munmap`.
    let mut unmap = Duration::ZERO;
    let mut apply = Duration::ZERO;
    for map in cached {
        unmap += map.unmap_timed();
        let start = Instant::now();
        m.progress().map_err(|e| e.to_string())?;
        apply += start.elapsed();
    }
    out.munmap_cached.push(per_op(unmap, ops));
    // `progress` with nothing to apply, to take it out of the figure.
    let start = Instant::now();
    for _ in 0..ops {
        m.progress().map_err(|e| e.to_string())?;
    }
    let idle = start.elapsed();
    out.apply.push(per_op(apply.saturating_sub(idle), ops));
    Ok(())
}

fn per_op(t: Duration, ops: usize) -> f64 {
    t.as_secs_f64() * 1e9 / ops as f64
}

/// Median, minimum and maximum.
fn spread(xs: &[f64]) -> (f64, f64, f64) {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    let median = if v.is_empty() {
        0.0
    } else if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    };
    (
        median,
        v.first().copied().unwrap_or(0.0),
        v.last().copied().unwrap_or(0.0),
    )
}

fn to_table(
    rendezvous: &[Rendezvous],
    local: &Local,
    module: &str,
    monitor: &str,
    rounds: usize,
) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# fireopal registration: btl {module}; {monitor}; {rounds} alternated rounds, medians (min-max)"
    );
    let _ = writeln!(
        out,
        "{:>8} {:>24} {:>24} {:>7} {:>24} {:>7}",
        "size", "reused buffer, us", "registered again, us", "ratio", "fresh buffer, us", "ratio"
    );
    let cell = |xs: &[f64]| {
        let (m, lo, hi) = spread(xs);
        format!("{m:.2} ({lo:.2}-{hi:.2})")
    };
    for (r, &n) in rendezvous.iter().zip(&SIZES) {
        let base = spread(&r.reused).0;
        let _ = writeln!(
            out,
            "{:>8} {:>24} {:>24} {:>6.2}x {:>24} {:>6.2}x",
            human_size(n),
            cell(&r.reused),
            cell(&r.reregistered),
            spread(&r.reregistered).0 / base,
            cell(&r.fresh),
            spread(&r.fresh).0 / base,
        );
    }
    let line = |out: &mut String, what: &str, xs: &[f64]| {
        let (m, lo, hi) = spread(xs);
        let _ = writeln!(out, "{what:<52} {m:>10.0} ns ({lo:.0}-{hi:.0})");
    };
    line(
        &mut out,
        "register + deregister, cache hit (1 MiB)",
        &local.hit,
    );
    line(
        &mut out,
        "register + deregister, cache miss (1 MiB)",
        &local.miss,
    );
    line(
        &mut out,
        "munmap 64 KiB, never registered",
        &local.munmap_bare,
    );
    line(
        &mut out,
        "munmap 64 KiB, watched, nothing cached",
        &local.munmap_watched,
    );
    line(
        &mut out,
        "munmap 64 KiB, cached registration",
        &local.munmap_cached,
    );
    line(
        &mut out,
        "applying its invalidation at the next call",
        &local.apply,
    );
    let (hit, _, _) = spread(&local.hit);
    if let Some(first) = rendezvous.first() {
        let (reused, _, _) = spread(&first.reused);
        let _ = writeln!(
            out,
            "a hit is {:.2}% of a {} rendezvous from a reused buffer",
            hit / (reused * 1e3) * 100.0,
            human_size(SIZES[0])
        );
    }
    out
}

fn to_json(rendezvous: &[Rendezvous], local: &Local, module: &str, monitor: &str) -> Json {
    let stat = |xs: &[f64]| {
        let (m, lo, hi) = spread(xs);
        Json::Obj(vec![
            ("median", Json::Float(m)),
            ("min", Json::Float(lo)),
            ("max", Json::Float(hi)),
        ])
    };
    Json::Obj(vec![
        ("bench", Json::str("registration")),
        ("module", Json::str(module)),
        ("monitor", Json::str(monitor)),
        (
            "rendezvous_us",
            Json::Arr(
                rendezvous
                    .iter()
                    .zip(&SIZES)
                    .map(|(r, &n)| {
                        Json::Obj(vec![
                            ("size", Json::Int(n as i128)),
                            ("reused", stat(&r.reused)),
                            ("registered_again", stat(&r.reregistered)),
                            ("fresh", stat(&r.fresh)),
                        ])
                    })
                    .collect(),
            ),
        ),
        (
            "local_ns",
            Json::Obj(vec![
                ("hit", stat(&local.hit)),
                ("miss", stat(&local.miss)),
                ("munmap_bare", stat(&local.munmap_bare)),
                ("munmap_watched", stat(&local.munmap_watched)),
                ("munmap_cached", stat(&local.munmap_cached)),
                ("apply", stat(&local.apply)),
            ]),
        ),
    ])
}
