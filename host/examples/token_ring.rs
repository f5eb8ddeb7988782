//! The active-message API in one page: a token goes round a ring of ranks.
//!
//! Each rank opens the transports ([`Messenger::init`] picks, for every
//! peer, the best module that reaches it: `self`, `shm` on a node, `tcp`
//! otherwise), registers a handler for one tag, and forwards the token to
//! the next rank each time it arrives. The token carries a hop count and a
//! payload that every rank checks and extends. Rank 0 starts it and prints
//! a line when it has gone round `LAPS` times.
//!
//! ```text
//! cargo build --workspace --examples
//! fireopal run -n 4 -- target/debug/examples/token_ring [LAPS]
//! ```
//!
//! Handlers run inside `progress` and cannot send, so the handler records
//! what arrived and the loop forwards it after `progress` returns.

use std::cell::RefCell;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant};

use fireopal::bootstrap::Bootstrap;
use fireopal::btl::Messenger;
use fireopal::plugin::{Options, Registry};

/// The tag of the token (tags from `FIRST_RESERVED_TAG` up are reserved).
const TAG_TOKEN: u8 = 1;
/// How long the ring may stay silent before a rank gives up.
const STALL: Duration = Duration::from_secs(20);

/// A token as it arrives: hop count (the header) and payload.
struct Token {
    hops: u64,
    payload: Vec<u8>,
}

/// The payload after `hops` hops: one byte appended per hop, so every rank
/// can check what it got.
fn payload_after(hops: u64) -> Vec<u8> {
    (0..hops).map(|h| (h % 251) as u8).collect()
}

fn main() -> ExitCode {
    let laps: u64 = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 3,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: token_ring [LAPS], LAPS a positive number");
            return ExitCode::from(2);
        }
    };
    match run(laps) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("token_ring: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(laps: u64) -> Result<(), String> {
    let mut boot = Bootstrap::init().map_err(|e| format!("bootstrap: {e}"))?;
    let (rank, size) = (boot.rank(), boot.size());
    let registry = Registry::open(&Options {
        job: boot.job_info(),
        ..Options::default()
    })
    .map_err(|e| format!("components: {e}"))?;
    let mut m = Messenger::init(&registry, &mut boot).map_err(|e| format!("transports: {e}"))?;

    let next = (rank + 1) % size;
    let route = m
        .route(next)
        .ok_or_else(|| format!("no transport reaches rank {next}"))?;

    // The handler only records the token; the loop below acts on it.
    let arrived: Rc<RefCell<Option<Token>>> = Rc::default();
    let slot = Rc::clone(&arrived);
    m.register(TAG_TOKEN, move |msg| {
        let hops = msg.header.try_into().map_or(u64::MAX, u64::from_le_bytes);
        *slot.borrow_mut() = Some(Token {
            hops,
            payload: msg.payload.to_vec(),
        });
    })
    .map_err(|e| e.to_string())?;

    let total = laps * u64::from(size);
    if rank == 0 {
        m.send(next, TAG_TOKEN, &1u64.to_le_bytes(), &payload_after(1))
            .map_err(|e| format!("first send: {e}"))?;
    }
    // Rank r sees hops r, r + size, ...; rank 0 sees size, 2 size, ...
    let mut seen = 0;
    let mut last = Instant::now();
    while seen < laps {
        m.progress().map_err(|e| format!("progress: {e}"))?;
        if let Some((peer, why)) = m.take_failures().into_iter().next() {
            return Err(format!("rank {peer} failed: {why}"));
        }
        for (_, status) in m.take_completions() {
            status.map_err(|e| format!("send: {e}"))?;
        }
        let Some(token) = arrived.borrow_mut().take() else {
            if last.elapsed() > STALL {
                return Err(format!("no token for {} s", STALL.as_secs()));
            }
            continue;
        };
        last = Instant::now();
        seen += 1;
        if token.hops % u64::from(size) != u64::from(rank) || token.hops > total {
            return Err(format!("rank {rank} got hop {} out of turn", token.hops));
        }
        if token.payload != payload_after(token.hops) {
            return Err(format!("hop {}: payload changed on the way", token.hops));
        }
        if token.hops < total {
            let hops = token.hops + 1;
            m.send(next, TAG_TOKEN, &hops.to_le_bytes(), &payload_after(hops))
                .map_err(|e| format!("send: {e}"))?;
        }
    }
    // Sends still in a module's hands finish before the transports close.
    while m.pending_sends() > 0 {
        m.progress().map_err(|e| format!("progress: {e}"))?;
        if last.elapsed() > STALL {
            return Err("sends did not complete".into());
        }
    }
    if rank == 0 {
        println!(
            "token went round {laps} laps of {size} ranks ({total} hops); rank 0 sends over {}",
            route.component
        );
    }
    boot.barrier().map_err(|e| format!("barrier: {e}"))?;
    boot.finalize().map_err(|e| format!("finalize: {e}"))
}
