//! Parameters a component registers with the host.
//!
//! A component declares each parameter once, with a typed default and a
//! help line, during `register_params`. The host resolves the value
//! (command line > environment `FIREOPAL_<NAME>` > default) and hands it
//! back through [`crate::host::Host::param`]. Names are snake_case and
//! start with `<framework>_<component>_`, e.g. `btl_tcp_eager_limit`.

// `#[sabi_trait]` and `#[derive(StableAbi)]` expand to unsafe FFI glue.
#![allow(unsafe_code, non_local_definitions)]

use abi_stable::sabi_trait;
use abi_stable::std_types::{RResult, RString};
use abi_stable::StableAbi;
use core::fmt;

use crate::PluginError;

/// A typed parameter value; the variant of the default fixes the type.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub enum ParamValue {
    /// `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`).
    Bool(bool),
    /// Signed integer.
    Int(i64),
    /// Unsigned integer.
    UInt(u64),
    /// Byte count; accepts `k`, `m`, `g`, `t` suffixes (powers of 1024).
    Size(u64),
    /// Free text (lists are comma-separated text).
    Str(RString),
}

impl ParamValue {
    /// Name of the value's type, as `fireopal info` shows it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Bool(_) => "bool",
            Self::Int(_) => "int",
            Self::UInt(_) => "uint",
            Self::Size(_) => "size",
            Self::Str(_) => "string",
        }
    }
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bool(v) => write!(f, "{v}"),
            Self::Int(v) => write!(f, "{v}"),
            Self::UInt(v) | Self::Size(v) => write!(f, "{v}"),
            Self::Str(v) => f.write_str(v),
        }
    }
}

/// Declaration of one parameter.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct ParamSpec {
    /// Full snake_case name, prefixed by `<framework>_<component>_`.
    pub name: RString,
    /// Default value; its variant is the parameter's type.
    pub default: ParamValue,
    /// One help line.
    pub help: RString,
}

impl ParamSpec {
    /// Builds a declaration.
    pub fn new(name: &str, default: ParamValue, help: &str) -> Self {
        Self {
            name: name.into(),
            default,
            help: help.into(),
        }
    }
}

/// Host-provided object that records a component's parameters.
#[sabi_trait]
pub trait ParamRegistry {
    /// Declares a parameter. Fails when the name is malformed, lacks the
    /// component's prefix, or is already declared.
    #[sabi(last_prefix_field)]
    fn register(&mut self, spec: ParamSpec) -> RResult<(), PluginError>;
}

/// Borrowed registry trait object as passed to `register_params`.
pub type ParamRegistryRef<'a> = ParamRegistry_TO<'a, abi_stable::sabi_types::RMut<'a, ()>>;

/// What a component's `register_params` receives: declares parameters
/// through the host's registry.
pub struct ParamRegistrar<'a> {
    inner: ParamRegistryRef<'a>,
}

impl core::fmt::Debug for ParamRegistrar<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("ParamRegistrar")
    }
}

impl<'a> ParamRegistrar<'a> {
    /// Wraps the registry received through the ABI.
    pub fn new(inner: ParamRegistryRef<'a>) -> Self {
        Self { inner }
    }

    /// Declares a parameter.
    pub fn register(
        &mut self,
        name: &str,
        default: ParamValue,
        help: &str,
    ) -> Result<(), PluginError> {
        self.inner
            .register(ParamSpec::new(name, default, help))
            .into_result()
    }
}

/// A parameter value a component refuses: the parameter's name and why.
/// It becomes an `INVALID_ARGUMENT` [`PluginError`] when it leaves the
/// component, e.g. from `open`.
///
/// ```
/// use fireopal_abi::param::BadParam;
/// let e = BadParam::new("btl_tcp_links", "must be between 1 and 64");
/// assert_eq!(e.to_string(), "btl_tcp_links: must be between 1 and 64");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadParam {
    param: &'static str,
    reason: String,
}

impl BadParam {
    /// Parameter `param` refused for `reason`.
    pub fn new(param: &'static str, reason: impl Into<String>) -> Self {
        Self {
            param,
            reason: reason.into(),
        }
    }

    /// The parameter's name.
    pub fn param(&self) -> &'static str {
        self.param
    }
}

impl fmt::Display for BadParam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.param, self.reason)
    }
}

impl std::error::Error for BadParam {}

impl From<BadParam> for PluginError {
    fn from(e: BadParam) -> Self {
        PluginError::invalid(e.to_string())
    }
}
