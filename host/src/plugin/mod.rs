//! Components: discovery, loading, ranking and selection.
//!
//! [`Registry::discover`] builds the list of every component this process
//! can see, built-in and file, each with a [`Status`]:
//!
//! 1. framework parameters are registered (`plugin_path`, `btl`,
//!    `memheap`, `symmetric_size`, `log_level`);
//! 2. built-in components are listed (the btl `self`, the memheap
//!    `buddy`);
//! 3. the search path is scanned; file names are matched against the
//!    framework's include/exclude list *before* anything is opened;
//!    missing directories and entries named like plugins that are not
//!    loadable files are kept in [`Registry::skipped`] and logged at
//!    debug level;
//! 4. every admitted file's header is opened, then root modules are
//!    initialised newest interface version first;
//! 5. each loaded component registers its parameters, then answers
//!    `query` with the resolved parameters and the job in hand;
//! 6. btl is select-many (every available component, by priority), memheap
//!    select-one (the highest priority).
//!
//! Nothing here panics or exits on a bad plugin: each failure is a value in
//! the component's status, and job-level problems (a malformed list, a
//! bad parameter value, an explicitly requested component that is not
//! usable) are collected as [`DiscoveryError`]s.

mod discovery;
mod loader;
mod opening;
mod services;

use std::fmt;
use std::path::PathBuf;

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RResult, RVec};
use fireopal_abi::btl::BtlModuleBox;
use fireopal_abi::host::{HostServices_TO, JobInfo, LogLevel, JOB_KEY_LEN};
use fireopal_abi::memheap::MemheapModuleBox;
use fireopal_abi::param::{ParamRegistry_TO, ParamSpec, ParamValue};
use fireopal_abi::{Availability, ComponentVersion, PluginError};

pub use discovery::{FilterError, FilterReason, SkipReason, Skipped};
pub use loader::LoadError;
pub use opening::OpenedBtls;

use crate::param::{ParamError, ParamStore, ValueError};
use discovery::{scan, search_path, ComponentFilter, Scan};
use loader::Root;
use services::{ComponentParams, ComponentServices};

/// The frameworks this host knows, and how each selects.
pub const FRAMEWORKS: [Framework; 2] = [Framework::Btl, Framework::Memheap];

/// A component framework.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Framework {
    /// Byte transfer layers: select-many.
    Btl,
    /// Symmetric-heap allocators: select-one.
    Memheap,
}

impl Framework {
    /// Name as used in file names and parameters.
    pub fn name(self) -> &'static str {
        match self {
            Self::Btl => "btl",
            Self::Memheap => "memheap",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        FRAMEWORKS.into_iter().find(|f| f.name() == name)
    }
}

impl fmt::Display for Framework {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a component comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Compiled into the host.
    BuiltIn,
    /// A plugin file.
    File(PathBuf),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BuiltIn => f.write_str("built-in"),
            Self::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// What became of a component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Loaded and usable, with its priority.
    Available {
        /// Larger is preferred.
        priority: u32,
    },
    /// Loaded, but it declined (or its `query` failed), with the reason.
    Unavailable {
        /// Why.
        reason: String,
    },
    /// The file could not be used.
    NotLoaded(LoadError),
    /// Left out by the framework's include/exclude list; never opened.
    Excluded {
        /// The list parameter that excluded it.
        by: String,
    },
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Available { priority } => write!(f, "available (priority {priority})"),
            Self::Unavailable { reason } => write!(f, "unavailable: {reason}"),
            Self::NotLoaded(e) => write!(f, "not loaded: {e}"),
            Self::Excluded { by } => write!(f, "excluded by parameter {by}"),
        }
    }
}

/// One component this process saw.
#[derive(Debug, Clone)]
pub struct Component {
    framework: Framework,
    name: String,
    origin: Origin,
    version: Option<ComponentVersion>,
    status: Status,
    note: Option<String>,
    selected: bool,
    root: Option<Root>,
}

