//! `fireopal bench put` and `fireopal bench get`: one-sided latency and
//! bandwidth in the pattern of the OSU one-sided benchmarks
//! (`osu_put_latency`, `osu_put_bw` and their `get` twins): rank 0 writes
//! into, or reads from, a window of rank 1's memory that rank 1 registered
//! with the transport; rank 1 only progresses, which a transport without
//! hardware RDMA needs to serve the operations.
//!
//! Latency is one operation and the wait for its completion, averaged over
//! many iterations after a warm-up (not halved: there is no round trip to
//! halve). Bandwidth issues windows of 64 operations and waits for all of
//! them. At the end rank 0 moves a known pattern of the largest size and
//! the side that received it checks every byte, so a transport that
//! completes without moving the data fails the bench.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use fireopal::btl::{MemoryHandle, Messenger, SendTicket, WaitError};
use fireopal_abi::btl::{Access, BtlFlags, MemRegion};

use super::{
    bandwidth_windows, latency_iterations, open_front_door, FrontDoor, Row, SIZES, STALL, WINDOW,
};
use crate::json::Json;
use crate::{CommonArgs, Failure};

/// Rank 0 tells rank 1 that the last operation completed.
const TAG_DONE: u8 = 3;
/// Window of memory each rank registers: the largest size moved.
const WINDOW_BYTES: usize = 4 << 20;
/// Seed of the pattern the last put carries, which the target checks.
const CHECK_SEED: u32 = 200;
/// Longest the target waits for the origin to finish the whole benchmark.
const ORIGIN_LIMIT: Duration = Duration::from_secs(900);

/// Which one-sided operation is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    /// Writes into the peer's window.
    Put,
    /// Reads from the peer's window.
    Get,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Self::Put => "put",
            Self::Get => "get",
        }
    }

    fn flag(self) -> BtlFlags {
        match self {
            Self::Put => BtlFlags::PUT,
            Self::Get => BtlFlags::GET,
        }
    }
}

/// A byte pattern that differs per rank and per position.
fn pattern(rank: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(rank * 7 + 1) as u8)
        .collect()
}

/// Where the peer's window is.
struct Target {
    addr: u64,
    key: Vec<u8>,
}

