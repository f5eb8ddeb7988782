//! `fireopal bench layer`: what tagged point-to-point adds to a message
//! over the raw messenger, measured in one job.
//!
//! The two ping-pongs share the job, its transports and its buffers, and
//! run in alternated blocks: round after round, one block of active
//! messages (`pingpong --from user`: `send` and a handler copying into a
//! user buffer) and one of tagged `send`/`recv` (`p2p`), the first of
//! the two swapping every round. Each round gives one difference of the
//! two half round trips; the report is the median of those differences
//! and their spread. A host that slows down for a while slows both
//! blocks of a round alike, which alternated whole runs cannot promise.

use std::cell::Cell;
use std::rc::Rc;

use super::super::json::Json;
use super::super::{CommonArgs, Failure};
use super::{
    human_size, latency_iterations, open_front_door, pattern, pingpong, FrontDoor, Path, Source,
    TAG_PING,
};

/// Message sizes measured unless `--sizes` says otherwise.
const DEFAULT_SIZES: [usize; 1] = [8];

/// One size's result: medians over the rounds, in microseconds per half
/// round trip.
struct LayerRow {
    size: usize,
    active_us: f64,
    p2p_us: f64,
    /// The median of the rounds' differences, and their least and most.
    added_us: f64,
    added_min_us: f64,
    added_max_us: f64,
}

pub(super) fn run(
    common: &CommonArgs,
    json: bool,
    quick: bool,
    rounds: usize,
    only: Option<&[usize]>,
) -> Result<(), Failure> {
    let FrontDoor {
        mut rt,
        world,
        rank,
        size,
        peer,
        module,
    } = open_front_door(common, "layer")?;
    let sizes = only.unwrap_or(&DEFAULT_SIZES);
    let largest = sizes.iter().copied().max().unwrap_or(0);
    // Checked below, after the last round.
    let data = pattern(largest);
    let mut landing = vec![0u8; largest];

    let pings = Rc::new(Cell::new(0u64));
    let am_landing = Rc::new(std::cell::RefCell::new(vec![0u8; largest]));
    {
        let pings = Rc::clone(&pings);
        let am_landing = Rc::clone(&am_landing);
        rt.messenger()
            .register(TAG_PING, move |msg| {
                let mut landing = am_landing.borrow_mut();
                if let Some(dst) = landing.get_mut(..msg.payload.len()) {
                    fireopal_core::copy::copy_bytes(dst, msg.payload);
                }
                pings.set(pings.get() + 1);
            })
            .map_err(|e| e.to_string())?;
    }
    let eager = rt
        .messenger()
        .attributes(peer)
        .map_or(u64::MAX, |a| a.eager_limit);
    let source = Source {
        bytes: &data,
        path: Path::InPlace,
        eager,
        label: String::new(),
    };
    // A message for a tag the peer has not registered yet would be
    // dropped: both sides register before the first one leaves.
    rt.bootstrap().barrier().map_err(|e| e.to_string())?;

    let mut pings = super::Arrivals::new(pings);
    let mut rows = Vec::new();
    for &n in sizes {
        let (iters, warmup) = latency_iterations(n, quick);
        let half = |t: std::time::Duration| t.as_secs_f64() * 1e6 / (2.0 * iters as f64);
        let mut active = Vec::with_capacity(rounds);
        let mut tagged = Vec::with_capacity(rounds);
        for round in 0..rounds {
            for first_active in [round % 2 == 0, round % 2 == 1] {
                let p = rt.p2p();
                if first_active {
                    let t = pingpong(p, rank, size, peer, &source, n, iters, warmup, &mut pings)?;
                    active.push(half(t));
                } else {
                    let t = super::p2p::pingpong(
                        p,
                        &world,
                        peer,
                        &data[..n],
                        &mut landing[..n],
                        iters,
                        warmup,
                    )?;
                    tagged.push(half(t));
                }
            }
        }
        if landing[..n] != data[..n] || am_landing.borrow()[..n] != data[..n] {
            return Err(format!("{n}-byte messages arrived with other bytes").into());
        }
        let mut added: Vec<f64> = tagged.iter().zip(&active).map(|(t, a)| t - a).collect();
        rows.push(LayerRow {
            size: n,
            active_us: median(&mut active),
            p2p_us: median(&mut tagged),
            added_us: median(&mut added),
            added_min_us: added.first().copied().unwrap_or(0.0),
            added_max_us: added.last().copied().unwrap_or(0.0),
        });
    }
    if rank == 0 {
        if json {
            println!("{}", to_json(&rows, &module, size, rounds).render());
        } else {
            print!("{}", to_table(&rows, &module, size, rounds));
        }
    }
    rt.finalize().map_err(|e| e.to_string())?;
    Ok(())
}

/// Sorts `v` and returns its median (0 when empty).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn to_table(rows: &[LayerRow], module: &str, size: u32, rounds: usize) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# fireopal layer: what tagged send/recv adds to an active message, {} over btl {module}, \
         {rounds} alternated rounds; half round trips, medians",
        if size == 1 {
            "one process to itself"
        } else {
            "rank 0 <-> rank 1"
        }
    );
    let _ = writeln!(
        out,
        "{:>10} {:>16} {:>12} {:>12} {:>12} {:>12}",
        "size", "active msg (us)", "p2p (us)", "added (us)", "least (us)", "most (us)"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:>10} {:>16.3} {:>12.3} {:>12.3} {:>12.3} {:>12.3}",
            human_size(r.size),
            r.active_us,
            r.p2p_us,
            r.added_us,
            r.added_min_us,
            r.added_max_us
        );
    }
    out
}

fn to_json(rows: &[LayerRow], module: &str, size: u32, rounds: usize) -> Json {
    Json::Obj(vec![
        ("benchmark", Json::str("layer")),
        ("btl", Json::str(module)),
        ("ranks", Json::Int(i128::from(size))),
        ("rounds", Json::Int(rounds as i128)),
        (
            "results",
            Json::Arr(
                rows.iter()
                    .map(|r| {
                        Json::Obj(vec![
                            ("size", Json::Int(r.size as i128)),
                            ("active_us", Json::Float(r.active_us)),
                            ("p2p_us", Json::Float(r.p2p_us)),
                            ("added_us", Json::Float(r.added_us)),
                            ("added_min_us", Json::Float(r.added_min_us)),
                            ("added_max_us", Json::Float(r.added_max_us)),
                        ])
                    })
                    .collect(),
            ),
        ),
    ])
}
