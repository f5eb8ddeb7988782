//! A bootstrap exchange, as a runtime does it at start-up: every rank
//! publishes an "endpoint address" and its copy of the job key, fences, and
//! reads and checks every other rank's values.
//!
//! Run it under any launcher:
//!
//! ```text
//! fireopal run -n 4 target/debug/examples/bootstrap_exchange
//! mpiexec.hydra -n 4 target/debug/examples/bootstrap_exchange
//! target/debug/examples/bootstrap_exchange          # singleton
//! ```
//!
//! Other modes (used by the launcher's tests):
//! - `fence`: init, one fence, finalize (for start-up timing);
//! - `exit RANK CODE`: rank RANK exits with CODE after init, the others
//!   wait in a fence;
//! - `kill RANK`: rank RANK kills itself with SIGKILL after init, the
//!   others wait in a fence;
//! - `hang [ignore-term]`: every rank prints its pid and sleeps (optionally
//!   ignoring SIGTERM), to test stopping a job from outside.

use std::process::ExitCode;
use std::time::Duration;

use fireopal::bootstrap::Bootstrap;

/// The "address" rank `rank` publishes: long enough for some ranks to need
/// several keys under Hydra's 1024-byte value limit.
fn address_of(rank: u32) -> Vec<u8> {
    let len = 200 + (rank as usize * 733) % 2500;
    let mut x = 0x9e37_79b9u32 ^ rank.wrapping_mul(0x85eb_ca6b);
    (0..len)
        .map(|_| {
            // xorshift32: a per-rank byte pattern each peer can recompute.
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x.to_le_bytes()[0]
        })
        .collect()
}

fn exchange(boot: &mut Bootstrap) -> Result<(), String> {
    let me = boot.rank();
    boot.put("addr", &address_of(me))
        .map_err(|e| e.to_string())?;
    let key = boot.job_key().as_bytes().to_vec();
    boot.put("jobkey", &key).map_err(|e| e.to_string())?;
    boot.fence().map_err(|e| e.to_string())?;
    for peer in 0..boot.size() {
        let addr = boot.get(peer, "addr").map_err(|e| e.to_string())?;
        if addr != address_of(peer) {
            return Err(format!(
                "rank {peer}'s address is wrong ({} bytes)",
                addr.len()
            ));
        }
        let theirs = boot.get(peer, "jobkey").map_err(|e| e.to_string())?;
        if !boot.job_key().matches(&theirs) {
            return Err(format!("rank {peer} has a different job key"));
        }
    }
    let local = boot.local_ranks();
    if !local.contains(&me) || local.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("bad local rank list {local:?}"));
    }
    boot.barrier().map_err(|e| e.to_string())?;
    println!(
        "rank {me} of {}: checked {} peers (local rank {} of {})",
        boot.size(),
        boot.size(),
        boot.local_rank(),
        boot.local_size()
    );
    Ok(())
}

fn kill_self() {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}

fn ignore_sigterm() {
    // SAFETY: setting a signal to SIG_IGN installs no handler code.
    unsafe {
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let mut boot = Bootstrap::init().map_err(|e| e.to_string())?;
    let me = boot.rank();
    let arg = |i: usize| -> Result<u32, String> {
        args.get(i)
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| format!("argument {i} must be a number"))
    };
    match args.first().map(String::as_str) {
        None | Some("exchange") => exchange(&mut boot)?,
        Some("fence") => boot.fence().map_err(|e| e.to_string())?,
        Some("exit") => {
            if me == arg(1)? {
                let code = u8::try_from(arg(2)?).map_err(|e| e.to_string())?;
                std::process::exit(i32::from(code));
            }
            boot.fence().map_err(|e| e.to_string())?;
        }
        Some("kill") => {
            if me == arg(1)? {
                println!("rank {me} kills itself");
                kill_self();
            }
            boot.fence().map_err(|e| e.to_string())?;
        }
        Some("hang") => {
            if args.get(1).map(String::as_str) == Some("ignore-term") {
                ignore_sigterm();
            }
            println!("rank {me} pid {}", std::process::id());
            loop {
                std::thread::sleep(Duration::from_secs(60));
            }
        }
        Some(other) => return Err(format!("unknown mode {other:?}")),
    }
    boot.finalize().map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bootstrap_exchange: {e}");
            ExitCode::FAILURE
        }
    }
}
