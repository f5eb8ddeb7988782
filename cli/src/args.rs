//! The conventions every subcommand shares: `-h`/`--help` prints the usage
//! on stdout and exits 0; a usage error goes to stderr, with the usage, and
//! exits 2; a value outside a fixed set names the valid ones.

use std::process::ExitCode;

use fireopal::param::parse_assignment;

/// Why parsing stopped before the subcommand could run.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// `-h` or `--help`.
    Help,
    /// A usage error, as the message to print.
    Usage(String),
}

impl Stop {
    /// Prints what `self` calls for and gives the exit status: the usage on
    /// stdout and 0 for help, else the message and the usage on stderr and 2.
    pub(crate) fn exit(self, cmd: &str, usage: &str) -> ExitCode {
        match self {
            Self::Help => {
                print!("{usage}");
                ExitCode::SUCCESS
            }
            Self::Usage(why) => {
                eprint!("{cmd}: {why}\n{usage}");
                ExitCode::from(2)
            }
        }
    }
}

/// One argument as a subcommand sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arg<'a> {
    /// Starts with `-`; `--name=value` arrives as `--name`, with the value
    /// kept for [`Args::value`].
    Opt(&'a str),
    /// Anything else (`--` too arrives as an option).
    Word(&'a str),
}

/// The arguments of one subcommand, taken one at a time.
#[derive(Debug)]
pub(crate) struct Args<'a> {
    rest: std::slice::Iter<'a, String>,
    opt: &'a str,
    inline: Option<&'a str>,
}

impl<'a> Args<'a> {
    pub(crate) fn new(args: &'a [String]) -> Self {
        Self {
            rest: args.iter(),
            opt: "",
            inline: None,
        }
    }

    /// The next argument; `Err(Stop::Help)` at `-h` or `--help`.
    pub(crate) fn next(&mut self) -> Result<Option<Arg<'a>>, Stop> {
        if let Some(v) = self.inline.take() {
            return Err(Stop::Usage(format!(
                "{} takes no value (got {v:?})",
                self.opt
            )));
        }
        let Some(a) = self.rest.next().map(String::as_str) else {
            return Ok(None);
        };
        if a == "-h" || a == "--help" {
            return Err(Stop::Help);
        }
        if !a.starts_with('-') || a == "-" {
            return Ok(Some(Arg::Word(a)));
        }
        let (opt, inline) = match a.split_once('=') {
            Some((opt, v)) if a != "--" => (opt, Some(v)),
            _ => (a, None),
        };
        self.opt = opt;
        self.inline = inline;
        Ok(Some(Arg::Opt(opt)))
    }

    /// The value of the option just taken: after its `=`, or the next
    /// argument.
    pub(crate) fn value(&mut self) -> Result<&'a str, Stop> {
        if let Some(v) = self.inline.take() {
            return Ok(v);
        }
        self.rest
            .next()
            .map(String::as_str)
            .ok_or_else(|| Stop::Usage(format!("{} needs a value", self.opt)))
    }

    /// The value of `--param`, split into name and value.
    pub(crate) fn param(&mut self) -> Result<(String, String), Stop> {
        parse_assignment(self.value()?).map_err(|e| Stop::Usage(e.to_string()))
    }

    /// The value of the option just taken, which must be one of `choices`.
    pub(crate) fn choice<T: Copy>(&mut self, choices: &[(&str, T)]) -> Result<T, Stop> {
        let v = self.value()?;
        match choices.iter().find(|(name, _)| *name == v) {
            Some(&(_, t)) => Ok(t),
            None => Err(Stop::Usage(format!(
                "{} {v:?}: expected {}",
                self.opt,
                one_of(choices.iter().map(|(name, _)| *name))
            ))),
        }
    }

    /// The arguments not taken yet (after `--`, say).
    pub(crate) fn rest(&mut self) -> impl Iterator<Item = &'a String> + '_ {
        self.rest.by_ref()
    }
}

/// The error for an argument no branch took.
pub(crate) fn unknown(arg: Arg<'_>) -> Stop {
    match arg {
        Arg::Opt(a) => Stop::Usage(format!("unknown option {a:?}")),
        Arg::Word(a) => Stop::Usage(format!("unexpected argument {a:?}")),
    }
}

/// `a`, `a or b`, `one of a, b or c`.
pub(crate) fn one_of<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.into_iter().collect();
    match names.as_slice() {
        [] => "nothing".to_owned(),
        [one] => (*one).to_owned(),
        [init @ .., last] if init.len() == 1 => format!("{} or {last}", init[0]),
        [init @ .., last] => format!("one of {} or {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn options_values_and_words() {
        let v = strings(&["--json", "--btl=tcp", "--from", "heap", "x", "--", "-n"]);
        let mut a = Args::new(&v);
        assert_eq!(a.next(), Ok(Some(Arg::Opt("--json"))));
        assert_eq!(a.next(), Ok(Some(Arg::Opt("--btl"))));
        assert_eq!(a.value(), Ok("tcp"));
        assert_eq!(a.next(), Ok(Some(Arg::Opt("--from"))));
        assert_eq!(a.choice(&[("user", 1), ("heap", 2)]), Ok(2));
        assert_eq!(a.next(), Ok(Some(Arg::Word("x"))));
        assert_eq!(a.next(), Ok(Some(Arg::Opt("--"))));
        assert_eq!(a.rest().collect::<Vec<_>>(), ["-n"]);
        assert_eq!(a.next(), Ok(None));
    }

    #[test]
    fn help_and_usage_errors() {
        let v = strings(&["--quick=yes"]);
        let mut a = Args::new(&v);
        assert_eq!(a.next(), Ok(Some(Arg::Opt("--quick"))));
        assert!(matches!(a.next(), Err(Stop::Usage(m)) if m.contains("takes no value")));
        let v = strings(&["--from", "nowhere"]);
        let mut a = Args::new(&v);
        a.next().unwrap();
        assert_eq!(
            a.choice(&[("user", 1), ("heap", 2), ("copy", 3)]),
            Err(Stop::Usage(
                "--from \"nowhere\": expected one of user, heap or copy".into()
            ))
        );
        let v = strings(&["--btl"]);
        let mut a = Args::new(&v);
        a.next().unwrap();
        assert_eq!(a.value(), Err(Stop::Usage("--btl needs a value".into())));
        let v = strings(&["-h"]);
        assert_eq!(Args::new(&v).next(), Err(Stop::Help));
        assert_eq!(one_of(["a", "b"]), "a or b");
    }
}