/// Runs `fireopal bench put` or `get`.
pub(super) fn run(
    op: Op,
    common: &CommonArgs,
    json: bool,
    quick: bool,
    only: Option<&[usize]>,
) -> Result<(), Failure> {
    let sizes = only.unwrap_or(&SIZES);
    if let Some(&n) = sizes.iter().find(|&&n| n > WINDOW_BYTES) {
        return Err(format!("--sizes {n}: the window holds {WINDOW_BYTES} bytes").into());
    }
    let FrontDoor {
        mut rt,
        rank,
        size,
        peer,
        module,
        ..
    } = open_front_door(common, op.name())?;
    let m = rt.messenger();
    let flags = m.attributes(peer).map(|a| a.flags).unwrap_or_default();
    if !flags.contains(op.flag()) {
        return Err(format!("btl {module} offers no {} to rank {peer}", op.name()).into());
    }
    let done = Rc::new(Cell::new(0u64));
    {
        let done = Rc::clone(&done);
        m.register(TAG_DONE, move |_| done.set(done.get() + 1))
            .map_err(|e| e.to_string())?;
    }

    // Every rank registers a window holding its own pattern and publishes
    // where it is, and registers the local buffer it moves bytes from or to.
    let mut window = pattern(rank, WINDOW_BYTES);
    let mut local = pattern(rank + 100, WINDOW_BYTES);
    // SAFETY: `window` and `local` are neither moved nor dropped before
    // their registrations are released below, after every operation on
    // them completed; while the transport may write them, this function
    // reads them only between operations.
    #[allow(unsafe_code)]
    let (window_region, local_region) = unsafe {
        (
            MemRegion::new(window.as_mut_ptr(), WINDOW_BYTES),
            MemRegion::new(local.as_mut_ptr(), WINDOW_BYTES),
        )
    };
    let window_handle = m
        .register_memory(
            peer,
            window_region,
            Access::REMOTE_READ | Access::REMOTE_WRITE,
        )
        .map_err(|e| format!("registering the window: {e}"))?;
    let local_handle = m
        .register_memory(peer, local_region, Access::LOCAL_READ | Access::LOCAL_WRITE)
        .map_err(|e| format!("registering the local buffer: {e}"))?;
    let mut published = (window_region.as_ptr() as u64).to_le_bytes().to_vec();
    published.extend_from_slice(window_handle.remote_key());
    let boot = rt.bootstrap();
    boot.put("bench_rma_window", &published)
        .map_err(|e| e.to_string())?;
    boot.fence().map_err(|e| e.to_string())?;
    let theirs = boot
        .get(peer, "bench_rma_window")
        .map_err(|e| e.to_string())?;
    let (addr, key) = theirs.split_at(8.min(theirs.len()));
    let target = Target {
        addr: u64::from_le_bytes(addr.try_into().map_err(|_| "short window record")?),
        key: key.to_vec(),
    };

    let origin = rank == 0;
    let mut rows = Vec::new();
    let m = rt.messenger();
    if origin {
        let mut ops = Ops {
            m: &mut *m,
            op,
            peer,
            local: local_region,
            local_handle: &local_handle,
            target: &target,
        };
        for &n in sizes.iter().filter(|&&n| n > 0) {
            let (iters, warmup) = latency_iterations(n, quick);
            let mut start = Instant::now();
            for i in 0..warmup + iters {
                if i == warmup {
                    start = Instant::now();
                }
                ops.issue(n)?;
                ops.complete_all()?;
            }
            let latency_us = start.elapsed().as_secs_f64() * 1e6 / iters as f64;
            let windows = bandwidth_windows(n, quick);
            let start = Instant::now();
            for _ in 0..windows {
                for _ in 0..WINDOW {
                    ops.issue(n)?;
                }
                ops.complete_all()?;
            }
            let bytes = (n * WINDOW * windows) as f64;
            rows.push(Row {
                size: n,
                latency_us,
                bandwidth_mbs: bytes / start.elapsed().as_secs_f64() / 1e6,
            });
        }
        // The check: a known pattern of the largest size, moved once more.
        if op == Op::Put {
            // Nothing is in flight: the buffer may be rewritten.
            local.copy_from_slice(&pattern(CHECK_SEED, WINDOW_BYTES));
        }
        ops.issue(WINDOW_BYTES)?;
        ops.complete_all()?;
        if op == Op::Get && local != pattern(peer, WINDOW_BYTES) {
            return Err(format!("get read wrong bytes from rank {peer}'s window").into());
        }
        if size == 2 {
            send_done(m, peer)?;
        }
    } else {
        // Serve the origin's operations until it is done.
        serve_until_done(m, &done)?;
    }
    let check_put = op == Op::Put && (size == 1 || !origin);
    if check_put && window != pattern(CHECK_SEED, WINDOW_BYTES) {
        return Err("the last put did not land: the window holds other bytes".into());
    }
    m.deregister_memory(local_handle)
        .map_err(|e| e.to_string())?;
    m.deregister_memory(window_handle)
        .map_err(|e| e.to_string())?;
    rt.bootstrap().barrier().map_err(|e| e.to_string())?;
    if origin {
        if json {
            println!("{}", to_json(op, &rows, &module, size).render());
        } else {
            print!("{}", to_table(op, &rows, &module, size));
        }
    }
    rt.finalize().map_err(|e| e.to_string())?;
    Ok(())
}