impl Component {
    /// What the component said beside its availability, if anything.
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }
    /// Its framework (for files with an unknown framework: the framework
    /// part of the file name is in [`LoadError::UnknownFramework`]).
    pub fn framework(&self) -> Framework {
        self.framework
    }
    /// Component name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Built-in or file.
    pub fn origin(&self) -> &Origin {
        &self.origin
    }
    /// Version, once loaded.
    pub fn version(&self) -> Option<ComponentVersion> {
        self.version
    }
    /// What became of it.
    pub fn status(&self) -> &Status {
        &self.status
    }
    /// Whether its framework selected it.
    pub fn is_selected(&self) -> bool {
        self.selected
    }
    /// Priority when available.
    pub fn priority(&self) -> Option<u32> {
        match self.status {
            Status::Available { priority } => Some(priority),
            _ => None,
        }
    }
}

/// A job-level problem found during discovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiscoveryError {
    /// A parameter value is invalid.
    Param(ParamError),
    /// An include/exclude list is malformed.
    Filter(FilterError),
    /// A component named in an include list was not found.
    RequiredMissing {
        /// Its framework.
        framework: Framework,
        /// Its name.
        name: String,
    },
    /// A component named in an include list is not usable.
    RequiredUnusable {
        /// Its framework.
        framework: Framework,
        /// Its name.
        name: String,
        /// Its status.
        status: String,
    },
}

impl fmt::Display for DiscoveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Param(e) => e.fmt(f),
            Self::Filter(e) => e.fmt(f),
            Self::RequiredMissing { framework, name } => write!(
                f,
                "{framework} component {name:?} was requested but not found on the search path"
            ),
            Self::RequiredUnusable {
                framework,
                name,
                status,
            } => write!(
                f,
                "{framework} component {name:?} was requested but is {status}"
            ),
        }
    }
}

impl std::error::Error for DiscoveryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Param(e) => Some(e),
            Self::Filter(e) => Some(e),
            _ => None,
        }
    }
}

/// Why a selected component could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenError {
    /// No component of the framework is selected.
    NothingSelected(Framework),
    /// The component is not available.
    NotAvailable(String),
    /// The component's `open` failed.
    Failed {
        /// Component name.
        name: String,
        /// The component's error.
        error: PluginError,
    },
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NothingSelected(fw) => write!(f, "no {fw} component is available"),
            Self::NotAvailable(n) => write!(f, "component {n:?} is not available"),
            Self::Failed { name, error } => write!(f, "opening {name:?} failed: {error}"),
        }
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Failed { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Inputs of discovery.
#[derive(Debug, Clone)]
pub struct Options {
    /// `--param name=value` assignments.
    pub command_line: Vec<(String, String)>,
    /// Environment to resolve parameters against; `None` reads this
    /// process's.
    pub environment: Option<Vec<(String, String)>>,
    /// This process's place in the job.
    pub job: JobInfo,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            command_line: Vec::new(),
            environment: None,
            job: JobInfo {
                rank: 0,
                size: 1,
                local_rank: 0,
                local_size: 1,
                job_key: [0; JOB_KEY_LEN],
            },
        }
    }
}

type BuiltIn = (Framework, Root);

/// Built-in components, made once per process (building a root module
/// leaks it, as plugin roots are).
fn builtins() -> Vec<BuiltIn> {
    static BUILTINS: std::sync::OnceLock<Vec<BuiltIn>> = std::sync::OnceLock::new();
    BUILTINS
        .get_or_init(|| {
            vec![
                (
                    Framework::Btl,
                    Root::Btl(fireopal_abi::export::btl_component::<
                        crate::btl::self_btl::SelfComponent,
                    >()),
                ),
                (
                    Framework::Memheap,
                    Root::Memheap(fireopal_abi::export::memheap_component::<
                        crate::memheap::buddy::BuddyComponent,
                    >()),
                ),
            ]
        })
        .clone()
}

/// Every component this process can see, and what was selected.
#[derive(Debug)]
pub struct Registry {
    components: Vec<Component>,
    params: ParamStore,
    errors: Vec<DiscoveryError>,
    search_path: Vec<PathBuf>,
    skipped: Vec<Skipped>,
    services: ComponentServices,
}

