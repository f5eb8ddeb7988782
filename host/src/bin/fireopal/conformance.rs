//! `fireopal conformance`: checks one component against its contract, on
//! every rank of a job (`fireopal run -n N -- fireopal conformance --btl
//! NAME`). `--btl NAME` checks a transport against `fireopal_abi::btl`
//! ([`btl`]), `--memheap NAME` a symmetric-heap allocator ([`memheap`]).
//! The project's tests run it against every in-tree component, and the
//! author of an out-of-tree one runs the same checks against theirs, found
//! through `FIREOPAL_PLUGIN_PATH`, with the host they will ship against.
//!
//! Each rank prints `rank R: PASS case`, `rank R: FAIL case: why` or
//! `rank R: N/A case: why` (the component does not offer what the case
//! checks, which the contract allows) per case, then `rank R: N passed, M
//! failed, K not applicable`, and exits non-zero if a case failed. Every
//! wait has a stall limit, so a broken component fails instead of hanging.

use std::process::ExitCode;
use std::time::Instant;

mod btl;
mod memheap;

use super::args::{self, Arg, Args, Stop};
use super::CommonArgs;

pub(super) const SYNOPSIS: &str = "\
fireopal conformance --btl NAME [--case NAME[,NAME]...] [--param name=value]...
fireopal conformance --memheap NAME [--case NAME[,NAME]...] [--param name=value]...";

const USAGE: &str = "\
usage: fireopal conformance --btl NAME [--case NAME[,NAME]...] [--param name=value]...
       fireopal conformance --memheap NAME [--case NAME[,NAME]...] [--param name=value]...

Checks a transport (--btl) or a symmetric-heap allocator (--memheap)
against its contract. Run it under `fireopal run -n N` (N >= 2 for the
peer-death case, and for the heap's symmetry to be checked across
processes). Each rank prints a line per case, PASS, FAIL, or N/A where
the component does not offer what the case checks, then its summary:
N passed, M failed, K not applicable.

  --btl NAME            the transport to check
  --memheap NAME        the heap allocator to check
  --case LIST           only these cases (comma-separated), in run order
  --param name=value    set a parameter

btl cases, in the order they run: sizes, many, completions, sendi, rdma,
in-place, symmetric-heap, peer-death
memheap cases: align, random, symmetric, exhaustion, bad-free
";

const CMD: &str = "fireopal conformance";

/// What the suite checks.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Subject {
    Btl(String),
    Memheap(String),
}

/// A parsed `fireopal conformance` command line.
#[derive(Debug)]
struct Command {
    subject: Subject,
    only: Option<String>,
    common: CommonArgs,
}

fn parse(args: &[String]) -> Result<Command, Stop> {
    let mut it = Args::new(args);
    let (mut subject, mut only, mut common) = (None, None, CommonArgs::default());
    while let Some(arg) = it.next()? {
        if common.take(arg, &mut it)? {
            continue;
        }
        let named = match arg {
            Arg::Opt("--btl") => Subject::Btl(it.value()?.to_owned()),
            Arg::Opt("--memheap") => Subject::Memheap(it.value()?.to_owned()),
            Arg::Opt("--case") => {
                only = Some(it.value()?.to_owned());
                continue;
            }
            other => return Err(args::unknown(other)),
        };
        if subject.replace(named).is_some() {
            return Err(Stop::Usage("name one of --btl and --memheap, once".into()));
        }
    }
    let subject = subject.ok_or_else(|| Stop::Usage("--btl or --memheap is required".into()))?;
    Ok(Command {
        subject,
        only,
        common,
    })
}

/// Entry point of `fireopal conformance`; `args` follow the subcommand.
pub(crate) fn main(args: &[String]) -> ExitCode {
    let Command {
        subject,
        only,
        common,
    } = match parse(args) {
        Ok(c) => c,
        Err(stop) => return stop.exit(CMD, USAGE),
    };
    let result = match subject {
        Subject::Btl(name) => match select_cases(&btl::CASES, only.as_deref()) {
            Ok(cases) => btl::run(&name, common.params, &cases),
            Err(stop) => return stop.exit(CMD, USAGE),
        },
        Subject::Memheap(name) => match select_cases(&memheap::CASES, only.as_deref()) {
            Ok(cases) => memheap::run(&name, common.params, &cases),
            Err(stop) => return stop.exit(CMD, USAGE),
        },
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(failure) => failure.exit(CMD),
    }
}

