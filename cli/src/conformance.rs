//! `fireopal conformance`: checks one component against its contract, on
//! every rank of a job (`fireopal run -n N -- fireopal conformance --btl
//! NAME`), with the messenger suite of `fireopal-conformance`. `--btl
//! NAME` checks a transport through the messenger, `--memheap NAME` a
//! symmetric-heap allocator through the host's heap calls, `--p2p`
//! the point-to-point layer (tagged messages, communicators) and
//! `--shmem` the one-sided layer (put, get, atomics on the symmetric
//! heap) over whatever transports the job selects.
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

use fireopal::bootstrap::Bootstrap;
use fireopal::plugin::Options;
use fireopal::{Runtime, RuntimeError};
use fireopal_conformance::messenger::{btl, memheap, p2p, shmem, Tally};

use super::args::{self, Arg, Args, Stop};
use super::{is_usage_error, open_registry, CommonArgs, Failure};

pub(super) const SYNOPSIS: &str = "\
fireopal conformance --btl NAME [--case NAME[,NAME]...] [--param name=value]...
fireopal conformance --memheap NAME [--case NAME[,NAME]...] [--param name=value]...
fireopal conformance --p2p [--case NAME[,NAME]...] [--param name=value]...
fireopal conformance --shmem [--mixed-paths] [--case NAME[,NAME]...] [--param name=value]...";

const USAGE: &str = "\
usage: fireopal conformance --btl NAME [--case NAME[,NAME]...] [--param name=value]...
       fireopal conformance --memheap NAME [--case NAME[,NAME]...] [--param name=value]...
       fireopal conformance --p2p [--case NAME[,NAME]...] [--param name=value]...
       fireopal conformance --shmem [--mixed-paths] [--case NAME[,NAME]...] [--param name=value]...

Checks a transport (--btl) or a symmetric-heap allocator (--memheap)
against its contract, or the point-to-point (--p2p) or one-sided
(--shmem) layer over the transports the job selects (FIREOPAL_BTL,
--param btl=...). Run it under
`fireopal run -n N` (N >= 2 for the peer-death case, and for the heap's
symmetry to be checked across processes). Each rank prints a line per
case, PASS, FAIL, or N/A where the component does not offer what the
case checks, then its summary: N passed, M failed, K not applicable.

  --btl NAME            the transport to check
  --memheap NAME        the heap allocator to check
  --p2p                 the point-to-point layer
  --shmem               the one-sided layer
  --mixed-paths         with --shmem: odd ranks reach node-local PEs
                        through the transports (shmem_direct=false)
  --case LIST           only these cases (comma-separated), in run order
  --param name=value    set a parameter

btl cases, in the order they run: sizes, many, completions, sendi, rdma,
reregistration, unmapped-get, in-place, symmetric-heap, peer-death
memheap cases: align, random, symmetric, exhaustion, bad-free
p2p cases: eager-and-rendezvous, wildcards, ordering, truncation,
zero-bytes, self, many-requests, flow-control, communicators, random
(seeded by FIREOPAL_P2P_SEED), reregistration, rendezvous-by-size,
rendezvous-put, given-up-send, given-up-recv, peer-death
shmem cases: heap, heap-limits, put-get, nonblocking, quiet, fence,
atomics, atomic-ops, lock, signal, small-puts, bad-arguments, pe-death
";

const CMD: &str = "fireopal conformance";

/// What the suite checks.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Subject {
    Btl(String),
    Memheap(String),
    P2p,
    Shmem,
}

/// A parsed `fireopal conformance` command line.
#[derive(Debug)]
struct Command {
    subject: Subject,
    only: Option<String>,
    mixed: bool,
    common: CommonArgs,
}

fn parse(args: &[String]) -> Result<Command, Stop> {
    let mut it = Args::new(args);
    let (mut subject, mut only, mut common) = (None, None, CommonArgs::default());
    let mut mixed = false;
    while let Some(arg) = it.next()? {
        if common.take(arg, &mut it)? {
            continue;
        }
        let named = match arg {
            Arg::Opt("--btl") => Subject::Btl(it.value()?.to_owned()),
            Arg::Opt("--memheap") => Subject::Memheap(it.value()?.to_owned()),
            Arg::Opt("--p2p") => Subject::P2p,
            Arg::Opt("--shmem") => Subject::Shmem,
            Arg::Opt("--mixed-paths") => {
                mixed = true;
                continue;
            }
            Arg::Opt("--case") => {
                only = Some(it.value()?.to_owned());
                continue;
            }
            other => return Err(args::unknown(other)),
        };
        if subject.replace(named).is_some() {
            return Err(Stop::Usage(
                "name one of --btl, --memheap, --p2p and --shmem, once".into(),
            ));
        }
    }
    let subject = subject.ok_or_else(|| {
        Stop::Usage("one of --btl, --memheap, --p2p and --shmem is required".into())
    })?;
    if mixed && subject != Subject::Shmem {
        return Err(Stop::Usage("--mixed-paths goes with --shmem".into()));
    }
    Ok(Command {
        subject,
        only,
        mixed,
        common,
    })
}