fn param_prefix(framework: Framework, component: &str) -> String {
    format!("{}_{}_", framework.name(), component.replace('-', "_"))
}

fn root_name(root: &Root) -> (String, ComponentVersion) {
    match root {
        Root::Btl(r) => (r.name().to_string(), r.version()),
        Root::Memheap(r) => (r.name().to_string(), r.version()),
    }
}

impl Registry {
    /// Discovers, loads, queries and selects components. Never fails: see
    /// [`Registry::errors`] for job-level problems and each component's
    /// [`Status`] for its own.
    pub fn discover(options: &Options) -> Self {
        let mut params = match &options.environment {
            Some(env) => ParamStore::with_environment(options.command_line.clone(), env.clone()),
            None => ParamStore::new(options.command_line.clone()),
        };
        let mut errors = Vec::new();
        let framework_params = [
            ParamSpec::new(
                "plugin_path",
                ParamValue::Str("".into()),
                "colon-separated directories searched for plugins before the default places",
            ),
            ParamSpec::new(
                "btl",
                ParamValue::Str("".into()),
                "btl components to use: 'a,b' keeps only those, '^a,b' drops those",
            ),
            ParamSpec::new(
                "memheap",
                ParamValue::Str("".into()),
                "memheap components to consider: 'a,b' keeps only those, '^a,b' drops those",
            ),
            crate::memheap::size::symmetric_size_spec(),
            ParamSpec::new(
                "symmetric_base",
                ParamValue::Str("auto".into()),
                "address every process maps its symmetric heap at, so that addresses in it are the same job-wide: auto (0x600000000000 on 64-bit systems), a page-aligned hexadecimal address, or any (where the kernel chooses; only offsets are then symmetric). Where the range is taken the heap goes elsewhere",
            ),
            ParamSpec::new(
                "log_level",
                ParamValue::Str("warn".into()),
                "messages shown: error, warn, info or debug",
            ),
            ParamSpec::new(
                "bml_sendi",
                ParamValue::Str("fast".into()),
                "with several modules to a peer: fast tries the immediate send on the module whose turn it is, then a queued send there; fair tries it on every module first",
            ),
            ParamSpec::new(
                "bml_stripe_min",
                ParamValue::Size(128 << 10),
                "with several modules to a peer: smallest piece of a message striped over them in proportion to their bandwidth (a message under twice this goes whole on one); 0 stripes nothing",
            ),
            ParamSpec::new(
                "bml_replay_size",
                ParamValue::Size(0),
                "with several modules to a peer: most bytes of sent messages copied and kept per peer until it says they were delivered, so that the loss of one module's lane sends them again on the others (e.g. 64M; each message then costs a copy); a lane lost while a message it may have taken has no copy fails the peer; 0 (the default) keeps nothing",
            ),
            ParamSpec::new(
                "warn_unknown_params",
                ParamValue::Bool(true),
                "warn (on rank 0) about --param names and FIREOPAL_* variables that no loaded component has",
            ),
        ];
        for spec in framework_params
            .into_iter()
            .chain(crate::p2p::param_specs())
            .chain(crate::memory::param_specs())
            .chain(crate::shmem::param_specs())
        {
            if let Err(e) = params.register("fireopal", "", spec) {
                errors.push(DiscoveryError::Param(e));
            }
        }
        if let Err(e) = crate::memheap::size::check_symmetric_size(&mut params) {
            errors.push(DiscoveryError::Param(e));
        }
        // Words a parameter takes: another value is an error, and the
        // default holds.
        const CHOICES: [(&str, &[&str]); 1] = [("p2p_rendezvous", &["get", "pipeline"])];
        for (name, words) in CHOICES {
            let given = params.str_value(name).unwrap_or_default();
            if !words.contains(&given) {
                if let Some(e) = params.reject(name, ValueError::NotOneOf(words)) {
                    errors.push(DiscoveryError::Param(e));
                }
            }
        }
        let base = params.str_value("symmetric_base").unwrap_or("auto");
        if crate::memheap::parse_symmetric_base(base).is_err() {
            if let Some(e) = params.reject("symmetric_base", ValueError::NotAnAddress) {
                errors.push(DiscoveryError::Param(e));
            }
        }
        let log_level = match params.str_value("log_level").unwrap_or("warn") {
            "error" => LogLevel::Error,
            "info" => LogLevel::Info,
            "debug" => LogLevel::Debug,
            "warn" => LogLevel::Warn,
            other => {
                errors.push(DiscoveryError::Param(ParamError::BadValue {
                    name: "log_level".into(),
                    value: other.into(),
                    source: params
                        .get("log_level")
                        .map(|p| p.source.clone())
                        .unwrap_or(crate::param::Source::Default),
                    reason: ValueError::NotOneOf(&["error", "warn", "info", "debug"]),
                }));
                LogLevel::Warn
            }
        };
        let filters: Vec<(Framework, ComponentFilter)> = FRAMEWORKS
            .iter()
            .map(|&fw| {
                let text = params.str_value(fw.name()).unwrap_or("");
                let filter = ComponentFilter::parse(fw.name(), text).unwrap_or_else(|e| {
                    errors.push(DiscoveryError::Filter(e));
                    ComponentFilter::All
                });
                (fw, filter)
            })
            .collect();
        let filter_of = |fw: Framework| {
            filters
                .iter()
                .find(|(f, _)| *f == fw)
                .map(|(_, flt)| flt.clone())
                .unwrap_or_default()
        };

        let mut components: Vec<Component> = Vec::new();
        for (framework, root) in builtins() {
            let (name, version) = root_name(&root);
            let admitted = filter_of(framework).admits(&name);
            components.push(Component {
                framework,
                name,
                origin: Origin::BuiltIn,
                version: Some(version),
                note: None,
                status: if admitted {
                    Status::Unavailable {
                        reason: "not queried".into(),
                    }
                } else {
                    Status::Excluded {
                        by: framework.name().into(),
                    }
                },
                selected: false,
                root: admitted.then_some(root),
            });
        }

        // Scan and open headers; nothing is initialised yet.
        let search_path = search_path(params.str_value("plugin_path").unwrap_or(""));
        let mut opened = Vec::new();
        let Scan {
            candidates,
            skipped,
        } = scan(&search_path);
        for cand in candidates {
            let Some(framework) = Framework::from_name(&cand.framework) else {
                // Listed under a framework it does not belong to; keep the
                // file name's framework in the reason.
                components.push(Component {
                    framework: Framework::Btl,
                    name: cand.component.clone(),
                    origin: Origin::File(cand.path.clone()),
                    version: None,
                    status: Status::NotLoaded(LoadError::UnknownFramework(cand.framework.clone())),
                    note: None,
                    selected: false,
                    root: None,
                });
                continue;
            };
            let shadow = components
                .iter()
                .find(|c| {
                    c.framework == framework
                        && c.name == cand.component
                        && !matches!(c.status, Status::NotLoaded(LoadError::UnknownFramework(_)))
                })
                .map(|c| c.origin.to_string());
            let mut entry = Component {
                framework,
                name: cand.component.clone(),
                origin: Origin::File(cand.path.clone()),
                version: None,
                status: Status::Unavailable {
                    reason: "not queried".into(),
                },
                note: None,
                selected: false,
                root: None,
            };
            if let Some(by) = shadow {
                entry.status = Status::NotLoaded(LoadError::Shadowed(by));
            } else if !filter_of(framework).admits(&cand.component) {
                entry.status = Status::Excluded {
                    by: framework.name().into(),
                };
            } else {
                match loader::open_header(&cand.path) {
                    Ok(header) => opened.push((components.len(), header)),
                    Err(e) => entry.status = Status::NotLoaded(e),
                }
            }
            components.push(entry);
        }

        // Newest interface first: abi_stable's process-wide layout merge
        // depends on the order.
        opened.sort_by(|a, b| {
            let va = loader::header_version(a.1).map(|v| (v.major, v.minor, v.patch));
            let vb = loader::header_version(b.1).map(|v| (v.major, v.minor, v.patch));
            vb.cmp(&va).then(a.0.cmp(&b.0))
        });
        for (index, header) in opened {
            let Some(c) = components.get_mut(index) else {
                continue;
            };
            let Origin::File(path) = c.origin.clone() else {
                continue;
            };
            match loader::init_root(header, c.framework.name(), &path) {
                Ok(root) => {
                    let (inside, version) = root_name(&root);
                    if inside == c.name {
                        c.version = Some(version);
                        c.root = Some(root);
                    } else {
                        c.status = Status::NotLoaded(LoadError::NameMismatch {
                            file: c.name.clone(),
                            inside,
                        });
                    }
                }
                Err(e) => c.status = Status::NotLoaded(e),
            }
        }

        // Parameters of every loaded component, then one snapshot of the
        // resolved values for `query` and `open`.
        for c in components.iter_mut() {
            let Some(root) = c.root else { continue };
            let mut bad_values = Vec::new();
            let owner = format!("{} {}", c.framework, c.name);
            let mut registry = ComponentParams {
                store: &mut params,
                owner,
                prefix: param_prefix(c.framework, &c.name),
                bad_values: &mut bad_values,
            };
            let registry_to = ParamRegistry_TO::from_ptr(&mut registry, TD_Opaque);
            let result = match root {
                Root::Btl(r) => r.register_params()(registry_to),
                Root::Memheap(r) => r.register_params()(registry_to),
            };
            errors.extend(bad_values.into_iter().map(DiscoveryError::Param));
            if let RResult::RErr(e) = result {
                c.status = Status::NotLoaded(LoadError::Params(e));
                c.root = None;
            }
        }
        let services = ComponentServices::new(&params, options.job, log_level);
        for skip in &skipped {
            fireopal_abi::host::HostServices::log(
                &services,
                LogLevel::Debug,
                format!("plugin search: skipped {skip}").as_str().into(),
            );
        }

        for c in components.iter_mut() {
            let Some(root) = c.root else { continue };
            let host = HostServices_TO::from_ptr(
                abi_stable::std_types::RArc::new(
                    services.for_component(&format!("{} {}", c.framework, c.name)),
                ),
                TD_Opaque,
            );
            let answer = match root {
                Root::Btl(r) => r.query()(host),
                Root::Memheap(r) => r.query()(host),
            };
            c.status = match answer {
                RResult::ROk(Availability::Available { priority }) => {
                    Status::Available { priority }
                }
                RResult::ROk(Availability::AvailableWithNote { priority, note }) => {
                    c.note = Some(note.into_string());
                    Status::Available { priority }
                }
                RResult::ROk(Availability::Unavailable { reason }) => Status::Unavailable {
                    reason: reason.into_string(),
                },
                RResult::RErr(e) => Status::Unavailable {
                    reason: format!("query failed: {e}"),
                },
            };
        }

        // Selection.
        for fw in FRAMEWORKS {
            let mut best: Option<(usize, u32)> = None;
            for (i, c) in components.iter_mut().enumerate() {
                if c.framework != fw {
                    continue;
                }
                if let Some(p) = c.priority() {
                    match fw {
                        Framework::Btl => c.selected = true,
                        Framework::Memheap => {
                            if best.is_none_or(|(_, bp)| p > bp) {
                                best = Some((i, p));
                            }
                        }
                    }
                }
            }
            if let Some(c) = best.and_then(|(i, _)| components.get_mut(i)) {
                c.selected = true;
            }
            if let ComponentFilter::Include(names) = filter_of(fw) {
                for name in names {
                    let found = components.iter().find(|c| {
                        c.framework == fw
                            && c.name == name
                            && !matches!(c.status, Status::NotLoaded(LoadError::Shadowed(_)))
                    });
                    match found {
                        None => errors.push(DiscoveryError::RequiredMissing {
                            framework: fw,
                            name,
                        }),
                        Some(c) if c.priority().is_none() => {
                            errors.push(DiscoveryError::RequiredUnusable {
                                framework: fw,
                                name,
                                status: c.status.to_string(),
                            })
                        }
                        Some(_) => {}
                    }
                }
            }
        }

        // Every component has registered its parameters by now.
        let warn_unknown = matches!(
            params.value("warn_unknown_params"),
            Some(ParamValue::Bool(true))
        );
        if warn_unknown && options.job.rank == 0 {
            for setting in params.unknown_settings() {
                fireopal_abi::host::HostServices::log(
                    &services,
                    LogLevel::Warn,
                    setting.to_string().as_str().into(),
                );
            }
        }
        if options.job.rank == 0 {
            for line in opening::unavailable_by_params(&components, &params) {
                fireopal_abi::host::HostServices::log(
                    &services,
                    LogLevel::Warn,
                    line.as_str().into(),
                );
            }
        }

        Self {
            components,
            params,
            errors,
            search_path,
            skipped,
            services,
        }
    }

