//! `fireopal bench p2p`: the OSU pattern with tagged point-to-point
//! messages between ordinary user buffers, through the runtime's front
//! door, as `scripts/mpi/pingpong.c` runs it with MPI.
//!
//! Latency is half the round trip of blocking `send`/`recv`; bandwidth
//! sends windows of 64 `isend`s, which the receiver has posted 64
//! `irecv`s for, answered by one empty message; bidirectional bandwidth
//! does the same in both directions at once and counts the bytes of both.

use std::time::{Duration, Instant};

use fireopal::p2p::{Communicator, P2p, Request, Source, Tag};

use super::super::json::Json;
use super::super::{CommonArgs, Failure};
use super::{
    bandwidth_windows, human_size, latency_iterations, open_front_door, pattern, FrontDoor, Row,
    SIZES, WINDOW,
};

const TAG_PING: i32 = 1;
const TAG_ACK: i32 = 2;

/// One row of the p2p bench: the ping-pong row and the bidirectional
/// bandwidth.
struct P2pRow {
    row: Row,
    bibw_mbs: f64,
}

pub(super) fn run(
    common: &CommonArgs,
    json: bool,
    quick: bool,
    only: Option<&[usize]>,
) -> Result<(), Failure> {
    let FrontDoor {
        mut rt,
        world,
        rank,
        size,
        peer,
        module,
    } = open_front_door(common, "p2p")?;
    let p2p = rt.p2p();
    let sizes = only.unwrap_or(&SIZES);
    let largest = sizes.iter().copied().max().unwrap_or(0);
    // Checked after each size's ping-pong.
    let data = pattern(largest);
    let mut landing = vec![0u8; largest];
    let mut window_landing = vec![0u8; largest];
    let mut rows = Vec::new();
    for &n in sizes {
        let (iters, warmup) = latency_iterations(n, quick);
        let t = pingpong(
            p2p,
            &world,
            peer,
            &data[..n],
            &mut landing[..n],
            iters,
            warmup,
        )?;
        if landing[..n] != data[..n] {
            return Err(format!("{n}-byte messages arrived with other bytes").into());
        }
        let latency_us = t.as_secs_f64() * 1e6 / (2.0 * iters as f64);
        let windows = bandwidth_windows(n, quick);
        let mut rates = [0.0f64; 2];
        for (both, rate) in [false, true].into_iter().zip(&mut rates) {
            let t = stream(
                p2p,
                &world,
                peer,
                &data[..n],
                &mut window_landing[..n],
                windows,
                both,
            )?;
            let ways = if both { 2 } else { 1 };
            *rate = (ways * n * WINDOW * windows) as f64 / t.as_secs_f64() / 1e6;
        }
        let [bandwidth_mbs, bibw_mbs] = rates;
        rows.push(P2pRow {
            row: Row {
                size: n,
                latency_us,
                bandwidth_mbs,
            },
            bibw_mbs,
        });
    }
    if rank == 0 {
        if json {
            println!("{}", to_json(&rows, &module, size).render());
        } else {
            print!("{}", to_table(&rows, &module, size));
        }
    }
    rt.finalize().map_err(|e| e.to_string())?;
    Ok(())
}

