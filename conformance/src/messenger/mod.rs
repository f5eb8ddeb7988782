//! The messenger suite: a component checked through the host library, on
//! every rank of a `fireopal run` job, with the plugin loaded from its
//! shared library as a runtime loads it.
//!
//! [`btl`] sends through the [`Messenger`](fireopal::btl::Messenger) in a
//! ring of ranks; [`memheap`] drives a symmetric heap with the same calls
//! on every rank; [`p2p`] checks the tagged point-to-point layer and its
//! communicators over whatever transports the job selected. The caller
//! (`fireopal conformance`) starts the bootstrap and opens the registry
//! with the component selected (for [`p2p`]: joins the job through
//! [`Runtime`](fireopal::Runtime)), and hands them over; each rank prints
//! `rank R: PASS case`, `rank R: FAIL case: why` or `rank R: N/A case:
//! why` per case and then its [`Tally`].

use std::fmt;
use std::time::Instant;

pub mod btl;
mod mapping;
pub mod memheap;
pub mod p2p;
pub mod shmem;

pub use crate::Outcome;

/// One case of a suite whose cases share a context `C`; a failure is the
/// line printed after `FAIL`.
pub type CaseOf<C> = fn(&mut C) -> Result<Outcome, String>;

/// The counts a rank's summary line gives.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Cases whose every check held.
    pub passed: usize,
    /// Cases that failed (at most one: the run stops there).
    pub failed: usize,
    /// Cases the component does not offer the means for.
    pub not_applicable: usize,
    /// Cases left after a failure.
    pub not_run: usize,
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} passed, {} failed, {} not applicable",
            self.passed, self.failed, self.not_applicable
        )?;
        if self.not_run > 0 {
            write!(f, ", {} not run", self.not_run)?;
        }
        Ok(())
    }
}

/// Runs `cases` on `ctx` in order, printing a line per case and the
/// summary; stops at the first failure (later cases would only trip over
/// the same fault).
pub fn run_cases<C>(rank: u32, ctx: &mut C, cases: &[(&'static str, CaseOf<C>)]) -> Tally {
    let mut tally = Tally::default();
    for (i, &(name, case)) in cases.iter().enumerate() {
        let started = Instant::now();
        match case(ctx) {
            Ok(Outcome::Passed) => {
                tally.passed += 1;
                println!(
                    "rank {rank}: PASS {name} ({:.1} ms)",
                    started.elapsed().as_secs_f64() * 1e3
                );
            }
            Ok(Outcome::NotApplicable(why)) => {
                tally.not_applicable += 1;
                println!("rank {rank}: N/A {name}: {why}");
            }
            Err(e) => {
                tally.failed += 1;
                tally.not_run = cases.len() - i - 1;
                println!("rank {rank}: FAIL {name}: {e}");
                break;
            }
        }
    }
    println!("rank {rank}: {tally}");
    tally
}

/// Why a suite could not start on this rank.
#[derive(Debug)]
#[non_exhaustive]
pub enum SetupError {
    /// The messenger did not start.
    Messenger(fireopal::btl::InitError),
    /// The symmetric heap did not start.
    Heap(fireopal::memheap::InitError),
    /// A handler could not be installed.
    Handler(fireopal::btl::SendError),
    /// The component under test does not serve what the suite checks.
    NotServed {
        /// The component asked for.
        wanted: String,
        /// What serves instead (a component, or why none does).
        served_by: String,
    },
    /// The job could not be closed in order.
    Finalize(fireopal::bootstrap::WireError),
    /// The point-to-point layer refused the suite's setup.
    P2p(fireopal::p2p::P2pError),
    /// The runtime could not be closed in order.
    Runtime(fireopal::RuntimeError),
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Messenger(e) => write!(f, "starting the messenger: {e}"),
            Self::Heap(e) => write!(f, "creating the symmetric heap: {e}"),
            Self::Handler(e) => write!(f, "installing a handler: {e}"),
            Self::NotServed { wanted, served_by } => {
                write!(f, "{wanted} is not what serves the suite: {served_by}")
            }
            Self::Finalize(e) => write!(f, "finalizing the job: {e}"),
            Self::P2p(e) => write!(f, "setting up point-to-point messaging: {e}"),
            Self::Runtime(e) => write!(f, "finalizing the runtime: {e}"),
        }
    }
}

impl std::error::Error for SetupError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Messenger(e) => Some(e),
            Self::Heap(e) => Some(e),
            Self::Handler(e) => Some(e),
            Self::Finalize(e) => Some(e),
            Self::P2p(e) => Some(e),
            Self::Runtime(e) => Some(e),
            Self::NotServed { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Case = CaseOf<Vec<&'static str>>;

    fn pass(_: &mut Vec<&'static str>) -> Result<Outcome, String> {
        Ok(Outcome::Passed)
    }

    fn na(_: &mut Vec<&'static str>) -> Result<Outcome, String> {
        Ok(Outcome::NotApplicable("not offered".into()))
    }

    fn fail(_: &mut Vec<&'static str>) -> Result<Outcome, String> {
        Err("broken".into())
    }

    #[test]
    fn the_summary_counts_every_outcome() {
        let cases: [(&str, Case); 4] = [("a", pass), ("b", na), ("c", pass), ("d", na)];
        let tally = run_cases(0, &mut Vec::new(), &cases);
        assert_eq!(tally.to_string(), "2 passed, 0 failed, 2 not applicable");
        let cases: [(&str, Case); 4] = [("a", pass), ("b", na), ("c", fail), ("d", pass)];
        let tally = run_cases(0, &mut Vec::new(), &cases);
        assert_eq!(
            tally.to_string(),
            "1 passed, 1 failed, 1 not applicable, 1 not run"
        );
    }
}
