//! Services the host offers to plugins: resolved parameters, facts about
//! the job, and logging.

// `#[sabi_trait]` and `#[derive(StableAbi)]` expand to unsafe FFI glue.
#![allow(unsafe_code, non_local_definitions)]

use abi_stable::sabi_trait;
use abi_stable::std_types::{RArc, ROption, RStr};
use abi_stable::StableAbi;

use crate::param::ParamValue;
use crate::Availability;

/// Length of the per-job secret in bytes.
pub const JOB_KEY_LEN: usize = 32;

/// Where this process sits in the job.
#[repr(C)]
#[derive(StableAbi, Clone, Copy, PartialEq, Eq)]
pub struct JobInfo {
    /// Rank of this process in the job.
    pub rank: u32,
    /// Number of processes in the job.
    pub size: u32,
    /// Rank among the processes on this node.
    pub local_rank: u32,
    /// Number of processes on this node.
    pub local_size: u32,
    /// Random secret shared by the processes of the job; transports that
    /// accept connections prove knowledge of it.
    pub job_key: [u8; JOB_KEY_LEN],
}

impl core::fmt::Debug for JobInfo {
    // The job key is a secret: never print it.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("JobInfo")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("local_rank", &self.local_rank)
            .field("local_size", &self.local_size)
            .finish_non_exhaustive()
    }
}

/// Severity of a log line.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Something failed.
    Error,
    /// Something is off but work goes on.
    Warn,
    /// Notable events (connection made, path chosen).
    Info,
    /// Detail for debugging.
    Debug,
}

/// The host's services, as a trait object handed to every entry point.
#[sabi_trait]
pub trait HostServices: Send + Sync + Clone {
    /// Resolved value of a registered parameter, `None` if unknown.
    fn param(&self, name: RStr<'_>) -> ROption<ParamValue>;

    /// Rank, size and node-local layout of the job, and its key.
    fn job(&self) -> JobInfo;

    /// Writes one log line attributed to the calling component.
    #[sabi(last_prefix_field)]
    fn log(&self, level: LogLevel, message: RStr<'_>);
}

/// Shared handle to the host's services.
pub type HostServicesArc = HostServices_TO<'static, RArc<()>>;

/// Convenience wrapper over the host's services for plugin code.
#[derive(Clone)]
pub struct Host {
    inner: HostServicesArc,
}

impl core::fmt::Debug for Host {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Host").field("job", &self.job()).finish()
    }
}

impl Host {
    /// Wraps the trait object received through the ABI.
    pub fn new(inner: HostServicesArc) -> Self {
        Self { inner }
    }

    /// Builds a host handle from any implementation (used by the host
    /// itself and by tests).
    pub fn from_impl<T: HostServices + Clone + Send + Sync + 'static>(services: T) -> Self {
        Self::new(HostServices_TO::from_ptr(
            RArc::new(services),
            abi_stable::sabi_trait::TD_Opaque,
        ))
    }

    /// The raw trait object, to pass through the ABI.
    pub fn as_raw(&self) -> &HostServicesArc {
        &self.inner
    }

    /// Resolved value of a parameter.
    pub fn param(&self, name: &str) -> Option<ParamValue> {
        self.inner.param(name.into()).into_option()
    }

    /// Unsigned (or size) parameter, `None` when missing or of another type.
    pub fn param_u64(&self, name: &str) -> Option<u64> {
        match self.param(name)? {
            ParamValue::UInt(v) | ParamValue::Size(v) => Some(v),
            _ => None,
        }
    }

    /// A component's selection priority from its parameter `name`
    /// (`default` when unset). A value above `u32::MAX` makes the component
    /// unavailable, with a reason naming the parameter, rather than being
    /// cut to 32 bits.
    pub fn priority(&self, name: &str, default: u32) -> Result<u32, Availability> {
        let p = self.param_u64(name).unwrap_or(u64::from(default));
        u32::try_from(p).map_err(|_| Availability::Unavailable {
            reason: format!("{name} = {p} does not fit in 32 bits").into(),
        })
    }

    /// Signed parameter, `None` when missing or of another type.
    pub fn param_i64(&self, name: &str) -> Option<i64> {
        match self.param(name)? {
            ParamValue::Int(v) => Some(v),
            _ => None,
        }
    }

    /// Boolean parameter, `None` when missing or of another type.
    pub fn param_bool(&self, name: &str) -> Option<bool> {
        match self.param(name)? {
            ParamValue::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// Text parameter, `None` when missing or of another type.
    pub fn param_str(&self, name: &str) -> Option<String> {
        match self.param(name)? {
            ParamValue::Str(v) => Some(v.into_string()),
            _ => None,
        }
    }

    /// Facts about the job.
    pub fn job(&self) -> JobInfo {
        self.inner.job()
    }

    /// Writes a log line.
    pub fn log(&self, level: LogLevel, message: &str) {
        self.inner.log(level, message.into());
    }
}
