//! The `fireopal` command line: one module per subcommand.

use std::process::ExitCode;

mod bench;
mod conformance;
mod info;
mod json;
mod run;

use crate::param::{parse_assignment, ParamError};
use crate::plugin::Options;

const USAGE: &str = "usage: fireopal <command> [args]

commands:
  bench pingpong [--btl NAME] [--from PATH] [--json]
                                          latency and bandwidth of active messages
  bench put|get [--btl NAME] [--json]     latency and bandwidth of one-sided operations
                                          (both under `fireopal run -n 2`)
  conformance --btl NAME | --memheap NAME [--case LIST]
                                          check a transport or heap allocator against
                                          its contract (under `fireopal run -n N`)
  info [--json] [--param name=value]...   components, their status, and every parameter
  run -n N [--param k=v]... [--tag-output] -- prog args
                                          start a job of N local processes
  version                                 this host's version and plugin interface
";

/// Entry point of the `fireopal` binary; `args` excludes the program name.
pub fn main(args: Vec<String>) -> ExitCode {
    let Some((cmd, rest)) = args.split_first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    match cmd.as_str() {
        "bench" => bench::main(rest),
        "conformance" => conformance::main(rest),
        "info" => info::main(rest),
        "run" => run::main(rest),
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
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
        other => {
            eprintln!("fireopal: unknown command {other:?}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// Arguments every subcommand accepts: `--param name=value` (also
/// `--param=name=value`).
#[derive(Debug, Default)]
pub(crate) struct CommonArgs {
    pub(crate) params: Vec<(String, String)>,
}

/// A command-line error.
#[derive(Debug)]
pub(crate) enum ArgError {
    Param(ParamError),
    MissingValue(&'static str),
    Unknown(String),
}

impl std::fmt::Display for ArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Param(e) => e.fmt(f),
            Self::MissingValue(flag) => write!(f, "{flag} needs a value"),
            Self::Unknown(a) => write!(f, "unknown argument {a:?}"),
        }
    }
}

impl CommonArgs {
    /// Parses `args`; `extra` claims subcommand-specific flags.
    pub(crate) fn parse(
        args: &[String],
        mut extra: impl FnMut(&str) -> bool,
    ) -> Result<Self, ArgError> {
        let mut out = Self::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if a == "--param" {
                let v = it.next().ok_or(ArgError::MissingValue("--param"))?;
                out.params
                    .push(parse_assignment(v).map_err(ArgError::Param)?);
            } else if let Some(v) = a.strip_prefix("--param=") {
                out.params
                    .push(parse_assignment(v).map_err(ArgError::Param)?);
            } else if !extra(a) {
                return Err(ArgError::Unknown(a.clone()));
            }
        }
        Ok(out)
    }

    /// Discovery options for these arguments.
    pub(crate) fn discovery_options(&self) -> Options {
        Options {
            command_line: self.params.clone(),
            ..Options::default()
        }
    }
}
