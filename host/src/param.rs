//! Typed parameters: registration, resolution and parsing.
//!
//! Frameworks and components register each parameter once with a typed
//! default and a help line. The value comes from, in order of precedence:
//! the command line (`--param name=value`, or `fireopal run`'s, which
//! reaches the ranks through the environment and [`COMMAND_LINE_VAR`]), the
//! environment (`FIREOPAL_<NAME>`, the name uppercased) and the default. A value that
//! does not parse as the parameter's type is an error naming the parameter
//! and where the value came from; it is never silently replaced by the
//! default.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::num::{IntErrorKind, ParseIntError};

pub use fireopal_abi::param::{ParamSpec, ParamValue};

/// Prefix of the environment variables that set parameters.
pub const ENV_PREFIX: &str = "FIREOPAL_";

/// Names, comma-separated, of the parameters whose `FIREOPAL_<NAME>`
/// variables `fireopal run` set from its own `--param`s, so that the ranks
/// report them as coming from the command line. No parameter's variable
/// can have this name: parameter names start with a letter.
pub const COMMAND_LINE_VAR: &str = "FIREOPAL__COMMAND_LINE";

/// Where a parameter's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Nobody set it.
    Default,
    /// The environment, as `VAR=value`.
    Environment(String),
    /// `--param name=value`, given to this program or to the `fireopal
    /// run` that started it, as `name=value`.
    CommandLine(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Default => f.write_str("default"),
            Self::Environment(setting) => write!(f, "the environment ({setting})"),
            Self::CommandLine(setting) => write!(f, "the command line (--param {setting})"),
        }
    }
}

/// A registered parameter and its resolved value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// Full name, e.g. `btl_tcp_eager_limit`.
    pub name: String,
    /// Who registered it: `btl`, `btl tcp`, ...
    pub owner: String,
    /// Default value (its variant is the type).
    pub default: ParamValue,
    /// Resolved value.
    pub value: ParamValue,
    /// Where `value` came from.
    pub source: Source,
    /// One help line.
    pub help: String,
    /// The value given that was refused, when one was: `value` is then the
    /// default and `source` [`Source::Default`].
    pub error: Option<ParamError>,
}

/// Why a parameter could not be registered or set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamError {
    /// The name is not snake_case `[a-z][a-z0-9_]*`.
    BadName(String),
    /// The name lacks the owner's required prefix.
    MissingPrefix {
        /// The name given.
        name: String,
        /// The prefix it needs.
        prefix: String,
    },
    /// The name is already registered.
    Duplicate(String),
    /// A value does not parse as the parameter's type.
    BadValue {
        /// The parameter.
        name: String,
        /// The text given.
        value: String,
        /// Where it came from.
        source: Source,
        /// What is wrong with it.
        reason: ValueError,
    },
    /// A `--param` argument is not `name=value`.
    BadArgument(String),
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadName(n) => write!(f, "parameter name {n:?} is not snake_case"),
            Self::MissingPrefix { name, prefix } => {
                write!(f, "parameter {name:?} must start with {prefix:?}")
            }
            Self::Duplicate(n) => write!(f, "parameter {n} is registered twice"),
            Self::BadValue {
                name,
                value,
                source,
                reason,
            } => write!(
                f,
                "parameter {name}: invalid value {value:?} from {source}: {reason}"
            ),
            Self::BadArgument(a) => {
                write!(f, "--param expects name=value, got {a:?}")
            }
        }
    }
}

impl std::error::Error for ParamError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::BadValue { reason, .. } => Some(reason),
            _ => None,
        }
    }
}

