//! The one-sided cases of the messenger suite: the collective heap calls,
//! put, get, `quiet` and `fence`, signals, atomics and a lock through
//! [`Shmem`], on every PE of a job started with [`Runtime`], over
//! whatever paths the job has (mappings between node-local PEs, the
//! transports otherwise).
//!
//! Each case checks every byte and every word against what the PEs
//! wrote, and ends at a barrier. With `mixed` (odd PEs run with
//! `shmem_direct=false`), the atomics case updates one word through
//! mappings, through the target's handler and by the target itself at
//! once, and must lose no update.

use std::time::Duration;

use fireopal::shmem::ShmemError;
use fireopal::Runtime;

use super::{run_cases, CaseOf, Outcome, SetupError, Tally};

mod atomics;
mod death;
mod heap;
mod transfers;

/// Transfer sizes: a word, around a page, past the transports' eager
/// limits, and large.
const SIZES: [usize; 6] = [1, 8, 4096, 8193, 65_537, 1 << 20];
/// Atomic updates per PE on the shared word.
const UPDATES: u64 = 2000;
/// Small puts from each PE into each PE in the `small-puts` case.
const SMALL_PUTS: usize = 1000;
/// Longest a PE waits for a lock word before the case fails.
const LOCK_LIMIT: Duration = Duration::from_secs(60);
/// Longest a PE keeps operating on a PE that is leaving before the
/// `pe-death` case fails.
const DEATH_LIMIT: Duration = Duration::from_secs(60);

/// What every one-sided case works with on one PE.
pub struct Ctx {
    rt: Runtime,
    /// This PE is the one that dies in the `pe-death` case.
    leave: bool,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx").finish_non_exhaustive()
    }
}

/// One one-sided case.
pub type Case = CaseOf<Ctx>;

/// Every case, in the order it runs.
/// (`pe-death` leaves the job one PE short, so it is last.)
pub const CASES: [(&str, Case); 13] = [
    ("heap", heap::case_heap),
    ("heap-limits", heap::case_heap_limits),
    ("put-get", transfers::case_put_get),
    ("nonblocking", transfers::case_nonblocking),
    ("quiet", transfers::case_quiet),
    ("fence", transfers::case_fence),
    ("atomics", atomics::case_atomics),
    ("atomic-ops", atomics::case_atomic_ops),
    ("lock", atomics::case_lock),
    ("signal", transfers::case_signal),
    ("small-puts", transfers::case_small_puts),
    ("bad-arguments", heap::case_bad_arguments),
    ("pe-death", death::case_pe_death),
];

/// Runs `cases` on this PE, then finalizes, unless a case failed.
pub fn run(rt: Runtime, cases: &[(&'static str, Case)]) -> Result<Tally, SetupError> {
    let rank = rt.rank();
    let mut c = Ctx { rt, leave: false };
    {
        let mut sh = c.rt.shmem();
        let kinds: Vec<String> = (0..sh.n_pes())
            .map(|pe| match sh.path_kind(pe) {
                Ok(k) => format!("{k:?}"),
                Err(e) => format!("error ({e})"),
            })
            .collect();
        println!(
            "rank {rank}: paths to the PEs: {}; symmetric addresses: {}",
            kinds.join(", "),
            sh.symmetric_addresses()
        );
    }
    let tally = run_cases(rank, &mut c, cases);
    if c.leave {
        leave();
    }
    let short = c.rt.size() >= 2 && cases.iter().any(|(name, _)| *name == "pe-death");
    if tally.failed > 0 || short {
        // Peers may still wait on this PE, or the job is one PE short: no
        // collective finalize, but what this PE sent leaves before it
        // does (a send completes once its bytes are copied).
        let drained = c.rt.messenger().wait_until(|m| m.drained(), DEATH_LIMIT);
        if let Err(e) = drained {
            println!("rank {rank}: note: sends still queued at the end: {e}");
        }
        return Ok(tally);
    }
    c.rt.finalize().map_err(SetupError::Runtime)?;
    Ok(tally)
}

/// Ends this process at once, as a crash would: `_exit` runs no
/// destructor, exit handler or flush, and the kernel closes the process's
/// sockets and ends its pidfd just as for a kill, which is all its peers
/// can see. The exit status is 0 so that the launcher lets the job go on
/// and the survivors report.
fn leave() -> ! {
    use std::io::Write;
    // What this PE printed reaches the launcher before the exit.
    let _ = std::io::stdout().flush();
    // SAFETY: `_exit` has no preconditions.
    #[allow(unsafe_code)]
    unsafe {
        libc::_exit(0)
    }
}

fn err(what: &str) -> impl Fn(ShmemError) -> String + '_ {
    move |e| format!("{what}: {e}")
}
