//! `fireopal bench shmem` (all three below, one after the other),
//! `shmem-put`, `shmem-get` and `shmem-atomic`: the one-sided layer in the pattern of the OSU OpenSHMEM benchmarks
//! (`osu_oshm_put`, `osu_oshm_get`, `osu_oshm_atomics`), as
//! `scripts/shmem/shmem_lat.c` measures OpenSHMEM implementations.
//!
//! PE 0 puts `n` bytes into PE 1's symmetric buffer and calls `quiet`
//! (put), or gets them (get), many times after a warm-up, and reports the
//! mean time of one. Bandwidth is timed apart, over windows of 64
//! `put_nbi` (or `get_nbi`) and one `quiet` each, as
//! `scripts/shmem/shmem_lat.c` and `scripts/mpi/rma.c` time theirs. The
//! atomic benchmark times a 64-bit fetch-add on PE 1's word (its
//! bandwidth column is 8 bytes over that time). PE 1 waits in a barrier
//! meanwhile, which makes progress for operations that need it.
//! At the end PE 0 moves a known pattern of the largest size and the side
//! that received it checks every byte, and PE 1 checks that its word
//! counts every fetch-add.

use std::time::Instant;

use fireopal::shmem::{PathKind, Shmem};
use fireopal::Runtime;

use super::{bandwidth_windows, Row, STALL, WINDOW};
use crate::json::Json;
use crate::{CommonArgs, Failure};

/// Sizes moved, 8 B to 4 MiB.
const SIZES: [usize; 8] = [8, 64, 512, 4096, 32_768, 262_144, 1 << 20, 4 << 20];

/// Which operation is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    /// Put, then quiet.
    Put,
    /// Blocking get.
    Get,
    /// 64-bit fetch-add.
    FetchAdd,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Self::Put => "shmem-put",
            Self::Get => "shmem-get",
            Self::FetchAdd => "shmem-atomic",
        }
    }
}

/// Iterations and warm-up for `n` bytes, as the OSHMEM program counts
/// them.
fn iterations(n: usize, quick: bool) -> (usize, usize) {
    let iters = match n {
        0..=8192 => 10_000,
        8193..=65_536 => 1_000,
        _ => 100,
    };
    let iters = if quick { (iters / 20).max(5) } else { iters };
    (iters, (iters / 10).max(1))
}

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(29).wrapping_add(seed * 13 + 5) as u8)
        .collect()
}

fn err(what: &'static str) -> impl Fn(fireopal::shmem::ShmemError) -> String {
    move |e| format!("{what}: {e}")
}

/// Runs the benchmarks of `ops` in one job, in order, at `only` sizes
/// if given (puts and gets; the atomic is always 8 bytes).
pub(super) fn run(
    ops: &[Op],
    common: &CommonArgs,
    json: bool,
    quick: bool,
    only: Option<&[usize]>,
) -> Result<(), Failure> {
    let max = *SIZES.last().unwrap_or(&0);
    let sizes = only.unwrap_or(&SIZES);
    if let Some(&n) = sizes.iter().find(|&&n| n == 0 || n > max) {
        return Err(format!("--sizes {n}: the symmetric buffer holds 1 to {max} bytes").into());
    }
    let mut rt = Runtime::init_with(fireopal::plugin::Options {
        command_line: common.params.clone(),
        ..fireopal::plugin::Options::default()
    })
    .map_err(|e| e.to_string())?;
    rt.p2p().set_stall_limit(Some(STALL));
    let (rank, size) = (rt.rank(), rt.size());
    if size > 2 {
        return Err(format!("bench shmem needs 1 or 2 PEs, this job has {size}").into());
    }
    let peer = if size == 1 { 0 } else { 1 - rank };
    let module = rt
        .messenger()
        .route(peer)
        .map(|r| format!("{}[{}]", r.component, r.index))
        .unwrap_or_default();
    for &op in ops {
        let (rows, path) = {
            let mut sh = rt.shmem();
            let path = sh.path_kind(peer).map_err(err("path"))?;
            let rows = measure(&mut sh, op, (rank, peer), (sizes, max), quick)?;
            (rows, path)
        };
        if rank == 0 {
            report(op, &rows, (peer, path), &module, size, json);
        }
    }
    rt.finalize().map_err(|e| e.to_string())?;
    Ok(())
}

/// Prints one benchmark's rows, as a table or one JSON line.
fn report(op: Op, rows: &[Row], to: (u32, PathKind), module: &str, size: u32, json: bool) {
    let (peer, path) = to;
    {
        let path = match path {
            PathKind::Own => "own heap",
            PathKind::Mapped => "mapped heap",
            PathKind::Remote => "transport",
        };
        if json {
            println!(
                "{}",
                Json::Obj(vec![
                    ("benchmark", Json::str(op.name())),
                    ("btl", Json::str(module)),
                    ("path", Json::str(path)),
                    ("ranks", Json::Int(i128::from(size))),
                    ("results", super::rows_json(rows)),
                ])
                .render()
            );
        } else {
            println!(
                "# fireopal {}: PE 0 -> PE {peer} over {path} (btl {module})",
                op.name()
            );
            let mut out = String::new();
            super::write_rows(&mut out, rows);
            print!("{out}");
        }
    }
}

