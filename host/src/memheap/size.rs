//! The symmetric heap's size: the `symmetric_size` parameter, OpenSHMEM's
//! `SHMEM_SYMMETRIC_SIZE`, and the number syntax both use.

use std::fmt;

use fireopal_abi::param::{ParamSpec, ParamValue};

use crate::param::{suffix_shift, ParamError, ParamStore, Source, ValueError, ENV_PREFIX};

/// Name of the host parameter (`--param symmetric_size=`,
/// `FIREOPAL_SYMMETRIC_SIZE`).
pub const SYMMETRIC_SIZE_PARAM: &str = "symmetric_size";
/// OpenSHMEM's variable, read when `symmetric_size` is not set.
pub const SHMEM_SYMMETRIC_SIZE: &str = "SHMEM_SYMMETRIC_SIZE";
/// Size when nothing is set: 256 MiB per process. The memfd is sparse, so
/// only the pages that are written cost memory.
pub const DEFAULT_SYMMETRIC_SIZE: u64 = 256 << 20;
const DEFAULT_TEXT: &str = "256m";

/// The declaration of `symmetric_size`. It is text, parsed by
/// [`parse_symmetric_size`], because OpenSHMEM allows a fraction ("1.5g")
/// that the host's plain size type does not.
pub fn symmetric_size_spec() -> ParamSpec {
    ParamSpec::new(
        SYMMETRIC_SIZE_PARAM,
        ParamValue::Str(DEFAULT_TEXT.into()),
        "bytes of symmetric heap per process: a number (fraction and exponent allowed) with an \
         optional k, m, g or t suffix (powers of 1024); SHMEM_SYMMETRIC_SIZE is read when this \
         is not set",
    )
}

/// Parses a heap size as OpenSHMEM defines `SHMEM_SYMMETRIC_SIZE`: a
/// non-negative integer or floating-point number with an optional suffix
/// `k`, `m`, `g` or `t` (either case; powers of 1024). A fraction of a byte
/// rounds up. The arithmetic is exact (no binary floating point).
///
/// ```
/// use fireopal::memheap::parse_symmetric_size;
/// assert_eq!(parse_symmetric_size("64k"), Ok(65536));
/// assert_eq!(parse_symmetric_size("1.5G"), Ok(3 << 29));
/// assert_eq!(parse_symmetric_size("2e3"), Ok(2000));
/// assert!(parse_symmetric_size("-1m").is_err());
/// ```
pub fn parse_symmetric_size(text: &str) -> Result<u64, ValueError> {
    let t = text.trim();
    let (number, shift) = match t.chars().last() {
        Some(c) if c.is_ascii_alphabetic() => (t.strip_suffix(c).unwrap_or(t), suffix_shift(c)?),
        _ => (t, 0u32),
    };
    let expected = || ValueError::NotANumber;
    let (mantissa, exponent) = match number.split_once(['e', 'E']) {
        Some((m, e)) => (m, Some(e)),
        None => (number, None),
    };
    let (whole, fraction) = match mantissa.split_once('.') {
        Some((w, f)) => (w, f),
        None => (mantissa, ""),
    };
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.len() + fraction.len() == 0 || !digits_only(whole) || !digits_only(fraction) {
        return Err(expected());
    }
    let mut exp10: i64 = match exponent {
        None => 0,
        Some(e) => {
            let body = e.strip_prefix(['+', '-']).unwrap_or(e);
            if body.is_empty() || !digits_only(body) || body.len() > 4 {
                return Err(expected());
            }
            e.parse().map_err(|_| expected())?
        }
    };
    // The digits as one integer, leading zeros dropped.
    let digits = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 38 {
        return Err(ValueError::TooManyDigits);
    }
    let mut value: u128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| expected())?
    };
    exp10 -= fraction.len() as i64;
    let too_large = || ValueError::TooLarge;
    value = value.checked_mul(1u128 << shift).ok_or_else(too_large)?;
    if value != 0 {
        if exp10 >= 0 {
            let scale = u32::try_from(exp10)
                .ok()
                .and_then(|e| 10u128.checked_pow(e))
                .ok_or_else(too_large)?;
            value = value.checked_mul(scale).ok_or_else(too_large)?;
        } else {
            // Divide rounding up; a divisor past u128 leaves a fraction.
            value = match u32::try_from(-exp10)
                .ok()
                .and_then(|e| 10u128.checked_pow(e))
            {
                Some(d) => value.div_ceil(d),
                None => 1,
            };
        }
    }
    u64::try_from(value).map_err(|_| too_large())
}

/// Checks `symmetric_size` in a store that registered it, where discovery
/// reads it: a value given on the command line or in the environment must
/// be a heap size. A refused value is kept in the store as such (see
/// [`ParamStore::reject`]) and returned as the same error the heap gives.
pub(crate) fn check_symmetric_size(store: &mut ParamStore) -> Result<(), ParamError> {
    let Some(param) = store.get(SYMMETRIC_SIZE_PARAM) else {
        return Ok(());
    };
    if param.source == Source::Default {
        return Ok(());
    }
    match parse_symmetric_size(&param.value.to_string()) {
        Ok(_) => Ok(()),
        Err(reason) => store
            .reject(SYMMETRIC_SIZE_PARAM, reason)
            .map_or(Ok(()), Err),
    }
}