/// Why a text is not a value of a parameter's type, or not one that a
/// check past the type accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueError {
    /// Not one of the boolean words.
    NotABool,
    /// Not a signed 64-bit integer.
    NotAnInt(ParseIntError),
    /// Not an unsigned 64-bit integer.
    NotAnUnsigned(ParseIntError),
    /// Not a byte count ([`parse_size`]).
    NotASize,
    /// Not a number of the heap-size syntax, which allows a fraction and
    /// an exponent ([`parse_symmetric_size`](crate::memheap::parse_symmetric_size)).
    NotANumber,
    /// A size's suffix is not `k`, `m`, `g` or `t`.
    BadSuffix(char),
    /// More significant digits than a size is read with.
    TooManyDigits,
    /// The size does not fit in 64 bits.
    TooLarge,
    /// Not one of the words the parameter takes (listed).
    NotOneOf(&'static [&'static str]),
    /// Not `auto`, `any` or a page-aligned hexadecimal address.
    NotAnAddress,
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let overflow = |e: &ParseIntError| {
            matches!(
                e.kind(),
                IntErrorKind::PosOverflow | IntErrorKind::NegOverflow
            )
        };
        match self {
            Self::NotABool => f.write_str("expected true/false, yes/no, on/off or 1/0"),
            Self::NotAnInt(e) if overflow(e) => {
                f.write_str("expected a signed integer that fits in 64 bits")
            }
            Self::NotAnInt(_) => f.write_str("expected a signed integer"),
            Self::NotAnUnsigned(e) if overflow(e) => {
                f.write_str("expected an unsigned integer that fits in 64 bits")
            }
            Self::NotAnUnsigned(_) => f.write_str("expected an unsigned integer"),
            Self::NotASize => f.write_str("expected a byte count such as 4096, 64k, 2m or 1g"),
            Self::NotANumber => f.write_str(
                "expected a non-negative number with an optional k, m, g or t suffix, such as \
                 4096, 64k, 1.5g or 2e9",
            ),
            Self::BadSuffix(c) => write!(f, "unknown size suffix {c:?} (use k, m, g or t)"),
            Self::TooManyDigits => f.write_str("too many digits"),
            Self::TooLarge => f.write_str("size does not fit in 64 bits"),
            Self::NotAnAddress => f.write_str(
                "expected auto, any or a page-aligned hexadecimal address such as 0x600000000000",
            ),
            Self::NotOneOf(words) => {
                f.write_str("expected ")?;
                for (i, w) in words.iter().enumerate() {
                    match i {
                        0 => {}
                        _ if i + 1 == words.len() => f.write_str(" or ")?,
                        _ => f.write_str(", ")?,
                    }
                    f.write_str(w)?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for ValueError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::NotAnInt(e) | Self::NotAnUnsigned(e) => Some(e),
            _ => None,
        }
    }
}

/// Environment variable that sets parameter `name`.
pub fn env_var_name(name: &str) -> String {
    format!("{ENV_PREFIX}{}", name.to_ascii_uppercase())
}

/// Splits a `--param` argument `name=value`.
pub fn parse_assignment(arg: &str) -> Result<(String, String), ParamError> {
    match arg.split_once('=') {
        Some((name, value)) if check_name(name) => Ok((name.to_owned(), value.to_owned())),
        _ => Err(ParamError::BadArgument(arg.to_owned())),
    }
}

fn check_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Parses a byte count with an optional `k`, `m`, `g` or `t` suffix
/// (either case, powers of 1024, as OpenSHMEM's `SHMEM_SYMMETRIC_SIZE`).
///
/// ```
/// assert_eq!(fireopal::param::parse_size("64k"), Ok(65536));
/// assert!(fireopal::param::parse_size("12q").is_err());
/// ```
pub fn parse_size(text: &str) -> Result<u64, ValueError> {
    let t = text.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], suffix_shift(c)?),
        _ => (t, 0),
    };
    let n: u64 = digits.parse().map_err(|e: ParseIntError| match e.kind() {
        IntErrorKind::PosOverflow => ValueError::TooLarge,
        _ => ValueError::NotASize,
    })?;
    n.checked_mul(1u64 << shift).ok_or(ValueError::TooLarge)
}

/// The power of two a size suffix (`k`, `m`, `g`, `t`, either case) stands
/// for.
pub(crate) fn suffix_shift(c: char) -> Result<u32, ValueError> {
    match c.to_ascii_lowercase() {
        'k' => Ok(10),
        'm' => Ok(20),
        'g' => Ok(30),
        't' => Ok(40),
        _ => Err(ValueError::BadSuffix(c)),
    }
}

