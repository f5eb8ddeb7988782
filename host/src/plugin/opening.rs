//! Opening the selected BTL components, where a component that fails to
//! open is disabled instead of ending the job, and reports of components
//! that a parameter's value made unavailable.

use fireopal_abi::btl::BtlModuleBox;
use fireopal_abi::host::{Host, HostServices, LogLevel};
use fireopal_abi::param::ParamValue;

use super::{Component, ComponentFilter, Framework, OpenError, Registry, Status};
use crate::param::{ParamStore, Source};

/// The modules of every selected BTL component that opened, and the
/// components that did not.
pub struct OpenedBtls {
    /// `(component name, its modules)`, highest priority first.
    pub modules: Vec<(String, Vec<BtlModuleBox>)>,
    /// Components whose `open` failed or panicked, each an
    /// [`OpenError::Failed`]. None of them was named by an include list.
    pub disabled: Vec<OpenError>,
}

impl std::fmt::Debug for OpenedBtls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenedBtls")
            .field(
                "modules",
                &self
                    .modules
                    .iter()
                    .map(|(name, m)| (name, m.len()))
                    .collect::<Vec<_>>(),
            )
            .field("disabled", &self.disabled)
            .finish()
    }
}

impl Registry {
    /// Whether `name` is named by its framework's include list
    /// (`FIREOPAL_BTL=a,b`), which makes its failure an error.
    pub fn is_required(&self, framework: Framework, name: &str) -> bool {
        let text = self.params.str_value(framework.name()).unwrap_or("");
        ComponentFilter::parse(framework.name(), text).is_ok_and(|f| f.requires(name))
    }

    /// Opens every selected BTL component, highest priority first. A
    /// component whose `open` fails (a panic included) is left out, with
    /// its error in [`OpenedBtls::disabled`], unless an include list names
    /// it: then the first such failure is returned.
    pub fn open_btls(&self) -> Result<OpenedBtls, OpenError> {
        let mut opened = OpenedBtls {
            modules: Vec::new(),
            disabled: Vec::new(),
        };
        for component in self.selected_btls() {
            match self.open_btl(component) {
                Ok(modules) => opened.modules.push((component.name().to_owned(), modules)),
                Err(e) if self.is_required(Framework::Btl, component.name()) => return Err(e),
                Err(e) => opened.disabled.push(e),
            }
        }
        Ok(opened)
    }

    /// Opens every selected BTL component and drops the modules, so that
    /// one whose `open` fails is shown as unavailable with the reason
    /// (what `fireopal info` shows; a job disables it the same way).
    pub fn check_btls_open(&mut self) {
        // Modules that opened are dropped at once.
        let failed: Vec<(String, String)> = self
            .selected_btls()
            .into_iter()
            .filter_map(|c| match self.open_btl(c) {
                Err(OpenError::Failed { name, error }) => Some((name, error.to_string())),
                _ => None,
            })
            .collect();
        for (name, error) in failed {
            if let Some(c) = self
                .components
                .iter_mut()
                .find(|c| c.framework == Framework::Btl && c.name == name)
            {
                c.status = Status::Unavailable {
                    reason: format!("open failed: {error}"),
                };
                c.selected = false;
            }
        }
    }

    /// The host's own log under `owner`, filtered by `log_level`, for
    /// parts of the host that outlive discovery (the messenger).
    pub fn host_log(&self, owner: &str) -> Host {
        Host::from_impl(self.services.for_component(owner))
    }

    /// Writes a line of the host's own log under `owner` (`btl`,
    /// `memheap`), at `level` if `log_level` lets it through.
    pub fn log(&self, owner: &str, level: LogLevel, message: &str) {
        self.services
            .for_component(owner)
            .log(level, message.into());
    }
}

/// Settings of `c`'s own parameters that did not come from the default,
/// as `name=value from <source>`.
fn settings_of(c: &Component, params: &ParamStore) -> Vec<(String, String)> {
    let prefix = super::param_prefix(c.framework, &c.name);
    params
        .iter()
        .filter(|p| p.name.starts_with(&prefix) && p.source != Source::Default)
        .map(|p| {
            (
                p.name.clone(),
                format!("{} from {}", value_text(&p.value), p.source),
            )
        })
        .collect()
}

fn value_text(v: &ParamValue) -> String {
    format!("{:?}", v.to_string())
}

/// Components that a parameter set by the user made unavailable: the
/// reason names one of the component's parameters whose value was given
/// on the command line or in the environment. Each is one line to warn
/// about at the job's start.
pub(super) fn unavailable_by_params(components: &[Component], params: &ParamStore) -> Vec<String> {
    components
        .iter()
        .filter_map(|c| {
            let Status::Unavailable { reason } = &c.status else {
                return None;
            };
            let named: Vec<String> = settings_of(c, params)
                .into_iter()
                .filter(|(name, _)| reason.contains(name.as_str()))
                .map(|(name, from)| format!("{name} = {from}"))
                .collect();
            (!named.is_empty()).then(|| {
                format!(
                    "{} component {:?} is unavailable: {reason} ({})",
                    c.framework,
                    c.name,
                    named.join("; ")
                )
            })
        })
        .collect()
}