/// Why the heap size could not be decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SizeError {
    /// `symmetric_size` (command line or `FIREOPAL_SYMMETRIC_SIZE`) is not
    /// a valid size.
    Param(ParamError),
    /// `SHMEM_SYMMETRIC_SIZE` is not a valid size.
    ShmemVariable {
        /// The text found.
        value: String,
        /// What is wrong with it.
        reason: ValueError,
    },
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Param(e) => write!(f, "symmetric heap size: {e}"),
            Self::ShmemVariable { value, reason } => write!(
                f,
                "symmetric heap size: invalid value {value:?} in environment variable \
                 {SHMEM_SYMMETRIC_SIZE}: {reason}"
            ),
        }
    }
}

impl std::error::Error for SizeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Param(e) => Some(e),
            Self::ShmemVariable { reason, .. } => Some(reason),
        }
    }
}

/// The decided heap size and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymmetricSize {
    /// Bytes per process.
    pub bytes: u64,
    /// `default`, or a [`Source`]'s text: `the command line (--param
    /// symmetric_size=...)`, `the environment (FIREOPAL_SYMMETRIC_SIZE=...)`
    /// or `the environment (SHMEM_SYMMETRIC_SIZE=...)`.
    pub from: String,
}

/// [`resolve_symmetric_size`](super::resolve_symmetric_size) for a
/// command line and an environment (`None`: this process's).
pub(super) fn resolve(
    command_line: &[(String, String)],
    environment: Option<&[(String, String)]>,
) -> Result<SymmetricSize, SizeError> {
    let environment: Vec<(String, String)> = match environment {
        Some(env) => env.to_vec(),
        // Variables that are not UTF-8 cannot be ours; skip them.
        None => std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect(),
    };
    let shmem = environment
        .iter()
        .find(|(k, _)| k == SHMEM_SYMMETRIC_SIZE)
        .map(|(_, v)| v.clone());
    let mut store = ParamStore::with_environment(
        command_line.to_vec(),
        environment
            .into_iter()
            .filter(|(k, _)| k.starts_with(ENV_PREFIX)),
    );
    store
        .register("fireopal", "", symmetric_size_spec())
        .map_err(SizeError::Param)?;
    let param = store
        .get(SYMMETRIC_SIZE_PARAM)
        .ok_or_else(|| SizeError::Param(ParamError::BadName(SYMMETRIC_SIZE_PARAM.into())))?;
    if param.source != Source::Default {
        let text = param.value.to_string();
        let bytes = parse_symmetric_size(&text).map_err(|reason| {
            SizeError::Param(ParamError::BadValue {
                name: SYMMETRIC_SIZE_PARAM.into(),
                value: text.clone(),
                source: param.source.clone(),
                reason,
            })
        })?;
        return Ok(SymmetricSize {
            bytes,
            from: param.source.to_string(),
        });
    }
    if let Some(value) = shmem {
        let bytes = parse_symmetric_size(&value).map_err(|reason| SizeError::ShmemVariable {
            value: value.clone(),
            reason,
        })?;
        return Ok(SymmetricSize {
            bytes,
            from: Source::Environment(format!("{SHMEM_SYMMETRIC_SIZE}={value}")).to_string(),
        });
    }
    Ok(SymmetricSize {
        bytes: DEFAULT_SYMMETRIC_SIZE,
        from: Source::Default.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memheap::resolve_symmetric_size;
    use crate::plugin::Options;

    #[test]
    fn sizes_as_openshmem_writes_them() {
        let ok = [
            ("0", 0),
            ("4096", 4096),
            (" 64k ", 64 << 10),
            ("2M", 2 << 20),
            ("1g", 1 << 30),
            ("3T", 3 << 40),
            ("1.5g", 3 << 29),
            ("0.5k", 512),
            (".25m", 1 << 18),
            ("1.", 1),
            ("2e3", 2000),
            ("2.5E+2k", 250 << 10),
            ("1e-3", 1),
            ("1.0001", 2),
            ("007", 7),
            ("16777215.5t", u64::MAX - (1 << 39) + 1),
            ("0.00000000000000000000000000000000000001", 1),
            ("0.000000000000000000000000000000000000000000001k", 1),
        ];
        for (text, want) in ok {
            assert_eq!(parse_symmetric_size(text), Ok(want), "{text:?}");
        }
        let bad = [
            "",
            "k",
            ".",
            "-1",
            "+1",
            "1q",
            "1.2.3",
            "1e",
            "1e+",
            "0x10",
            "1 k",
            "16777216t",
            "1e30",
            "1e99999",
        ];
        for text in bad {
            assert!(parse_symmetric_size(text).is_err(), "{text:?} accepted");
        }
        assert_eq!(parse_symmetric_size("1q"), Err(ValueError::BadSuffix('q')));
        assert_eq!(parse_symmetric_size("1.2.3"), Err(ValueError::NotANumber));
        assert_eq!(parse_symmetric_size("1e30"), Err(ValueError::TooLarge));
        assert_eq!(
            parse_symmetric_size(&"1".repeat(39)),
            Err(ValueError::TooManyDigits)
        );
    }

    fn opts(env: &[(&str, &str)], cli: &[(&str, &str)]) -> Options {
        let own = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        Options {
            environment: Some(own(env)),
            command_line: own(cli),
            ..Options::default()
        }
    }

    #[test]
    fn precedence_command_line_fireopal_shmem_default() {
        let r = |env: &[(&str, &str)], cli: &[(&str, &str)]| {
            resolve_symmetric_size(&opts(env, cli)).map(|s| (s.bytes, s.from))
        };
        assert_eq!(r(&[], &[]), Ok((DEFAULT_SYMMETRIC_SIZE, "default".into())));
        let shmem = [("SHMEM_SYMMETRIC_SIZE", "2m")];
        assert_eq!(
            r(&shmem, &[]),
            Ok((2 << 20, "the environment (SHMEM_SYMMETRIC_SIZE=2m)".into()))
        );
        let both = [
            ("SHMEM_SYMMETRIC_SIZE", "2m"),
            ("FIREOPAL_SYMMETRIC_SIZE", "3m"),
        ];
        assert_eq!(
            r(&both, &[]),
            Ok((
                3 << 20,
                "the environment (FIREOPAL_SYMMETRIC_SIZE=3m)".into()
            ))
        );
        assert_eq!(
            r(&both, &[("symmetric_size", "1.5m")]),
            Ok((
                3 << 19,
                "the command line (--param symmetric_size=1.5m)".into()
            ))
        );
        // Ours set: a bad SHMEM value is never read.
        let ours_wins = [
            ("SHMEM_SYMMETRIC_SIZE", "lots"),
            ("FIREOPAL_SYMMETRIC_SIZE", "1m"),
        ];
        assert_eq!(r(&ours_wins, &[]).map(|s| s.0), Ok(1 << 20));
    }

    #[test]
    fn discovery_refuses_what_the_heap_would_refuse() {
        for text in ["12qq", "NaN", "-5", "1e30"] {
            let o = opts(&[("FIREOPAL_SYMMETRIC_SIZE", text)], &[]);
            let heap = resolve_symmetric_size(&o).unwrap_err();
            let registry = crate::plugin::Registry::discover(&o);
            let found: Vec<String> = registry.errors().iter().map(ToString::to_string).collect();
            assert_eq!(found.len(), 1, "{text}: {found:?}");
            // The same error, under the heap's prefix.
            assert_eq!(
                heap.to_string(),
                format!("symmetric heap size: {}", found[0])
            );
            let p = registry.params().get(SYMMETRIC_SIZE_PARAM).unwrap();
            assert!(p.error.is_some(), "{text}");
        }
        let o = opts(&[("FIREOPAL_SYMMETRIC_SIZE", "1.5g")], &[]);
        assert!(crate::plugin::Registry::discover(&o).errors().is_empty());
    }

    #[test]
    fn invalid_sizes_name_their_variable() {
        let err = |env: &[(&str, &str)], cli: &[(&str, &str)]| {
            resolve_symmetric_size(&opts(env, cli))
                .unwrap_err()
                .to_string()
        };
        let e = err(&[("FIREOPAL_SYMMETRIC_SIZE", "12q")], &[]);
        assert!(
            e.contains("symmetric_size")
                && e.contains("FIREOPAL_SYMMETRIC_SIZE")
                && e.contains("\"12q\"")
                && e.contains("suffix"),
            "{e}"
        );
        let e = err(&[], &[("symmetric_size", "-5")]);
        assert!(
            e.contains("symmetric_size") && e.contains("command line"),
            "{e}"
        );
        let e = err(&[("SHMEM_SYMMETRIC_SIZE", "big")], &[]);
        assert!(
            e.contains("SHMEM_SYMMETRIC_SIZE") && e.contains("\"big\""),
            "{e}"
        );
    }

    #[test]
    fn size_errors_keep_the_value_error_as_their_source() {
        use std::error::Error as _;
        let shmem =
            resolve_symmetric_size(&opts(&[("SHMEM_SYMMETRIC_SIZE", "1x")], &[])).unwrap_err();
        assert!(matches!(
            shmem.source().and_then(|e| e.downcast_ref::<ValueError>()),
            Some(ValueError::BadSuffix('x'))
        ));
        let ours = resolve_symmetric_size(&opts(&[], &[("symmetric_size", "-5")])).unwrap_err();
        let param = ours.source().and_then(|e| e.downcast_ref::<ParamError>());
        assert!(matches!(param, Some(ParamError::BadValue { .. })), "{ours}");
        assert_eq!(
            param
                .and_then(|e| e.source())
                .and_then(|e| e.downcast_ref::<ValueError>()),
            Some(&ValueError::NotANumber)
        );
    }
}
