//! Opening plugin files and checking them against this host's interface.
//!
//! Each file is opened with `lib_header_from_path` (never
//! `RootModule::load_from*`, which caches one module per type per process).
//! All headers are opened first, then root modules are initialised newest
//! interface version first: abi_stable merges type layouts process-wide and
//! the merge depends on the order. Every failure becomes a [`LoadError`]
//! value; libraries are never unloaded.

use std::fmt;
use std::path::Path;

use abi_stable::library::{lib_header_from_path, LibHeader, LibraryError};
use abi_stable::sabi_types::{ParseVersionError, VersionNumber};
use fireopal_abi::btl::BtlComponentRef;
use fireopal_abi::memheap::MemheapComponentRef;
use fireopal_abi::PluginError;

/// Why a plugin file could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// The file is not a loadable shared library.
    NotALibrary(String),
    /// A library the plugin depends on is missing.
    MissingDependency(String),
    /// The library exports no fireopal root module.
    NoRootModule,
    /// The file name's framework is not one this host knows.
    UnknownFramework(String),
    /// Built against an interface generation this host does not accept.
    IncompatibleVersion {
        /// Interface version the plugin was built against.
        plugin: String,
        /// Interface version of this host.
        host: String,
    },
    /// The plugin's interface types, or the abi_stable or C ABI beneath
    /// them, differ from this host's; for types, each difference abi_stable
    /// found, with this host's value and the plugin's.
    IncompatibleInterface(String),
    /// The component's name differs from the file name's.
    NameMismatch {
        /// Name from the file name.
        file: String,
        /// Name the component reports.
        inside: String,
    },
    /// The root-module initialiser failed or panicked.
    InitFailed(String),
    /// The plugin's interface version string does not parse.
    UnparsableVersion(ParseVersionError),
    /// The component could not register its parameters.
    Params(PluginError),
    /// The same framework and component was already found earlier on the
    /// search path (or is built in).
    Shadowed(String),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotALibrary(d) => write!(f, "not a loadable library: {d}"),
            Self::MissingDependency(d) => write!(f, "missing dependent library: {d}"),
            Self::NoRootModule => f.write_str("not a fireopal plugin: it exports no root module"),
            Self::UnknownFramework(fw) => write!(f, "unknown framework {fw:?}"),
            Self::IncompatibleVersion { plugin, host } => write!(
                f,
                "incompatible interface version: plugin built against fireopal-abi {plugin}, \
                 this host uses {host}; rebuild the plugin against fireopal-abi {host}"
            ),
            Self::IncompatibleInterface(detail) => write!(
                f,
                "incompatible interface: {detail}; rebuild the plugin against fireopal-abi {}",
                fireopal_abi::INTERFACE_VERSION
            ),
            Self::NameMismatch { file, inside } => write!(
                f,
                "component calls itself {inside:?} but the file name says {file:?}"
            ),
            Self::UnparsableVersion(e) => write!(
                f,
                "incompatible interface: unparsable version: {e}; rebuild the plugin against \
                 fireopal-abi {}",
                fireopal_abi::INTERFACE_VERSION
            ),
            Self::InitFailed(d) => write!(f, "root module failed to initialise: {d}"),
            Self::Params(d) => write!(f, "parameter registration failed: {d}"),
            Self::Shadowed(by) => write!(f, "shadowed by {by}"),
        }
    }
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::UnparsableVersion(e) => Some(e),
            Self::Params(e) => Some(e),
            _ => None,
        }
    }
}

/// A root module that passed every check.
#[derive(Clone, Copy)]
pub(crate) enum Root {
    Btl(BtlComponentRef),
    Memheap(MemheapComponentRef),
}

impl fmt::Debug for Root {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Btl(r) => write!(f, "Root::Btl({})", r.name()),
            Self::Memheap(r) => write!(f, "Root::Memheap({})", r.name()),
        }
    }
}

/// Opens `path` and reads its header without initialising anything.
pub(crate) fn open_header(path: &Path) -> Result<&'static LibHeader, LoadError> {
    lib_header_from_path(path).map_err(|e| classify(path, e))
}

/// Interface version a header announces (for newest-first ordering).
pub(crate) fn header_version(header: &LibHeader) -> Option<VersionNumber> {
    VersionNumber::new(header.version_strings()).ok()
}

/// Checks the header against this host's root-module type for `framework`
/// and initialises it.
pub(crate) fn init_root(
    header: &'static LibHeader,
    framework: &str,
    path: &Path,
) -> Result<Root, LoadError> {
    match framework {
        "btl" => header
            .init_root_module::<BtlComponentRef>()
            .map(Root::Btl)
            .map_err(|e| classify(path, e)),
        "memheap" => header
            .init_root_module::<MemheapComponentRef>()
            .map(Root::Memheap)
            .map_err(|e| classify(path, e)),
        other => Err(LoadError::UnknownFramework(other.to_owned())),
    }
}

