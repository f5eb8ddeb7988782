//! Watching the process's memory on behalf of the registration cache.
//!
//! A registration left cached after use (leave-pinned) is only safe while
//! the memory it describes stays where it is: a buffer freed and mapped
//! again at the same address must not be served the old registration. This
//! module owns the *memory monitor* that reports memory leaving the
//! process, and the choice of monitor:
//!
//! - [`MonitorKind::Userfaultfd`]: Linux userfaultfd events for `munmap`,
//!   `mremap`, `madvise(DONTNEED/FREE/REMOVE)` and `brk` shrinking, which
//!   covers a `free` that gives pages back to the system. One descriptor
//!   and one thread per process; each registered range is watched when it
//!   is registered. Needs the system call (root, `CAP_SYS_PTRACE`, or
//!   `vm.unprivileged_userfaultfd=1`; user-mode-only descriptors are asked
//!   for first) or access to `/dev/userfaultfd`.
//! - [`MonitorKind::None`]: nothing watches memory. The messenger then keeps
//!   a registration only while it is held and deregisters it at its
//!   release, unless `rcache_leave_pinned=always` says the runtime reports
//!   memory leaving itself, through
//!   [`Messenger::invalidate_memory`](crate::btl::Messenger::invalidate_memory).
//!
//! The `memory_monitor` parameter chooses (`auto`, `userfaultfd`, `none`);
//! [`MonitorReport`] says what runs and why the others do not, as
//! `fireopal info` prints it.

mod userfaultfd;

use std::fmt;

use fireopal_abi::param::{ParamSpec, ParamValue};

use crate::param::ParamStore;

pub(crate) use userfaultfd::{page_size, Subscription, Userfaultfd};

/// The memory monitors this host knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonitorKind {
    /// Linux userfaultfd events.
    Userfaultfd,
    /// No monitor.
    None,
}

impl fmt::Display for MonitorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Userfaultfd => "userfaultfd",
            Self::None => "none",
        })
    }
}

/// When a registration stays cached after its last release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeavePinned {
    /// When a monitor watches its memory (the default).
    Watched,
    /// Always: the runtime reports memory leaving the process itself.
    Always,
    /// Never: every registration is made per use.
    Never,
}

/// Which monitor runs, and why the others do not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitorReport {
    /// The monitor in use.
    pub active: MonitorKind,
    /// Monitors passed over, each with the reason.
    pub declined: Vec<(MonitorKind, String)>,
    /// When registrations stay cached after use.
    pub leave_pinned: LeavePinned,
}

impl fmt::Display for MonitorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "memory monitor: {}", self.active)?;
        for (kind, why) in &self.declined {
            write!(f, "; {kind} not used: {why}")?;
        }
        match (self.active, self.leave_pinned) {
            (_, LeavePinned::Never) => {
                f.write_str("; registrations are released at their last use")
            }
            (_, LeavePinned::Always) => f.write_str(
                "; registrations stay cached after use, invalidated by the runtime's own calls",
            ),
            (MonitorKind::None, LeavePinned::Watched) => f.write_str(
                "; registrations are released at their last use, since nothing watches memory",
            ),
            (MonitorKind::Userfaultfd, LeavePinned::Watched) => {
                f.write_str("; registrations of watched memory stay cached after use")
            }
        }
    }
}

/// A bad value of `memory_monitor` or `rcache_leave_pinned`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChoiceError {
    /// The parameter.
    pub name: &'static str,
    /// The value given.
    pub value: String,
}

impl fmt::Display for ChoiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name {
            "memory_monitor" => write!(
                f,
                "memory_monitor={}: expected auto, userfaultfd or none",
                self.value
            ),
            _ => write!(
                f,
                "{}={}: expected watched, always or never",
                self.name, self.value
            ),
        }
    }
}

impl std::error::Error for ChoiceError {}

/// The monitor chosen by the parameters, started if needed.
pub(crate) struct Monitor {
    pub(crate) report: MonitorReport,
    pub(crate) userfaultfd: Option<&'static Userfaultfd>,
}

