//! `fireopal run`: parses the command line and reports; the launcher itself
//! is [`crate::bootstrap::launch`].

use std::ffi::OsString;
use std::fmt;
use std::process::ExitCode;

use crate::bootstrap::launch::{self, JobEvent, JobSpec};

const USAGE: &str =
    "usage: fireopal run -n N [--param name=value]... [--tag-output] [--bind-to core|none] [--] program [args]

  -n N                  number of ranks (1 to 4096)
  --param name=value    set a parameter in every rank (as FIREOPAL_<NAME>)
  --tag-output          prefix each output line with [rank]
                        (lines are forwarded whole, tagged or not)
  --bind-to core|none   pin rank r to the r-th allowed CPU (default none)
";

/// What is wrong with the command line.
#[derive(Debug, PartialEq, Eq)]
enum UsageError {
    MissingValue(&'static str),
    BadCount(String),
    MissingCount,
    BadParam { arg: String, why: &'static str },
    UnknownOption(String),
    MissingProgram,
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UsageError::MissingValue(opt) => write!(f, "{opt} needs a value"),
            UsageError::BadCount(v) => write!(
                f,
                "-n {v:?}: expected a number of ranks from 1 to {}",
                launch::MAX_RANKS
            ),
            UsageError::MissingCount => f.write_str("missing -n N (the number of ranks)"),
            UsageError::BadParam { arg, why } => {
                write!(f, "malformed --param {arg:?}: {why}")
            }
            UsageError::UnknownOption(o) => write!(f, "unknown option {o:?}"),
            UsageError::MissingProgram => f.write_str("missing the program to run"),
        }
    }
}

/// Parses `name=value` into the environment variable `FIREOPAL_<NAME>`.
fn param_env(arg: &str) -> Result<(String, String), UsageError> {
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
    Ok((
        format!("FIREOPAL_{}", name.to_ascii_uppercase()),
        value.to_owned(),
    ))
}

fn parse(args: &[String]) -> Result<JobSpec, UsageError> {
    let mut size = None;
    let mut env = Vec::new();
    let mut tag_output = false;
    let mut bind_to_core = false;
    let mut rest = args.iter();
    let mut command: Vec<OsString> = Vec::new();
    while let Some(arg) = rest.next() {
        let arg = arg.as_str();
        let mut value_of = |opt: &'static str, inline: Option<&str>| match inline {
            Some(v) => Ok(v.to_owned()),
            None => rest.next().cloned().ok_or(UsageError::MissingValue(opt)),
        };
        match arg {
            "--" => {
                command.extend(rest.by_ref().map(OsString::from));
                break;
            }
            "-n" | "-np" | "--np" => size = Some(parse_count(&value_of("-n", None)?)?),
            "--param" => env.push(param_env(&value_of("--param", None)?)?),
            "--tag-output" => tag_output = true,
            "--bind-to" => match value_of("--bind-to", None)?.as_str() {
                "core" => bind_to_core = true,
                "none" => bind_to_core = false,
                other => return Err(UsageError::UnknownOption(format!("--bind-to {other}"))),
            },
            _ if arg.starts_with("-n=") => {
                size = Some(parse_count(&value_of("-n", arg.strip_prefix("-n="))?)?);
            }
            _ if arg.starts_with("--param=") => {
                env.push(param_env(&value_of(
                    "--param",
                    arg.strip_prefix("--param="),
                )?)?);
            }
            _ if arg.starts_with('-') => return Err(UsageError::UnknownOption(arg.to_owned())),
            _ => {
                command.push(arg.into());
                command.extend(rest.by_ref().map(OsString::from));
                break;
            }
        }
    }
    let size = size.ok_or(UsageError::MissingCount)?;
    let mut command = command.into_iter();
    let program = command.next().ok_or(UsageError::MissingProgram)?;
    let mut spec = JobSpec::new(size, program);
    spec.args = command.collect();
    spec.env = env
        .into_iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect();
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
    let name = crate::bootstrap::launch::signal_name(signal);
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
    if args
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "-h" || a == "--help")
    {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let spec = match parse(args) {
        Ok(spec) => spec,
        Err(e) => {
            eprint!("fireopal run: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
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
            "--",
            "prog",
            "-n",
            "x",
        ]))
        .unwrap();
        assert_eq!(spec.size, 4);
        assert_eq!(spec.program, "prog");
        assert_eq!(spec.args, vec![OsString::from("-n"), OsString::from("x")]);
        assert!(spec.tag_output);
        assert_eq!(
            spec.env,
            vec![
                ("FIREOPAL_BTL_TCP_EAGER_LIMIT".into(), "65536".into()),
                ("FIREOPAL_BTL".into(), "^tcp".into()),
            ]
        );
        let spec = parse(&args(&["-n=2", "prog", "--tag-output"])).unwrap();
        assert_eq!(spec.size, 2);
        assert!(!spec.tag_output);
        assert_eq!(spec.args, vec![OsString::from("--tag-output")]);
    }

    #[test]
    fn rejects_bad_command_lines() {
        let err = |list: &[&str]| parse(&args(list)).unwrap_err();
        assert_eq!(err(&["prog"]), UsageError::MissingCount);
        assert_eq!(err(&["-n", "0", "prog"]), UsageError::BadCount("0".into()));
        assert_eq!(
            err(&["-n", "four", "prog"]),
            UsageError::BadCount("four".into())
        );
        assert_eq!(err(&["-n"]), UsageError::MissingValue("-n"));
        assert_eq!(err(&["-n", "2"]), UsageError::MissingProgram);
        assert_eq!(err(&["-n", "2", "--"]), UsageError::MissingProgram);
        assert_eq!(
            err(&["-n", "2", "--verbose", "p"]),
            UsageError::UnknownOption("--verbose".into())
        );
        assert!(matches!(
            err(&["-n", "2", "--param", "novalue", "p"]),
            UsageError::BadParam { .. }
        ));
        assert!(matches!(
            err(&["-n", "2", "--param", "=1", "p"]),
            UsageError::BadParam { .. }
        ));
        assert!(matches!(
            err(&["-n", "2", "--param", "Btl-X=1", "p"]),
            UsageError::BadParam { .. }
        ));
        assert_eq!(
            err(&["-n", "2", "--param"]),
            UsageError::MissingValue("--param")
        );
    }
}