/// Parses `text` as a value of the same type as `like`.
pub fn parse_value(like: &ParamValue, text: &str) -> Result<ParamValue, ValueError> {
    let t = text.trim();
    match like {
        ParamValue::Bool(_) => match t.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(ParamValue::Bool(true)),
            "0" | "false" | "no" | "off" => Ok(ParamValue::Bool(false)),
            _ => Err(ValueError::NotABool),
        },
        ParamValue::Int(_) => t.parse().map(ParamValue::Int).map_err(ValueError::NotAnInt),
        ParamValue::UInt(_) => t
            .parse()
            .map(ParamValue::UInt)
            .map_err(ValueError::NotAnUnsigned),
        ParamValue::Size(_) => parse_size(t).map(ParamValue::Size),
        ParamValue::Str(_) => Ok(ParamValue::Str(text.into())),
    }
}

/// All registered parameters, with the command line and environment they
/// are resolved against.
#[derive(Debug, Clone, Default)]
pub struct ParamStore {
    params: Vec<Param>,
    index: HashMap<String, usize>,
    command_line: HashMap<String, String>,
    environment: HashMap<String, String>,
    /// Parameters `fireopal run` passed through the environment.
    from_run: HashSet<String>,
}

impl ParamStore {
    /// A store resolving against `command_line` assignments and this
    /// process's environment.
    pub fn new(command_line: Vec<(String, String)>) -> Self {
        Self::with_environment(
            command_line,
            std::env::vars().filter(|(k, _)| k.starts_with(ENV_PREFIX)),
        )
    }

