//! `fireopal run`: parses the command line and reports; the launcher itself
//! is [`fireopal::bootstrap::launch`].

use std::ffi::OsString;
use std::fmt;
use std::process::ExitCode;

use fireopal::bootstrap::launch::{self, JobEvent, JobSpec};
use fireopal::param::{env_var_name, COMMAND_LINE_VAR};

use super::args::{self, Arg, Args, Stop};

pub(super) const SYNOPSIS: &str = "\
fireopal run -n N [--param name=value]... [--tag-output] [--bind-to core|none]
        [--] program [args]";

const USAGE: &str = "\
usage: fireopal run -n N [--param name=value]... [--tag-output] [--bind-to core|none]
               [--] program [args]

Starts N local processes of program and serves their key-value exchange.

  -n N                  number of ranks (1 to 4096; also -np N)
  --param name=value    set a parameter in every rank (as FIREOPAL_<NAME>;
                        the ranks report it as set on the command line)
  --tag-output          prefix each output line with [rank]
                        (lines are forwarded whole, tagged or not)
  --bind-to core|none   pin rank r to the r-th allowed CPU (default none)
";

/// What is wrong with the command line, past what [`Args`] finds.
#[derive(Debug, PartialEq, Eq)]
enum UsageError {
    BadCount(String),
    MissingCount,
    BadParam { arg: String, why: &'static str },
    MissingProgram,
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UsageError::BadCount(v) => write!(
                f,
                "-n {v:?}: expected a number of ranks from 1 to {}",
                launch::MAX_RANKS
            ),
            UsageError::MissingCount => f.write_str("missing -n N (the number of ranks)"),
            UsageError::BadParam { arg, why } => {
                write!(f, "malformed --param {arg:?}: {why}")
            }
            UsageError::MissingProgram => f.write_str("missing the program to run"),
        }
    }
}

impl From<UsageError> for Stop {
    fn from(e: UsageError) -> Self {
        Stop::Usage(e.to_string())
    }
}

/// Checks `name=value` of a `--param`.
fn param(arg: &str) -> Result<(String, String), UsageError> {
    let bad = |why| UsageError::BadParam {
        arg: arg.to_owned(),
        why,
    };
    let (name, value) = arg
        .split_once('=')
        .ok_or_else(|| bad("expected name=value"))?;
    if name.is_empty() {
        return Err(bad("empty parameter name"));
    }
    let snake = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !snake {
        return Err(bad(
            "parameter names are snake_case ([a-z][a-z0-9_]*), e.g. btl_tcp_eager_limit",
        ));
    }
    Ok((name.to_owned(), value.to_owned()))
}

fn parse(args: &[String]) -> Result<JobSpec, Stop> {
    let mut size = None;
    let mut params: Vec<(String, String)> = Vec::new();
    let mut tag_output = false;
    let mut bind_to_core = false;
    let mut it = Args::new(args);
    let mut command: Vec<OsString> = Vec::new();
    while let Some(arg) = it.next()? {
        match arg {
            Arg::Opt("--") => {
                command.extend(it.rest().map(OsString::from));
                break;
            }
            Arg::Opt("-n" | "-np" | "--np") => size = Some(parse_count(it.value()?)?),
            Arg::Opt("--param") => params.push(param(it.value()?)?),
            Arg::Opt("--tag-output") => tag_output = true,
            Arg::Opt("--bind-to") => {
                bind_to_core = it.choice(&[("core", true), ("none", false)])?
            }
            Arg::Opt(_) => return Err(args::unknown(arg)),
            // The program's own options follow it.
            Arg::Word(program) => {
                command.push(program.into());
                command.extend(it.rest().map(OsString::from));
                break;
            }
        }
    }
    let size = size.ok_or(UsageError::MissingCount)?;
    let mut command = command.into_iter();
    let program = command.next().ok_or(UsageError::MissingProgram)?;
    let mut spec = JobSpec::new(size, program);
    spec.args = command.collect();
    let names: Vec<&str> = params.iter().map(|(name, _)| name.as_str()).collect();
    if !names.is_empty() {
        spec.env
            .push((COMMAND_LINE_VAR.into(), names.join(",").into()));
    }
    spec.env.extend(
        params
            .iter()
            .map(|(name, value)| (env_var_name(name).into(), value.into())),
    );
    spec.tag_output = tag_output;
    spec.bind_to_core = bind_to_core;
    Ok(spec)
}

fn parse_count(text: &str) -> Result<u32, UsageError> {
    text.parse::<u32>()
        .ok()
        .filter(|n| (1..=launch::MAX_RANKS).contains(n))
        .ok_or_else(|| UsageError::BadCount(text.to_owned()))
}