impl Monitor {
    /// Starts (or finds) the monitor the parameters ask for. Asking for
    /// `userfaultfd` by name where it cannot run is an error; `auto` falls
    /// back to none and says why.
    pub(crate) fn from_params(params: &ParamStore) -> Result<Self, MonitorError> {
        let choice = params.str_value("memory_monitor").unwrap_or("auto");
        let leave_pinned = match params.str_value("rcache_leave_pinned").unwrap_or("watched") {
            "watched" => LeavePinned::Watched,
            "always" => LeavePinned::Always,
            "never" => LeavePinned::Never,
            other => {
                return Err(MonitorError::Choice(ChoiceError {
                    name: "rcache_leave_pinned",
                    value: other.to_owned(),
                }))
            }
        };
        let report = |active, declined| MonitorReport {
            active,
            declined,
            leave_pinned,
        };
        match choice {
            "none" => Ok(Self {
                report: report(
                    MonitorKind::None,
                    vec![(MonitorKind::Userfaultfd, "memory_monitor=none".to_owned())],
                ),
                userfaultfd: None,
            }),
            "auto" | "userfaultfd" => match Userfaultfd::get() {
                Ok(uffd) => Ok(Self {
                    report: report(MonitorKind::Userfaultfd, Vec::new()),
                    userfaultfd: Some(uffd),
                }),
                Err(why) if choice == "auto" => Ok(Self {
                    report: report(
                        MonitorKind::None,
                        vec![(MonitorKind::Userfaultfd, why.to_owned())],
                    ),
                    userfaultfd: None,
                }),
                Err(why) => Err(MonitorError::Unavailable {
                    kind: MonitorKind::Userfaultfd,
                    why: why.to_owned(),
                }),
            },
            other => Err(MonitorError::Choice(ChoiceError {
                name: "memory_monitor",
                value: other.to_owned(),
            })),
        }
    }
}

/// Why the memory monitor asked for cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MonitorError {
    /// A parameter names no choice.
    Choice(ChoiceError),
    /// The monitor named by `memory_monitor` cannot run here.
    Unavailable {
        /// The monitor.
        kind: MonitorKind,
        /// Why.
        why: String,
    },
}

impl fmt::Display for MonitorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Choice(e) => e.fmt(f),
            Self::Unavailable { kind, why } => {
                write!(f, "memory_monitor={kind} cannot run: {why}")
            }
        }
    }
}

impl std::error::Error for MonitorError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Choice(e) => Some(e),
            Self::Unavailable { .. } => None,
        }
    }
}

/// What `memory_monitor` and the leave-pinned setting would give in this
/// process, as `fireopal info` prints it.
pub fn monitor_report(params: &ParamStore) -> Result<MonitorReport, MonitorError> {
    Monitor::from_params(params).map(|m| m.report)
}

/// The parameters of the registration cache and its monitor.
pub(crate) fn param_specs() -> Vec<ParamSpec> {
    vec![
        ParamSpec::new(
            "memory_monitor",
            ParamValue::Str("auto".into()),
            "what watches memory for the registration cache: auto, userfaultfd or none",
        ),
        ParamSpec::new(
            "rcache_leave_pinned",
            ParamValue::Str("watched".into()),
            "when a registration stays cached after use: watched (its memory is watched by the monitor), always (the runtime calls invalidate_memory itself) or never",
        ),
        ParamSpec::new(
            "rcache_max_count",
            ParamValue::UInt(4096),
            "most registrations kept by the messenger's cache before idle ones are released (memory exposed to every peer for the runtime's life, such as the symmetric heap, comes on top)",
        ),
        ParamSpec::new(
            "rcache_max_bytes",
            ParamValue::Size(1 << 30),
            "most bytes kept registered by the messenger's cache before idle registrations are released (memory exposed to every peer for the runtime's life, such as the symmetric heap, comes on top)",
        ),
    ]
}