    /// Like [`Registry::discover`], but any job-level problem is an error:
    /// what a runtime calls at init.
    pub fn open(options: &Options) -> Result<Self, DiscoveryError> {
        let mut registry = Self::discover(options);
        if registry.errors.is_empty() {
            Ok(registry)
        } else {
            Err(registry.errors.swap_remove(0))
        }
    }

    /// Every component seen, built-ins first, then files in search order.
    pub fn components(&self) -> &[Component] {
        &self.components
    }

    /// Job-level problems.
    pub fn errors(&self) -> &[DiscoveryError] {
        &self.errors
    }

    /// Every registered parameter.
    pub fn params(&self) -> &ParamStore {
        &self.params
    }

    /// The directories that were searched, in order: the `plugin_path`
    /// entries, the running executable's directory, its parent (so cargo's
    /// `deps/` and `examples/` binaries find plugins in
    /// `target/<profile>/`), then `<prefix>/lib/fireopal` where the
    /// executable lives in `<prefix>/bin`.
    pub fn search_path(&self) -> &[PathBuf] {
        &self.search_path
    }

    /// Search-path directories that could not be listed, and entries
    /// named like plugins that were not opened, with the reason.
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }

    /// Selected BTL components, highest priority first.
    pub fn selected_btls(&self) -> Vec<&Component> {
        let mut v: Vec<&Component> = self
            .components
            .iter()
            .filter(|c| c.framework == Framework::Btl && c.selected)
            .collect();
        v.sort_by_key(|c| std::cmp::Reverse(c.priority()));
        v
    }

    /// The selected memheap component.
    pub fn selected_memheap(&self) -> Option<&Component> {
        self.components
            .iter()
            .find(|c| c.framework == Framework::Memheap && c.selected)
    }

    fn services_for(&self, c: &Component) -> fireopal_abi::host::HostServicesArc {
        HostServices_TO::from_ptr(
            abi_stable::std_types::RArc::new(
                self.services
                    .for_component(&format!("{} {}", c.framework, c.name)),
            ),
            TD_Opaque,
        )
    }

    /// Opens the BTL modules of an available component (one per device,
    /// interface or link).
    pub fn open_btl(&self, component: &Component) -> Result<Vec<BtlModuleBox>, OpenError> {
        let (Some(Root::Btl(root)), Some(_)) = (component.root, component.priority()) else {
            return Err(OpenError::NotAvailable(component.name.clone()));
        };
        open_with(component, root.open()(self.services_for(component))).map(RVec::into_vec)
    }

    /// Opens the selected memheap component's module.
    pub fn open_memheap(&self) -> Result<(&Component, MemheapModuleBox), OpenError> {
        let c = self
            .selected_memheap()
            .ok_or(OpenError::NothingSelected(Framework::Memheap))?;
        let Some(Root::Memheap(root)) = c.root else {
            return Err(OpenError::NotAvailable(c.name.clone()));
        };
        open_with(c, root.open()(self.services_for(c))).map(|m| (c, m))
    }
}

fn open_with<M>(c: &Component, result: RResult<M, PluginError>) -> Result<M, OpenError> {
    result.into_result().map_err(|error| OpenError::Failed {
        name: c.name.clone(),
        error,
    })
}