fn signal_text(signal: i32) -> String {
    let name = fireopal::bootstrap::launch::signal_name(signal);
    name.map_or_else(|| format!("signal {signal}"), str::to_owned)
}

fn report(event: &JobEvent<'_>) {
    match event {
        JobEvent::Failed(failure) => {
            eprintln!("fireopal run: {failure}; stopping the other ranks");
        }
        JobEvent::Interrupted(signal) => {
            eprintln!(
                "fireopal run: caught {}; stopping the job",
                signal_text(*signal)
            );
        }
        JobEvent::BarrierBroken { left, waiting } => eprintln!(
            "fireopal run: rank {left} left the job while {waiting} rank(s) waited in a fence"
        ),
        JobEvent::Killing(ranks) => {
            let list: Vec<String> = ranks.iter().map(u32::to_string).collect();
            eprintln!(
                "fireopal run: rank(s) {} still running after SIGTERM; sending SIGKILL",
                list.join(", ")
            );
        }
    }
}

pub(crate) fn main(args: &[String]) -> ExitCode {
    let spec = match parse(args) {
        Ok(spec) => spec,
        Err(stop) => return stop.exit("fireopal run", USAGE),
    };
    let report_of = launch::run_job(&spec, &mut report);
    match report_of {
        Err(e) => {
            eprintln!("fireopal run: {e}");
            ExitCode::from(1)
        }
        Ok(job) => {
            if let Some(signal) = job.interrupted {
                eprintln!("fireopal run: job interrupted by {}", signal_text(signal));
            } else if let Some(failure) = &job.failure {
                eprintln!("fireopal run: job failed: {failure}");
            }
            ExitCode::from(job.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn parses_a_full_command_line() {
        let spec = parse(&args(&[
            "-n",
            "4",
            "--param",
            "btl_tcp_eager_limit=65536",
            "--param=btl=^tcp",
            "--tag-output",
            "--bind-to=core",
            "--",
            "prog",
            "-n",
            "x",
        ]))
        .unwrap();
        assert_eq!(spec.size, 4);
        assert_eq!(spec.program, "prog");
        assert_eq!(spec.args, vec![OsString::from("-n"), OsString::from("x")]);
        assert!(spec.tag_output && spec.bind_to_core);
        assert_eq!(
            spec.env,
            vec![
                (COMMAND_LINE_VAR.into(), "btl_tcp_eager_limit,btl".into()),
                ("FIREOPAL_BTL_TCP_EAGER_LIMIT".into(), "65536".into()),
                ("FIREOPAL_BTL".into(), "^tcp".into()),
            ]
        );
        let spec = parse(&args(&["-n=2", "prog", "--tag-output", "-h"])).unwrap();
        assert_eq!(spec.size, 2);
        assert!(!spec.tag_output);
        assert_eq!(spec.args, [OsString::from("--tag-output"), "-h".into()]);
        assert!(spec.env.is_empty());
    }

    #[test]
    fn rejects_bad_command_lines() {
        let err = |list: &[&str]| match parse(&args(list)) {
            Err(Stop::Usage(why)) => why,
            other => panic!("{list:?}: {other:?}"),
        };
        let is = |e: UsageError| e.to_string();
        assert_eq!(err(&["prog"]), is(UsageError::MissingCount));
        assert_eq!(
            err(&["-n", "0", "prog"]),
            is(UsageError::BadCount("0".into()))
        );
        assert_eq!(
            err(&["-n", "four", "prog"]),
            is(UsageError::BadCount("four".into()))
        );
        assert_eq!(err(&["-n"]), "-n needs a value");
        assert_eq!(err(&["-n", "2"]), is(UsageError::MissingProgram));
        assert_eq!(err(&["-n", "2", "--"]), is(UsageError::MissingProgram));
        assert_eq!(
            err(&["-n", "2", "--verbose", "p"]),
            "unknown option \"--verbose\""
        );
        assert_eq!(
            err(&["-n", "2", "--bind-to", "socket", "p"]),
            "--bind-to \"socket\": expected core or none"
        );
        for bad in ["novalue", "=1", "Btl-X=1"] {
            assert!(
                err(&["-n", "2", "--param", bad, "p"]).starts_with("malformed --param"),
                "{bad}"
            );
        }
        assert_eq!(err(&["-n", "2", "--param"]), "--param needs a value");
        assert_eq!(parse(&args(&["-n", "2", "--help"])).err(), Some(Stop::Help));
    }
}
