//! The front door in one page: a token goes round a ring of ranks with
//! tagged point-to-point messages.
//!
//! Each rank joins the job with [`Runtime::init`] (it opens the transports
//! and picks, for every peer, the best module that reaches it: `self`,
//! `shm` on a node, `tcp` otherwise), then receives the token from the
//! previous rank and sends it on to the next. The token carries its hop
//! count and a payload that grows by a kilobyte a hop, which every rank
//! checks: small tokens go eagerly, larger ones by rendezvous straight
//! into the receive buffer. Rank 0 starts it and prints a line when it has
//! gone round `LAPS` times.
//!
//! ```text
//! cargo build --workspace --examples
//! fireopal run -n 4 -- target/debug/examples/token_ring [LAPS]
//! ```

use std::process::ExitCode;
use std::time::Duration;

use fireopal::p2p::{Source, Tag};
use fireopal::Runtime;

/// The tag of the token.
const TAG_TOKEN: i32 = 1;
/// How long the ring may stay silent before a rank gives up.
const STALL: Duration = Duration::from_secs(20);

/// The token after `hops` hops: the hop count, then a kilobyte of pattern
/// per hop, so every rank can check what it got.
fn token(hops: u64) -> Vec<u8> {
    let mut t = hops.to_le_bytes().to_vec();
    t.extend((0..hops * 1024).map(|i| (i % 251) as u8));
    t
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

fn run(laps: u64) -> Result<(), Box<dyn std::error::Error>> {
    let mut rt = Runtime::init()?;
    let world = rt.world();
    let (rank, size) = (world.rank(), world.size());
    let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
    let route = rt
        .messenger()
        .route(next)
        .ok_or_else(|| format!("no transport reaches rank {next}"))?;
    let p2p = rt.p2p();
    p2p.set_stall_limit(Some(STALL));

    let total = laps * u64::from(size);
    if rank == 0 {
        p2p.send(&world, next, TAG_TOKEN, &token(1))?;
    }
    // Rank r sees hops r, r + size, ...; rank 0 sees size, 2 size, ...
    for _ in 0..laps {
        // The token's length is only known when it arrives: probe first.
        let arrived = p2p.probe(&world, Source::Rank(prev), Tag::Tag(TAG_TOKEN))?;
        let mut buf = vec![0u8; arrived.count];
        let status = p2p.recv(&world, Source::Rank(prev), Tag::Tag(TAG_TOKEN), &mut buf)?;
        let hops = buf
            .get(..8)
            .and_then(|b| b.try_into().ok())
            .map_or(u64::MAX, u64::from_le_bytes);
        if hops % u64::from(size) != u64::from(rank) || hops > total {
            return Err(format!("rank {rank} got hop {hops} out of turn").into());
        }
        if status.count != buf.len() || buf != token(hops) {
            return Err(format!("hop {hops}: the token changed on the way").into());
        }
        if hops < total {
            p2p.send(&world, next, TAG_TOKEN, &token(hops + 1))?;
        }
    }
    if rank == 0 {
        println!(
            "token went round {laps} laps of {size} ranks ({total} hops); rank 0 sends over {}",
            route.component
        );
    }
    rt.finalize()?;
    Ok(())
}