/// Blocking ping-pong of `data.len()` bytes; returns the time of the
/// `iters` timed round trips.
// Not inlined, so that a profiler can count the ping-pong on its own
// (`valgrind --tool=callgrind --toggle-collect=...::p2p::pingpong`).
#[inline(never)]
pub(super) fn pingpong(
    p2p: &mut P2p,
    world: &Communicator,
    peer: u32,
    data: &[u8],
    landing: &mut [u8],
    iters: usize,
    warmup: usize,
) -> Result<Duration, Failure> {
    let from = Source::Rank(peer);
    let mut start = Instant::now();
    let first = world.rank() == 0;
    for i in 0..warmup + iters {
        if i == warmup {
            start = Instant::now();
        }
        if first || world.size() == 1 {
            p2p.send(world, peer, TAG_PING, data)
                .map_err(|e| e.to_string())?;
            p2p.recv(world, from, Tag::Tag(TAG_PING), landing)
                .map_err(|e| e.to_string())?;
        } else {
            p2p.recv(world, from, Tag::Tag(TAG_PING), landing)
                .map_err(|e| e.to_string())?;
            p2p.send(world, peer, TAG_PING, data)
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(start.elapsed())
}

/// Windows of [`WINDOW`] messages of `data`, one way (rank 0 to rank 1)
/// or both ways at once; each window ends with an empty answer. As the
/// OSU benchmarks and `scripts/mpi/pingpong.c` do, the window's sends
/// read one buffer and its receives all land in one buffer.
// Not inlined, for the same reason as `pingpong`.
#[inline(never)]
#[allow(unsafe_code)]
fn stream(
    p2p: &mut P2p,
    world: &Communicator,
    peer: u32,
    data: &[u8],
    landing: &mut [u8],
    windows: usize,
    both: bool,
) -> Result<Duration, Failure> {
    let sends = both || world.rank() == 0 || world.size() == 1;
    let receives = both || world.rank() == 1 || world.size() == 1;
    let from = Source::Rank(peer);
    let n = data.len();
    let start = Instant::now();
    for _ in 0..windows {
        let mut reqs: Vec<Request<()>> = Vec::with_capacity(2 * WINDOW);
        if receives {
            for _ in 0..WINDOW {
                // SAFETY: `landing` outlives the window, whose requests
                // are all waited for below before it is touched again;
                // the receives write it concurrently, as MPI's do.
                let r = unsafe {
                    p2p.irecv_raw(world, from, Tag::Tag(TAG_PING), landing.as_mut_ptr(), n)
                };
                reqs.push(r);
            }
        }
        if sends {
            for _ in 0..WINDOW {
                // SAFETY: `data` is borrowed, unchanged, past the wait below.
                let r = unsafe { p2p.isend_raw(world, peer, TAG_PING, data.as_ptr(), n) };
                reqs.push(r);
            }
        }
        for r in p2p.waitall(reqs) {
            r.map_err(|e| e.to_string())?;
        }
        if receives {
            p2p.send(world, peer, TAG_ACK, &[])
                .map_err(|e| e.to_string())?;
        }
        if sends {
            p2p.recv(world, from, Tag::Tag(TAG_ACK), &mut [])
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(start.elapsed())
}

fn to_table(rows: &[P2pRow], module: &str, size: u32) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# fireopal p2p: {} over btl {module}; tagged send/recv between user buffers",
        if size == 1 {
            "one process to itself"
        } else {
            "rank 0 <-> rank 1"
        }
    );
    let _ = writeln!(
        out,
        "{:>10} {:>14} {:>16} {:>16}",
        "size", "latency (us)", "bandwidth (MB/s)", "bibw (MB/s)"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:>10} {:>14.2} {:>16.1} {:>16.1}",
            human_size(r.row.size),
            r.row.latency_us,
            r.row.bandwidth_mbs,
            r.bibw_mbs
        );
    }
    out
}

fn to_json(rows: &[P2pRow], module: &str, size: u32) -> Json {
    Json::Obj(vec![
        ("benchmark", Json::str("p2p")),
        ("btl", Json::str(module)),
        ("ranks", Json::Int(i128::from(size))),
        (
            "results",
            Json::Arr(
                rows.iter()
                    .map(|r| {
                        Json::Obj(vec![
                            ("size", Json::Int(r.row.size as i128)),
                            ("latency_us", Json::Float(r.row.latency_us)),
                            ("bandwidth_mbs", Json::Float(r.row.bandwidth_mbs)),
                            ("bibw_mbs", Json::Float(r.bibw_mbs)),
                        ])
                    })
                    .collect(),
            ),
        ),
    ])
}