/// Entry point of `fireopal conformance`; `args` follow the subcommand.
pub(crate) fn main(args: &[String]) -> ExitCode {
    let Command {
        subject,
        only,
        mixed,
        common,
    } = match parse(args) {
        Ok(c) => c,
        Err(stop) => return stop.exit(CMD, USAGE),
    };
    let result = match subject {
        Subject::Btl(name) => match select_cases(&btl::CASES, only.as_deref()) {
            Ok(cases) => run_btl(&name, common.params, &cases),
            Err(stop) => return stop.exit(CMD, USAGE),
        },
        Subject::Memheap(name) => match select_cases(&memheap::CASES, only.as_deref()) {
            Ok(cases) => run_memheap(&name, common.params, &cases),
            Err(stop) => return stop.exit(CMD, USAGE),
        },
        Subject::P2p => match select_cases(&p2p::CASES, only.as_deref()) {
            Ok(cases) => run_p2p(common.params, &cases),
            Err(stop) => return stop.exit(CMD, USAGE),
        },
        Subject::Shmem => match select_cases(&shmem::CASES, only.as_deref()) {
            Ok(cases) => run_shmem(common.params, mixed, &cases),
            Err(stop) => return stop.exit(CMD, USAGE),
        },
    };
    match result {
        Ok(tally) if tally.failed == 0 => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(failure) => failure.exit(CMD),
    }
}

/// Starts the bootstrap and opens the registry with `framework` set to
/// `name` and the command line's parameters.
fn open(
    framework: &str,
    name: &str,
    mut params: Vec<(String, String)>,
) -> Result<(Bootstrap, fireopal::plugin::Registry), Failure> {
    let boot = Bootstrap::init().map_err(|e| e.to_string())?;
    params.push((framework.into(), name.into()));
    let registry = open_registry(&Options {
        command_line: params,
        job: boot.job_info(),
        ..Options::default()
    })?;
    Ok((boot, registry))
}

fn run_btl(
    name: &str,
    params: Vec<(String, String)>,
    cases: &[(&'static str, btl::Case)],
) -> Result<Tally, Failure> {
    let (boot, registry) = open("btl", name, params)?;
    btl::run(name, boot, &registry, cases).map_err(|e| e.to_string().into())
}

fn run_memheap(
    name: &str,
    params: Vec<(String, String)>,
    cases: &[(&'static str, memheap::Case)],
) -> Result<Tally, Failure> {
    let (boot, registry) = open("memheap", name, params)?;
    memheap::run(name, boot, &registry, cases).map_err(|e| e.to_string().into())
}

/// Joins the job through the runtime with the command line's parameters
/// and runs the point-to-point cases.
fn run_p2p(
    params: Vec<(String, String)>,
    cases: &[(&'static str, p2p::Case)],
) -> Result<Tally, Failure> {
    let rt = Runtime::init_with(p2p::runtime_options(params)).map_err(|e| match e {
        RuntimeError::Components(e) if is_usage_error(&e) => Failure::Usage(e.to_string()),
        e => Failure::Run(e.to_string()),
    })?;
    p2p::run(rt, cases).map_err(|e| e.to_string().into())
}

/// Joins the job through the runtime and runs the one-sided cases; with
/// `mixed`, odd ranks reach node-local PEs through the transports.
fn run_shmem(
    mut params: Vec<(String, String)>,
    mixed: bool,
    cases: &[(&'static str, shmem::Case)],
) -> Result<Tally, Failure> {
    let rank = std::env::var("PMI_RANK")
        .ok()
        .and_then(|r| r.parse::<u32>().ok())
        .unwrap_or(0);
    if mixed && rank % 2 == 1 {
        params.push(("shmem_direct".into(), "false".into()));
    }
    let rt = Runtime::init_with(p2p::runtime_options(params)).map_err(|e| match e {
        RuntimeError::Components(e) if is_usage_error(&e) => Failure::Usage(e.to_string()),
        e => Failure::Run(e.to_string()),
    })?;
    shmem::run(rt, cases).map_err(|e| e.to_string().into())
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
            &["--p2p", "--btl", "tcp"],
            &["--memheap", "buddy", "--p2p"],
            &["--p2p", "--p2p"],
            &["--p2p=yes"],
            &["--p2p", "shm"],
            &["--p2p", "--case", "sizes"],
        ] {
            assert_eq!(main(&args(bad)), ExitCode::from(2), "{bad:?}");
        }
        assert_eq!(main(&args(&["--btl", "x", "--help"])), ExitCode::SUCCESS);
    }

    #[test]
    fn the_p2p_subject_takes_no_name() {
        let command = parse(&args(&["--p2p", "--case", "random", "--param", "a=b"])).unwrap();
        assert_eq!(command.subject, Subject::P2p);
        assert_eq!(command.only.as_deref(), Some("random"));
        assert_eq!(command.common.params, [("a".to_owned(), "b".to_owned())]);
        assert_eq!(main(&args(&["--p2p", "--help"])), ExitCode::SUCCESS);
        assert!(USAGE.contains("--p2p") && SYNOPSIS.contains("--p2p"));
        for (name, _) in p2p::CASES {
            assert!(USAGE.contains(name), "{name} missing from the usage");
        }
    }

    #[test]
    fn p2p_cases_are_selected_in_run_order() {
        let some = select_cases(&p2p::CASES, Some("random,wildcards")).unwrap();
        let names: Vec<&str> = some.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["wildcards", "random"]);
        assert!(select_cases(&p2p::CASES, Some("sizes")).is_err());
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
             rdma, reregistration, unmapped-get, in-place, symmetric-heap or peer-death"
        );
    }
}