    /// A store resolving against the given environment instead of the
    /// process's (for tests and embedding runtimes).
    pub fn with_environment(
        command_line: Vec<(String, String)>,
        environment: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        let mut environment: HashMap<String, String> = environment.into_iter().collect();
        let from_run = environment
            .remove(COMMAND_LINE_VAR)
            .map(|names| {
                names
                    .split(',')
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        Self {
            params: Vec::new(),
            index: HashMap::new(),
            // A later assignment of the same name wins, as on most CLIs.
            command_line: command_line.into_iter().collect(),
            environment,
            from_run,
        }
    }

    /// Registers a parameter for `owner`, whose names must start with
    /// `prefix` (empty for framework-level parameters), and resolves it.
    ///
    /// On a bad value the parameter is still registered with its default
    /// (so `fireopal info` can show it) and the error is returned.
    pub fn register(
        &mut self,
        owner: &str,
        prefix: &str,
        spec: ParamSpec,
    ) -> Result<(), ParamError> {
        let name = spec.name.as_str();
        if !check_name(name) {
            return Err(ParamError::BadName(name.to_owned()));
        }
        if !name.starts_with(prefix) || name.len() == prefix.len() {
            return Err(ParamError::MissingPrefix {
                name: name.to_owned(),
                prefix: prefix.to_owned(),
            });
        }
        if self.index.contains_key(name) {
            return Err(ParamError::Duplicate(name.to_owned()));
        }
        let var = env_var_name(name);
        let on_line = |value: &String| Source::CommandLine(format!("{name}={value}"));
        let given = if let Some(v) = self.command_line.get(name) {
            Some((v.clone(), on_line(v)))
        } else if let Some(v) = self.environment.get(&var) {
            let source = if self.from_run.contains(name) {
                on_line(v)
            } else {
                Source::Environment(format!("{var}={v}"))
            };
            Some((v.clone(), source))
        } else {
            None
        };
        let (value, source, error) = match given {
            None => (spec.default.clone(), Source::Default, None),
            Some((text, source)) => match parse_value(&spec.default, &text) {
                Ok(v) => (v, source, None),
                Err(reason) => {
                    let err = ParamError::BadValue {
                        name: name.to_owned(),
                        value: text,
                        source,
                        reason,
                    };
                    (spec.default.clone(), Source::Default, Some(err))
                }
            },
        };
        self.index.insert(name.to_owned(), self.params.len());
        self.params.push(Param {
            name: name.to_owned(),
            owner: owner.to_owned(),
            default: spec.default,
            value,
            source,
            help: spec.help.into_string(),
            error: error.clone(),
        });
        error.map_or(Ok(()), Err)
    }

    /// Refuses the value given for `name` after registration, for checks
    /// past its type (a text parameter with a syntax of its own): the
    /// parameter goes back to its default and keeps the error, which is
    /// returned. `None` when `name` is not registered or was not set.
    pub fn reject(&mut self, name: &str, reason: ValueError) -> Option<ParamError> {
        let p = self.index.get(name).and_then(|&i| self.params.get_mut(i))?;
        if p.source == Source::Default {
            return None;
        }
        let error = ParamError::BadValue {
            name: p.name.clone(),
            value: p.value.to_string(),
            source: std::mem::replace(&mut p.source, Source::Default),
            reason,
        };
        p.value = p.default.clone();
        p.error = Some(error.clone());
        Some(error)
    }

    /// A registered parameter.
    pub fn get(&self, name: &str) -> Option<&Param> {
        self.index.get(name).and_then(|&i| self.params.get(i))
    }

    /// Resolved value of a registered parameter.
    pub fn value(&self, name: &str) -> Option<&ParamValue> {
        self.get(name).map(|p| &p.value)
    }

    /// Resolved text value, `None` if missing or not text.
    pub fn str_value(&self, name: &str) -> Option<&str> {
        match self.value(name)? {
            ParamValue::Str(s) => Some(s.as_str()),
            _ => None,
        }
    }

    /// Every parameter in registration order.
    pub fn iter(&self) -> impl Iterator<Item = &Param> {
        self.params.iter()
    }

    /// Settings that no registered parameter takes, sorted: `--param`
    /// names (this program's and `fireopal run`'s), then `FIREOPAL_*`
    /// variables of the environment. Each is a typo, or belongs to a
    /// component that was excluded or did not load.
    pub fn unknown_settings(&self) -> Vec<UnknownSetting<'_>> {
        let passed_by_run = self
            .from_run
            .iter()
            .filter(|n| self.environment.contains_key(&env_var_name(n)));
        let mut line: Vec<&str> = self
            .command_line
            .keys()
            .chain(passed_by_run)
            .filter(|k| !self.index.contains_key(*k))
            .map(String::as_str)
            .collect();
        line.sort_unstable();
        line.dedup();
        let known: HashSet<String> = self
            .params
            .iter()
            .map(|p| &p.name)
            .chain(&self.from_run)
            .map(|n| env_var_name(n))
            .collect();
        let mut env: Vec<&str> = self
            .environment
            .keys()
            .filter(|k| k.starts_with(ENV_PREFIX) && !known.contains(*k))
            .map(String::as_str)
            .collect();
        env.sort_unstable();
        line.into_iter()
            .map(UnknownSetting::CommandLine)
            .chain(env.into_iter().map(UnknownSetting::Environment))
            .collect()
    }
}

/// A setting that no registered parameter takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownSetting<'a> {
    /// A `--param` name.
    CommandLine(&'a str),
    /// A `FIREOPAL_*` environment variable.
    Environment(&'a str),
}

impl fmt::Display for UnknownSetting<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = "no loaded component has this parameter (a typo, or a component that \
                    was excluded or did not load)";
        match self {
            Self::CommandLine(name) => write!(f, "--param {name}: {what}"),
            Self::Environment(var) => {
                let name = var
                    .get(ENV_PREFIX.len()..)
                    .unwrap_or_default()
                    .to_lowercase();
                write!(f, "{var} (--param {name}): {what}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, default: ParamValue) -> ParamSpec {
        ParamSpec::new(name, default, "help")
    }

    #[test]
    fn precedence_command_line_over_environment_over_default() {
        let env = [
            ("FIREOPAL_BTL_X_A".to_owned(), "7".to_owned()),
            ("FIREOPAL_BTL_X_B".to_owned(), "8".to_owned()),
        ];
        let cli = vec![("btl_x_a".to_owned(), "9".to_owned())];
        let mut s = ParamStore::with_environment(cli, env);
        for n in ["btl_x_a", "btl_x_b", "btl_x_c"] {
            s.register("btl x", "btl_x_", spec(n, ParamValue::UInt(1)))
                .unwrap();
        }
        let a = s.get("btl_x_a").unwrap();
        assert_eq!(a.value, ParamValue::UInt(9));
        assert_eq!(a.source.to_string(), "the command line (--param btl_x_a=9)");
        let b = s.get("btl_x_b").unwrap();
        assert_eq!(b.value, ParamValue::UInt(8));
        assert_eq!(b.source.to_string(), "the environment (FIREOPAL_BTL_X_B=8)");
        let c = s.get("btl_x_c").unwrap();
        assert_eq!(
            (c.value.clone(), c.source.clone()),
            (ParamValue::UInt(1), Source::Default)
        );
    }

    #[test]
    fn settings_fireopal_run_passed_keep_the_command_line_as_source() {
        let env = [
            ("FIREOPAL_BTL_X_A".to_owned(), "7".to_owned()),
            ("FIREOPAL_BTL_X_B".to_owned(), "8".to_owned()),
            ("FIREOPAL_BTL_X_TYPO".to_owned(), "9".to_owned()),
            (COMMAND_LINE_VAR.to_owned(), "btl_x_a,btl_x_typo".to_owned()),
        ];
        let mut s = ParamStore::with_environment(vec![], env);
        for n in ["btl_x_a", "btl_x_b"] {
            s.register("btl x", "btl_x_", spec(n, ParamValue::UInt(1)))
                .unwrap();
        }
        let source = |n: &str| s.get(n).map(|p| p.source.to_string());
        assert_eq!(
            source("btl_x_a").as_deref(),
            Some("the command line (--param btl_x_a=7)")
        );
        assert_eq!(
            source("btl_x_b").as_deref(),
            Some("the environment (FIREOPAL_BTL_X_B=8)")
        );
        assert_eq!(
            s.unknown_settings(),
            [UnknownSetting::CommandLine("btl_x_typo")]
        );
    }

    #[test]
    fn settings_no_parameter_takes_are_listed() {
        let env = [
            ("FIREOPAL_BTL_X_A".to_owned(), "1".to_owned()),
            ("FIREOPAL_BTL_X_TYPO".to_owned(), "2".to_owned()),
            ("OTHER_VARIABLE".to_owned(), "3".to_owned()),
        ];
        let line = vec![
            ("btl_x_b".to_owned(), "4".to_owned()),
            ("btl_x_nope".to_owned(), "5".to_owned()),
        ];
        let mut s = ParamStore::with_environment(line, env);
        s.register("btl x", "btl_x_", spec("btl_x_a", ParamValue::UInt(0)))
            .unwrap();
        s.register("btl x", "btl_x_", spec("btl_x_b", ParamValue::UInt(0)))
            .unwrap();
        let unknown = s.unknown_settings();
        assert_eq!(
            unknown,
            [
                UnknownSetting::CommandLine("btl_x_nope"),
                UnknownSetting::Environment("FIREOPAL_BTL_X_TYPO"),
            ]
        );
        assert!(unknown[1]
            .to_string()
            .starts_with("FIREOPAL_BTL_X_TYPO (--param btl_x_typo): no loaded component"));
    }

    #[test]
    fn bad_value_names_the_parameter() {
        let env = [("FIREOPAL_BTL_X_LIMIT".to_owned(), "lots".to_owned())];
        let mut s = ParamStore::with_environment(vec![], env);
        let err = s
            .register(
                "btl x",
                "btl_x_",
                spec("btl_x_limit", ParamValue::Size(4096)),
            )
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("btl_x_limit") && text.contains("FIREOPAL_BTL_X_LIMIT"),
            "{text}"
        );
        assert_eq!(s.value("btl_x_limit"), Some(&ParamValue::Size(4096)));
    }

    #[test]
    fn a_refused_value_is_kept_as_an_error() {
        let env = [
            ("FIREOPAL_BTL_X_LIMIT".to_owned(), "lots".to_owned()),
            ("FIREOPAL_BTL_X_TEXT".to_owned(), "12qq".to_owned()),
        ];
        let mut s = ParamStore::with_environment(vec![], env);
        let bad = s
            .register("btl x", "btl_x_", spec("btl_x_limit", ParamValue::Size(1)))
            .unwrap_err();
        assert_eq!(s.get("btl_x_limit").unwrap().error.as_ref(), Some(&bad));
        s.register(
            "btl x",
            "btl_x_",
            spec("btl_x_text", ParamValue::Str("1".into())),
        )
        .unwrap();
        s.register(
            "btl x",
            "btl_x_",
            spec("btl_x_unset", ParamValue::Str("1".into())),
        )
        .unwrap();
        assert_eq!(s.reject("btl_x_unset", ValueError::NotASize), None);
        assert_eq!(s.reject("btl_x_nope", ValueError::NotASize), None);
        let e = s.reject("btl_x_text", ValueError::BadSuffix('q')).unwrap();
        assert_eq!(
            e.to_string(),
            "parameter btl_x_text: invalid value \"12qq\" from the environment \
             (FIREOPAL_BTL_X_TEXT=12qq): unknown size suffix 'q' (use k, m, g or t)"
        );
        let p = s.get("btl_x_text").unwrap();
        assert_eq!(
            (&p.value, &p.source, p.error.as_ref()),
            (&ParamValue::Str("1".into()), &Source::Default, Some(&e))
        );
    }

    #[test]
    fn value_errors_say_what_was_expected_and_keep_their_cause() {
        use std::error::Error as _;
        let int = parse_value(&ParamValue::Int(0), "x").unwrap_err();
        assert_eq!(int.to_string(), "expected a signed integer");
        assert!(int.source().is_some_and(|e| e.is::<ParseIntError>()));
        let big = parse_value(&ParamValue::UInt(0), "99999999999999999999").unwrap_err();
        assert_eq!(
            big.to_string(),
            "expected an unsigned integer that fits in 64 bits"
        );
        assert_eq!(
            ValueError::NotOneOf(&["error", "warn", "info", "debug"]).to_string(),
            "expected error, warn, info or debug"
        );
        assert_eq!(ValueError::NotOneOf(&["on"]).to_string(), "expected on");
        let env = [("FIREOPAL_BTL_X_N".to_owned(), "many".to_owned())];
        let mut s = ParamStore::with_environment(vec![], env);
        let e = s
            .register("btl x", "btl_x_", spec("btl_x_n", ParamValue::Int(1)))
            .unwrap_err();
        let reason = e.source().and_then(|r| r.downcast_ref::<ValueError>());
        assert!(matches!(reason, Some(ValueError::NotAnInt(_))), "{e:?}");
        assert!(reason.and_then(|r| r.source()).is_some());
    }

    #[test]
    fn registration_rules() {
        let mut s = ParamStore::with_environment(vec![], []);
        assert!(matches!(
            s.register("btl x", "btl_x_", spec("btl_y_a", ParamValue::Bool(true))),
            Err(ParamError::MissingPrefix { .. })
        ));
        assert!(matches!(
            s.register("btl x", "btl_x_", spec("btl_x_A", ParamValue::Bool(true))),
            Err(ParamError::BadName(_))
        ));
        s.register("btl x", "btl_x_", spec("btl_x_a", ParamValue::Bool(true)))
            .unwrap();
        assert!(matches!(
            s.register("btl x", "btl_x_", spec("btl_x_a", ParamValue::Bool(true))),
            Err(ParamError::Duplicate(_))
        ));
    }

    #[test]
    fn value_parsing() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2M"), Ok(2 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("3t"), Ok(3 << 40));
        assert_eq!(parse_size(""), Err(ValueError::NotASize));
        assert_eq!(parse_size("k"), Err(ValueError::NotASize));
        assert_eq!(parse_size("-1"), Err(ValueError::NotASize));
        assert_eq!(parse_size("12q"), Err(ValueError::BadSuffix('q')));
        assert_eq!(parse_size("99999999999t"), Err(ValueError::TooLarge));
        assert_eq!(
            parse_size("99999999999999999999"),
            Err(ValueError::TooLarge)
        );
        assert_eq!(
            parse_value(&ParamValue::Bool(false), "on"),
            Ok(ParamValue::Bool(true))
        );
        assert_eq!(
            parse_value(&ParamValue::Bool(false), "maybe"),
            Err(ValueError::NotABool)
        );
        assert_eq!(
            parse_value(&ParamValue::Int(0), "-5"),
            Ok(ParamValue::Int(-5))
        );
        assert!(matches!(
            parse_value(&ParamValue::UInt(0), "-5"),
            Err(ValueError::NotAnUnsigned(_))
        ));
        assert_eq!(
            parse_assignment("btl=shm,tcp"),
            Ok(("btl".into(), "shm,tcp".into()))
        );
        assert!(parse_assignment("=x").is_err());
        assert!(parse_assignment("novalue").is_err());
    }
}