/// abi_stable's wording of a difference, as this host words it:
/// abi_stable says "too many fields" whichever side has more.
fn reworded(what: &str) -> &str {
    match what {
        "too many fields" => "field counts differ",
        "too many variants" => "variant counts differ",
        other => other,
    }
}

/// The differences of abi_stable's layout report, which otherwise runs to
/// hundreds of lines of type dumps: each `Error:` line once, with its
/// short expected/found pair as this host's value and the plugin's
/// (abi_stable checks the host's layout, "expected", against the
/// plugin's, "found").
fn differences(report: &str) -> String {
    const SHORT: usize = 60;
    let lines: Vec<&str> = report.lines().map(str::trim).collect();
    let mut out: Vec<String> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(what) = line.strip_prefix("Error:") else {
            continue;
        };
        let mut entry = reworded(what.trim()).to_owned();
        if let [e, host, f, plugin, ..] = lines.get(i + 1..).unwrap_or(&[]) {
            if *e == "Expected:" && *f == "Found:" && host.len() <= SHORT && plugin.len() <= SHORT {
                entry.push_str(&format!(" (this host: {host}, the plugin: {plugin})"));
            }
        }
        if !out.contains(&entry) {
            out.push(entry);
        }
    }
    if out.is_empty() {
        lines
            .iter()
            .find(|l| !l.is_empty())
            .copied()
            .unwrap_or("")
            .to_owned()
    } else {
        out.join("; ")
    }
}

fn classify(path: &Path, err: LibraryError) -> LoadError {
    match err {
        LibraryError::OpenError { err, .. } => {
            let text = err.to_string();
            // dlopen names the file it could not find; when that file is not
            // the plugin itself, a dependency is missing.
            let own = path.to_string_lossy();
            if text.contains("cannot open shared object file") && !text.contains(own.as_ref()) {
                LoadError::MissingDependency(text)
            } else {
                LoadError::NotALibrary(text)
            }
        }
        LibraryError::GetSymbolError { .. } => LoadError::NoRootModule,
        LibraryError::ParseVersionError(e) => LoadError::UnparsableVersion(e),
        LibraryError::IncompatibleVersionNumber {
            expected_version,
            actual_version,
            ..
        } => LoadError::IncompatibleVersion {
            plugin: actual_version.to_string(),
            host: expected_version.to_string(),
        },
        LibraryError::AbiInstability(report) => LoadError::IncompatibleInterface(format!(
            "its fireopal-abi types differ from this host's: {}",
            differences(&report.to_string())
        )),
        LibraryError::InvalidAbiHeader(_) => LoadError::IncompatibleInterface(
            "built with an abi_stable incompatible with this host's".to_owned(),
        ),
        LibraryError::InvalidCAbi { .. } => LoadError::IncompatibleInterface(
            "built by a compiler with a different C ABI".to_owned(),
        ),
        LibraryError::RootModule { err, .. } => {
            LoadError::InitFailed(err.to_string().trim().to_owned())
        }
        other => LoadError::InitFailed(other.to_string().trim().to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of abi_stable's report for a module vtable with two
    /// methods fewer than this host's (type dumps shortened).
    const REPORT: &str = "Compared <this>:
    --- Type Layout ---
To <other>:
    --- Type Layout ---

1 error(s)inside:
    <other>

    field: vtable

Layout of expected type:
    (a hundred lines)


Error:too many fields
Expected:
    18
Found:
    16

Error:incompatible type size
Expected:
    144
Found:
    128
";

    #[test]
    fn differences_name_the_host_and_the_plugin_side() {
        assert_eq!(
            differences(REPORT),
            "field counts differ (this host: 18, the plugin: 16); \
             incompatible type size (this host: 144, the plugin: 128)"
        );
        assert_eq!(differences("one line\nand more"), "one line");
    }

    #[test]
    fn every_mismatch_says_what_to_rebuild_against() {
        let v = fireopal_abi::INTERFACE_VERSION;
        let hint = format!("; rebuild the plugin against fireopal-abi {v}");
        let older = LoadError::IncompatibleVersion {
            plugin: "0.0.9".into(),
            host: v.into(),
        };
        let newer = LoadError::IncompatibleVersion {
            plugin: "9.0.0".into(),
            host: v.into(),
        };
        let types = LoadError::IncompatibleInterface(format!(
            "its fireopal-abi types differ from this host's: {}",
            differences(REPORT)
        ));
        for e in [older, newer, types] {
            assert!(e.to_string().ends_with(&hint), "{e}");
        }
    }
}