/// One benchmark between `(rank, peer)` at `sizes`, with buffers of
/// `max` bytes (the largest size the checks move).
fn measure(
    sh: &mut Shmem<'_>,
    op: Op,
    (rank, peer): (u32, u32),
    (sizes, max): (&[usize], usize),
    quick: bool,
) -> Result<Vec<Row>, Failure> {
    let buf = sh.malloc(max).map_err(err("malloc"))?;
    let word = sh.calloc(1, 8).map_err(err("calloc"))?.cast::<u64>();
    let mut local = pattern(rank + 100, max);
    // Every PE's buffer holds its own pattern, which a get must read,
    // before the barrier lets PE 0 start.
    let mine = pattern(rank + 1, max);
    // SAFETY: `max` bytes of this heap, which no PE touches before the
    // barrier below.
    #[allow(unsafe_code)]
    unsafe {
        std::ptr::copy_nonoverlapping(mine.as_ptr(), buf, max)
    };
    sh.barrier_all().map_err(err("barrier"))?;
    let mut rows = Vec::new();
    let mut adds = 0u64;
    if rank == 0 {
        let sizes: &[usize] = if op == Op::FetchAdd { &[8] } else { sizes };
        for &n in sizes {
            let (iters, warmup) = iterations(n, quick);
            let mut start = Instant::now();
            for i in 0..warmup + iters {
                if i == warmup {
                    start = Instant::now();
                }
                match op {
                    Op::Put => {
                        sh.put(peer, buf, &local[..n]).map_err(err("put"))?;
                        sh.quiet().map_err(err("quiet"))?;
                    }
                    Op::Get => sh.get(peer, &mut local[..n], buf).map_err(err("get"))?,
                    Op::FetchAdd => {
                        sh.atomic_fetch_add(peer, word, 1u64)
                            .map_err(err("fetch_add"))?;
                        adds += 1;
                    }
                }
            }
            let latency_us = start.elapsed().as_secs_f64() * 1e6 / iters as f64;
            let bandwidth_mbs = match op {
                Op::FetchAdd => n as f64 / latency_us,
                Op::Put | Op::Get => {
                    let windows = bandwidth_windows(n, quick);
                    let start = Instant::now();
                    for _ in 0..windows {
                        for _ in 0..WINDOW {
                            // SAFETY: `local` outlives the window, which the
                            // quiet below completes before it is touched
                            // again. The window's gets all land in it, as
                            // the MPI and OpenSHMEM programs' do.
                            #[allow(unsafe_code)]
                            unsafe {
                                if op == Op::Put {
                                    sh.put_nbi(peer, buf, local.as_ptr(), n)
                                } else {
                                    sh.get_nbi(peer, local.as_mut_ptr(), buf, n)
                                }
                            }
                            .map_err(err("window"))?;
                        }
                        sh.quiet().map_err(err("quiet"))?;
                    }
                    (n * WINDOW * windows) as f64 / start.elapsed().as_secs_f64() / 1e6
                }
            };
            rows.push(Row {
                size: n,
                latency_us,
                bandwidth_mbs,
            });
        }
        // The check: a known pattern of the largest size.
        match op {
            Op::Put => {
                let check = pattern(7, max);
                sh.put(peer, buf, &check).map_err(err("put"))?;
            }
            Op::Get => {
                sh.get(peer, &mut local, buf).map_err(err("get"))?;
                if local != pattern(peer + 1, max) {
                    return Err(format!("get read wrong bytes from PE {peer}").into());
                }
            }
            Op::FetchAdd => {
                let total = sh.atomic_fetch(peer, word).map_err(err("fetch"))?;
                if peer != 0 && total != adds {
                    return Err(format!("PE {peer}'s word is {total} after {adds} adds").into());
                }
            }
        }
    }
    sh.barrier_all().map_err(err("barrier"))?;
    if op == Op::Put && (rank == 1 || peer == 0) {
        // SAFETY: `max` bytes of this heap, complete after the barrier.
        #[allow(unsafe_code)]
        let landed = unsafe { std::slice::from_raw_parts(buf, max) };
        if landed != pattern(7, max).as_slice() {
            return Err("the last put did not land".into());
        }
    }
    sh.free(word.cast()).map_err(err("free"))?;
    sh.free(buf).map_err(err("free"))?;
    Ok(rows)
}
