//! The host objects handed to components: the parameter registry used
//! during `register_params`, and the services used by `query`, `open` and
//! the modules afterwards.

use std::collections::HashMap;
use std::sync::Arc;

use abi_stable::std_types::{RErr, ROk, ROption, RResult, RStr};
use fireopal_abi::host::{HostServices, JobInfo, LogLevel};
use fireopal_abi::param::{ParamRegistry, ParamSpec, ParamValue};
use fireopal_abi::{ErrorKind, PluginError};

use crate::param::{ParamError, ParamStore};

/// Records one component's parameters into the store. Malformed
/// declarations are refused back to the component; a bad user-supplied
/// value is kept as a job-level error (naming the parameter) and the
/// component goes on with the default.
pub(crate) struct ComponentParams<'a> {
    pub(crate) store: &'a mut ParamStore,
    pub(crate) owner: String,
    pub(crate) prefix: String,
    pub(crate) bad_values: &'a mut Vec<ParamError>,
}

impl ParamRegistry for ComponentParams<'_> {
    fn register(&mut self, spec: ParamSpec) -> RResult<(), PluginError> {
        match self.store.register(&self.owner, &self.prefix, spec) {
            Ok(()) => ROk(()),
            Err(e @ ParamError::BadValue { .. }) => {
                self.bad_values.push(e);
                ROk(())
            }
            Err(e) => RErr(PluginError::new(ErrorKind::INVALID_ARGUMENT, e.to_string())),
        }
    }
}

#[derive(Debug)]
struct Shared {
    params: HashMap<String, ParamValue>,
    job: JobInfo,
    log_level: LogLevel,
}

/// The services one component sees; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct ComponentServices {
    shared: Arc<Shared>,
    owner: Arc<str>,
}

impl ComponentServices {
    /// Services over a snapshot of the resolved parameters.
    pub(crate) fn new(store: &ParamStore, job: JobInfo, log_level: LogLevel) -> Self {
        let params = store
            .iter()
            .map(|p| (p.name.clone(), p.value.clone()))
            .collect();
        Self {
            shared: Arc::new(Shared {
                params,
                job,
                log_level,
            }),
            owner: Arc::from("fireopal"),
        }
    }

    /// The same services, with log lines attributed to `owner`.
    pub(crate) fn for_component(&self, owner: &str) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            owner: Arc::from(owner),
        }
    }
}

impl HostServices for ComponentServices {
    fn param(&self, name: RStr<'_>) -> ROption<ParamValue> {
        self.shared.params.get(name.as_str()).cloned().into()
    }

    fn job(&self) -> JobInfo {
        self.shared.job
    }

    fn log(&self, level: LogLevel, message: RStr<'_>) {
        if level <= self.shared.log_level {
            let tag = match level {
                LogLevel::Error => "error",
                LogLevel::Warn => "warning",
                LogLevel::Info => "info",
                LogLevel::Debug => "debug",
            };
            eprintln!(
                "fireopal[{}] {}: {tag}: {message}",
                self.shared.job.rank, self.owner
            );
        }
    }
}
