//! The `fireopal` command: one module per subcommand, and the conventions
//! they share in [`args`]. It is a client of the `fireopal` library like any
//! runtime, and nothing here is part of the library's API.
#![deny(unsafe_code)]

mod args;
mod bench;
mod conformance;
mod info;
mod json;
mod run;

use std::process::ExitCode;

use fireopal::plugin::{DiscoveryError, Options, Registry};

use self::args::{Arg, Args, Stop};

/// The top-level help: every subcommand's synopsis, with what it does.
fn usage() -> String {
    let mut out = String::from(
        "usage: fireopal <command> [options]\n\
         each command prints its own help with --help\n\ncommands:\n",
    );
    for (synopsis, what) in [
        (run::SYNOPSIS, "start a job of N local processes"),
        (
            info::SYNOPSIS,
            "components, their status, and every parameter",
        ),
        (
            bench::SYNOPSIS,
            "latency and bandwidth of active messages (pingpong) and of\n\
             one-sided operations (put, get), under `fireopal run -n 2`",
        ),
        (
            conformance::SYNOPSIS,
            "check a transport or heap allocator against its contract,\n\
             under `fireopal run -n N`",
        ),
        (
            "fireopal version",
            "this host's version and plugin interface",
        ),
        ("fireopal help", "this text"),
    ] {
        for line in synopsis.lines() {
            out.push_str(&format!("  {line}\n"));
        }
        for line in what.lines() {
            out.push_str(&format!("        {line}\n"));
        }
    }
    out
}

fn main() -> ExitCode {
    dispatch(std::env::args().skip(1).collect())
}

/// Runs the subcommand `args` names; `args` excludes the program name.
fn dispatch(args: Vec<String>) -> ExitCode {
    let Some((cmd, rest)) = args.split_first() else {
        return Stop::Usage("no command given".into()).exit("fireopal", &usage());
    };
    match cmd.as_str() {
        "bench" => bench::main(rest),
        "conformance" => conformance::main(rest),
        "info" => info::main(rest),
        "run" => run::main(rest),
        "help" | "--help" | "-h" => Stop::Help.exit("fireopal", &usage()),
        "version" | "--version" | "-V" => {
            // Plugins are loaded only when built against an interface
            // this host accepts; a vendor reads which one here.
            println!(
                "fireopal {}, plugin interface {}",
                env!("CARGO_PKG_VERSION"),
                fireopal_abi::INTERFACE_VERSION
            );
            ExitCode::SUCCESS
        }
        other => Stop::Usage(format!(
            "unknown command {other:?}: expected {}",
            args::one_of(["run", "info", "bench", "conformance", "version", "help"])
        ))
        .exit("fireopal", &usage()),
    }
}

/// What every subcommand that loads components takes: `--param
/// name=value`, repeated.
#[derive(Debug, Default)]
pub(crate) struct CommonArgs {
    pub(crate) params: Vec<(String, String)>,
}

impl CommonArgs {
    /// Takes `arg` if it is `--param`; `Ok(false)` leaves it to the caller.
    pub(crate) fn take(&mut self, arg: Arg<'_>, args: &mut Args<'_>) -> Result<bool, Stop> {
        if arg != Arg::Opt("--param") {
            return Ok(false);
        }
        self.params.push(args.param()?);
        Ok(true)
    }

    /// Discovery options for these arguments.
    pub(crate) fn discovery_options(&self) -> Options {
        Options {
            command_line: self.params.clone(),
            ..Options::default()
        }
    }
}

/// Why a subcommand that already parsed its arguments failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The settings are wrong (a parameter's value, a component that is
    /// not there): exit 2, as a usage error.
    Usage(String),
    /// Anything else: exit 1.
    Run(String),
}

impl From<String> for Failure {
    fn from(why: String) -> Self {
        Self::Run(why)
    }
}

impl From<&str> for Failure {
    fn from(why: &str) -> Self {
        Self::Run(why.to_owned())
    }
}

impl Failure {
    /// Prints the reason under `cmd` and gives the exit status.
    pub(crate) fn exit(self, cmd: &str) -> ExitCode {
        match self {
            Self::Usage(why) => {
                eprintln!("{cmd}: {why}");
                ExitCode::from(2)
            }
            Self::Run(why) => {
                eprintln!("{cmd}: {why}");
                ExitCode::from(1)
            }
        }
    }
}

/// [`Registry::open`], with errors that name what was found when a
/// requested component is missing or not usable.
pub(crate) fn open_registry(options: &Options) -> Result<Registry, Failure> {
    let registry = Registry::discover(options);
    match registry.errors().first() {
        None => Ok(registry),
        Some(e) => Err(discovery_failure(&registry, e)),
    }
}

/// How discovery error `e` ends the command: as a usage error or not
/// (see [`is_usage_error`]), saying what [`discovery_error`] says.
pub(crate) fn discovery_failure(registry: &Registry, e: &DiscoveryError) -> Failure {
    let text = discovery_error(registry, e);
    if is_usage_error(e) {
        Failure::Usage(text)
    } else {
        Failure::Run(text)
    }
}

/// Whether `e` is a setting given wrong (exit 2), rather than a component
/// that exists but cannot serve this job (exit 1).
pub(crate) fn is_usage_error(e: &DiscoveryError) -> bool {
    !matches!(e, DiscoveryError::RequiredUnusable { .. })
}

/// `e`, and for a requested component, the names of every component of
/// its framework that discovery found.
pub(crate) fn discovery_error(registry: &Registry, e: &DiscoveryError) -> String {
    let framework = match e {
        DiscoveryError::RequiredMissing { framework, .. }
        | DiscoveryError::RequiredUnusable { framework, .. } => *framework,
        DiscoveryError::Param(_) | DiscoveryError::Filter(_) => return e.to_string(),
    };
    let mut found: Vec<&str> = registry
        .components()
        .iter()
        .filter(|c| c.framework() == framework)
        .map(|c| c.name())
        .collect();
    // A shadowed file repeats a name found earlier on the path.
    found.sort_unstable();
    found.dedup();
    format!(
        "{e}\n{framework} components found: {} (`fireopal info` shows their status)",
        found.join(", ")
    )
}