/// Progresses until the origin's DONE arrives. The target of one-sided
/// operations may see no event at all while they land (shm writes its
/// memory without its help), so no stall watch applies here: a failed
/// origin is reported by the transport, and [`ORIGIN_LIMIT`] bounds the
/// wait for one that hangs.
fn serve_until_done(m: &mut Messenger, done: &Cell<u64>) -> Result<(), String> {
    let start = Instant::now();
    let mut polls = 0u32;
    while done.get() == 0 {
        m.progress().map_err(|e| e.to_string())?;
        if let Some((peer, why)) = m.take_failures().into_iter().next() {
            return Err(format!("rank {peer} failed: {why}"));
        }
        for (_, status) in m.take_completions() {
            status.map_err(|e| e.to_string())?;
        }
        polls = polls.wrapping_add(1);
        if polls % 1024 == 0 && start.elapsed() > ORIGIN_LIMIT {
            return Err(format!(
                "the origin did not finish within {} s",
                ORIGIN_LIMIT.as_secs()
            ));
        }
    }
    Ok(())
}

fn send_done(m: &mut Messenger, peer: u32) -> Result<(), String> {
    m.send(peer, TAG_DONE, &[], &[])
        .map_err(|e| e.to_string())?;
    super::drain_sends(m)
}

/// The origin's side: issues operations and waits for their completions.
struct Ops<'a> {
    m: &'a mut Messenger,
    op: Op,
    peer: u32,
    local: MemRegion,
    local_handle: &'a MemoryHandle,
    target: &'a Target,
}

impl Ops<'_> {
    /// Starts one operation of `n` bytes at the start of both buffers.
    fn issue(&mut self, n: usize) -> Result<(), String> {
        // SAFETY: `n` is at most the buffer's length, so the prefix lies
        // inside the registered region.
        #[allow(unsafe_code)]
        let local = unsafe { MemRegion::new(self.local.as_ptr(), n.min(self.local.len())) };
        let (addr, key) = (self.target.addr, self.target.key.as_slice());
        let handle = Some(self.local_handle);
        let ticket = match self.op {
            Op::Put => self.m.put(self.peer, local, handle, addr, key),
            Op::Get => self.m.get(self.peer, local, handle, addr, key),
        }
        .map_err(|e| format!("{}: {e}", self.op.name()))?;
        match ticket {
            SendTicket::Done | SendTicket::Pending(_) => Ok(()),
        }
    }

    /// Progresses until every operation issued has completed.
    fn complete_all(&mut self) -> Result<(), String> {
        let name = self.op.name();
        let mut failed = None;
        let waited = self.m.wait_until(
            |m| {
                for (_, status) in m.take_completions() {
                    if let Err(e) = status {
                        failed.get_or_insert_with(|| format!("{name} failed: {e}"));
                    }
                }
                if let Some((peer, why)) = m.take_failures().into_iter().next() {
                    failed.get_or_insert_with(|| format!("rank {peer} failed: {why}"));
                }
                failed.is_some() || m.pending_sends() == 0
            },
            STALL,
        );
        match (failed, waited) {
            (Some(why), _) => Err(why),
            (None, Ok(())) => Ok(()),
            (None, Err(WaitError::Stalled { .. })) => Err(format!(
                "no {name} completed for {} s: is the peer alive?",
                STALL.as_secs()
            )),
            (None, Err(e)) => Err(e.to_string()),
        }
    }
}

fn to_table(op: Op, rows: &[Row], module: &str, size: u32) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# fireopal {}: {} over btl {module}; latency = one operation and its completion",
        op.name(),
        if size == 1 {
            "one process to itself"
        } else {
            "rank 0 -> rank 1's window"
        }
    );
    super::write_rows(&mut out, rows);
    out
}

fn to_json(op: Op, rows: &[Row], module: &str, size: u32) -> Json {
    Json::Obj(vec![
        ("benchmark", Json::str(op.name())),
        ("btl", Json::str(module)),
        ("ranks", Json::Int(i128::from(size))),
        ("results", super::rows_json(rows)),
    ])
}