/// The cases of `all` named in a `--case` list (all of them without
/// one), in run order.
fn select_cases<C: Copy>(
    all: &[(&'static str, C)],
    only: Option<&str>,
) -> Result<Vec<(&'static str, C)>, Stop> {
    let Some(list) = only else {
        return Ok(all.to_vec());
    };
    let wanted: Vec<&str> = list.split(',').map(str::trim).collect();
    if let Some(bad) = wanted
        .iter()
        .find(|w| !all.iter().any(|(name, _)| name == *w))
    {
        return Err(Stop::Usage(format!(
            "no case named {bad:?}: expected {}",
            args::one_of(all.iter().map(|(name, _)| *name))
        )));
    }
    Ok(all
        .iter()
        .filter(|(name, _)| wanted.contains(name))
        .copied()
        .collect())
}

/// How a case ended, when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Passed,
    /// The component does not offer what the case checks; the reason.
    NotApplicable(&'static str),
}

impl From<()> for Outcome {
    fn from((): ()) -> Self {
        Self::Passed
    }
}

/// One case of a suite whose cases share a context `C`.
type CaseOf<C, R> = fn(&mut C) -> Result<R, String>;

/// The counts a rank's summary line gives.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tally {
    passed: usize,
    failed: usize,
    not_applicable: usize,
    not_run: usize,
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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
fn run_cases<C, R: Into<Outcome>>(
    rank: u32,
    ctx: &mut C,
    cases: &[(&'static str, CaseOf<C, R>)],
) -> Tally {
    let mut tally = Tally::default();
    for (i, &(name, case)) in cases.iter().enumerate() {
        let started = Instant::now();
        match case(ctx).map(Into::into) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names(cases: &[(&'static str, btl::Case)]) -> Vec<&'static str> {
        cases.iter().map(|(n, _)| *n).collect()
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_subject_is_named_exactly_once() {
        for bad in [
            &[][..],
            &["--btl"],
            &["--btl", "tcp", "--memheap", "buddy"],
            &["--btl=tcp", "--btl=shm"],
            &["--memheap", "buddy", "--case", "sizes"],
            &["--btl", "tcp", "--frobnicate"],
        ] {
            assert_eq!(main(&args(bad)), ExitCode::from(2), "{bad:?}");
        }
        assert_eq!(main(&args(&["--btl", "x", "--help"])), ExitCode::SUCCESS);
    }

    #[test]
    fn every_case_runs_without_a_list() {
        let all = select_cases(&btl::CASES, None).unwrap();
        assert_eq!(names(&all), names(&btl::CASES));
    }

    #[test]
    fn a_list_keeps_the_run_order_and_refuses_unknown_names() {
        let some = select_cases(&btl::CASES, Some("sendi, sizes")).unwrap();
        assert_eq!(names(&some), ["sizes", "sendi"]);
        let Err(Stop::Usage(why)) = select_cases(&btl::CASES, Some("sizes,rmda")) else {
            panic!("rmda accepted");
        };
        assert_eq!(
            why,
            "no case named \"rmda\": expected one of sizes, many, completions, sendi, \
             rdma, in-place, symmetric-heap or peer-death"
        );
    }

    #[test]
    fn the_summary_counts_every_outcome() {
        type Case = CaseOf<Vec<&'static str>, Outcome>;
        fn pass(_: &mut Vec<&'static str>) -> Result<Outcome, String> {
            Ok(Outcome::Passed)
        }
        fn na(_: &mut Vec<&'static str>) -> Result<Outcome, String> {
            Ok(Outcome::NotApplicable("not offered"))
        }
        fn fail(_: &mut Vec<&'static str>) -> Result<Outcome, String> {
            Err("broken".into())
        }
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
