//! Finding plugin files: the search path, file naming, and the
//! include/exclude lists that are applied before any file is opened.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use fireopal_core::component::{
    check_component_name, check_framework_name, parse_plugin_file_name, NameError,
    PLUGIN_FILE_PREFIX, PLUGIN_FILE_SUFFIX,
};

/// Directories searched for plugins, in order:
/// `plugin_path` entries (colon-separated, from `--param plugin_path=` or
/// `FIREOPAL_PLUGIN_PATH`), the running executable's directory, its parent
/// (so cargo's `deps/` and `examples/` binaries find plugins in
/// `target/<profile>/`), then `<prefix>/lib/fireopal` where the executable
/// lives in `<prefix>/bin`.
pub(crate) fn search_path(plugin_path: &str) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = plugin_path
        .split(':')
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect();
    if let Some(exe_dir) = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
    {
        dirs.push(exe_dir.clone());
        if let Some(parent) = exe_dir.parent() {
            dirs.push(parent.to_path_buf());
            dirs.push(parent.join("lib").join("fireopal"));
        }
    }
    // The same directory reached twice would shadow its own plugins.
    let mut seen = HashSet::new();
    dirs.retain(|d| seen.insert(std::fs::canonicalize(d).unwrap_or_else(|_| d.clone())));
    dirs
}

/// A file whose name announces a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Framework part of the name.
    pub(crate) framework: String,
    /// Component part of the name.
    pub(crate) component: String,
    /// Full path.
    pub(crate) path: PathBuf,
}

/// Why a search-path entry was passed over without being opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// A search-path directory that does not exist.
    NoSuchDirectory,
    /// A search-path entry that is not a directory.
    NotADirectory,
    /// A search-path directory that could not be listed.
    Unreadable(std::io::ErrorKind),
    /// Named like a plugin, but a symbolic link to nothing.
    DanglingSymlink,
    /// Named like a plugin, but a directory.
    Directory,
    /// Named like a plugin, but neither a file nor a directory (a FIFO, a
    /// socket, a device).
    NotAFile,
    /// `libfireopal_*.so`, but the name is not valid UTF-8.
    NameNotUtf8,
    /// `libfireopal_<x>.so` with no `_` between framework and component.
    NoComponent,
    /// The framework part of the name is not a valid framework name.
    BadFramework(NameError),
    /// The component part of the name is not a valid component name.
    BadComponent(NameError),
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const FORM: &str = "not named libfireopal_<framework>_<component>.so";
        match self {
            Self::NoSuchDirectory => f.write_str("no such directory"),
            Self::NotADirectory => f.write_str("not a directory"),
            Self::Unreadable(kind) => write!(f, "cannot list the directory: {kind}"),
            Self::DanglingSymlink => f.write_str("symbolic link to a file that does not exist"),
            Self::Directory => f.write_str("a directory, not a library"),
            Self::NotAFile => f.write_str("not a regular file"),
            Self::NameNotUtf8 => write!(f, "{FORM}: the name is not UTF-8"),
            Self::NoComponent => write!(f, "{FORM}: no framework or no component part"),
            Self::BadFramework(e) => write!(f, "{FORM}: framework part: {e}"),
            Self::BadComponent(e) => write!(f, "{FORM}: component part: {e}"),
        }
    }
}

impl std::error::Error for SkipReason {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::BadFramework(e) | Self::BadComponent(e) => Some(e),
            _ => None,
        }
    }
}

impl SkipReason {
    /// A stable snake_case code for machine-readable output.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NoSuchDirectory => "no_such_directory",
            Self::NotADirectory => "not_a_directory",
            Self::Unreadable(_) => "unreadable_directory",
            Self::DanglingSymlink => "dangling_symlink",
            Self::Directory => "directory",
            Self::NotAFile => "not_a_file",
            Self::NameNotUtf8 => "name_not_utf8",
            Self::NoComponent => "bad_name",
            Self::BadFramework(_) => "bad_framework_name",
            Self::BadComponent(_) => "bad_component_name",
        }
    }
}

/// A search-path directory, or an entry named like a plugin, that was
/// passed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The directory or file.
    pub path: PathBuf,
    /// Why.
    pub reason: SkipReason,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

/// What [`scan`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Scan {
    /// Plugin files, in search-path order and within a directory by name.
    pub(crate) candidates: Vec<Candidate>,
    /// Everything passed over, in the same order.
    pub(crate) skipped: Vec<Skipped>,
}

/// Why `name` (starting `libfireopal_`, ending `.so`) names no plugin.
fn name_problem(name: &str) -> SkipReason {
    let stem = name
        .strip_prefix(PLUGIN_FILE_PREFIX)
        .and_then(|n| n.strip_suffix(PLUGIN_FILE_SUFFIX))
        .unwrap_or(name);
    let Some((framework, component)) = stem.split_once('_') else {
        return SkipReason::NoComponent;
    };
    if let Err(e) = check_framework_name(framework) {
        return SkipReason::BadFramework(e);
    }
    match check_component_name(component) {
        Err(e) => SkipReason::BadComponent(e),
        // Both parts valid: the name parses, so this is never reached.
        Ok(()) => SkipReason::NoComponent,
    }
}

/// Whether a file name claims to be a plugin: `libfireopal_*.so`. Other
/// files (the host's own `.rlib`s and `.d` files next to the plugins in
/// a cargo target directory) are not plugins and pass unreported.
fn looks_like_plugin(name: &[u8]) -> bool {
    name.starts_with(PLUGIN_FILE_PREFIX.as_bytes()) && name.ends_with(PLUGIN_FILE_SUFFIX.as_bytes())
}

/// What kind of thing `path` is, when it is not a file that can be loaded.
fn not_loadable(path: &Path) -> Option<SkipReason> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => None,
        Ok(m) if m.is_dir() => Some(SkipReason::Directory),
        Ok(_) => Some(SkipReason::NotAFile),
        // A name that is listed but cannot be followed is a link to
        // nothing (or a loop of links).
        Err(_) => Some(SkipReason::DanglingSymlink),
    }
}

/// Lists the plugin files in `dirs`, in search-path order, and within a
/// directory in file-name order. Missing or unreadable directories, and
/// entries named `libfireopal_*.so` that are not loadable plugin files,
/// are reported in [`Scan::skipped`]; nothing is opened.
pub(crate) fn scan(dirs: &[PathBuf]) -> Scan {
    let mut out = Scan::default();
    for dir in dirs {
        let skip = |reason| Skipped {
            path: dir.clone(),
            reason,
        };
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => {
                out.skipped.push(skip(match e.kind() {
                    std::io::ErrorKind::NotFound => SkipReason::NoSuchDirectory,
                    std::io::ErrorKind::NotADirectory => SkipReason::NotADirectory,
                    kind => SkipReason::Unreadable(kind),
                }));
                continue;
            }
        };
        let mut names: Vec<(std::ffi::OsString, PathBuf)> = entries
            .filter_map(Result::ok)
            .map(|e| (e.file_name(), e.path()))
            .filter(|(name, _)| looks_like_plugin(name.as_encoded_bytes()))
            .collect();
        names.sort();
        for (name, path) in names {
            let Some(name) = name.to_str() else {
                out.skipped.push(Skipped {
                    path,
                    reason: SkipReason::NameNotUtf8,
                });
                continue;
            };
            match parse_plugin_file_name(name) {
                None => out.skipped.push(Skipped {
                    path,
                    reason: name_problem(name),
                }),
                Some(p) => match not_loadable(&path) {
                    Some(reason) => out.skipped.push(Skipped { path, reason }),
                    None => out.candidates.push(Candidate {
                        framework: p.framework.to_owned(),
                        component: p.component.to_owned(),
                        path,
                    }),
                },
            }
        }
    }
    out
}

/// Which components of a framework to use, from `FIREOPAL_<FRAMEWORK>`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum ComponentFilter {
    /// No list given: every component.
    #[default]
    All,
    /// `a,b`: only these; each must load.
    Include(Vec<String>),
    /// `^a,b`: all but these.
    Exclude(Vec<String>),
}

/// A malformed include/exclude list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    /// The parameter holding the list.
    pub param: String,
    /// The list as given.
    pub value: String,
    /// What is wrong with it.
    pub reason: FilterReason,
}

/// What is wrong with an include/exclude list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilterReason {
    /// A `^` other than the list's first character.
    MixedList,
    /// A listed name is not a valid component name.
    BadName {
        /// The name as listed.
        name: String,
        /// Why it is not valid.
        error: NameError,
    },
}

impl fmt::Display for FilterReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MixedList => {
                f.write_str("'^' may only start the list; a list either includes or excludes")
            }
            Self::BadName { name, error } => write!(f, "component name {name:?}: {error}"),
        }
    }
}

impl std::error::Error for FilterReason {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::BadName { error, .. } => Some(error),
            Self::MixedList => None,
        }
    }
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "parameter {}: invalid component list {:?}: {}",
            self.param, self.value, self.reason
        )
    }
}

impl std::error::Error for FilterError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.reason)
    }
}

impl ComponentFilter {
    /// Parses `a,b` (include) or `^a,b` (exclude). `^` may only lead the
    /// list; mixing included and excluded names is an error.
    pub(crate) fn parse(param: &str, value: &str) -> Result<Self, FilterError> {
        let err = |reason: FilterReason| FilterError {
            param: param.to_owned(),
            value: value.to_owned(),
            reason,
        };
        let text = value.trim();
        if text.is_empty() {
            return Ok(Self::All);
        }
        let (exclude, list) = match text.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let mut names = Vec::new();
        for raw in list.split(',') {
            let name = raw.trim();
            if name.starts_with('^') {
                return Err(err(FilterReason::MixedList));
            }
            check_component_name(name).map_err(|error| {
                err(FilterReason::BadName {
                    name: name.to_owned(),
                    error,
                })
            })?;
            if !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
        Ok(if exclude {
            Self::Exclude(names)
        } else {
            Self::Include(names)
        })
    }

    /// Whether component `name` passes the filter.
    pub(crate) fn admits(&self, name: &str) -> bool {
        match self {
            Self::All => true,
            Self::Include(list) => list.iter().any(|n| n == name),
            Self::Exclude(list) => !list.iter().any(|n| n == name),
        }
    }

    /// Whether `name` is explicitly asked for (its failure is fatal).
    pub(crate) fn requires(&self, name: &str) -> bool {
        matches!(self, Self::Include(list) if list.iter().any(|n| n == name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters() {
        assert_eq!(ComponentFilter::parse("btl", ""), Ok(ComponentFilter::All));
        let inc = ComponentFilter::parse("btl", "shm, tcp").unwrap();
        assert!(inc.admits("tcp") && !inc.admits("self") && inc.requires("shm"));
        let exc = ComponentFilter::parse("btl", "^tcp,verbs").unwrap();
        assert!(!exc.admits("tcp") && !exc.admits("verbs") && exc.admits("shm"));
        assert!(!exc.requires("shm"));
        for bad in ["a,^b", "^a,^b", "a,,b", "A", "^"] {
            let e = ComponentFilter::parse("btl", bad).unwrap_err();
            assert!(e.to_string().contains("parameter btl"), "{e}");
        }
        let mixed = ComponentFilter::parse("btl", "a,^b").unwrap_err();
        assert_eq!(mixed.reason, FilterReason::MixedList);
        let empty = ComponentFilter::parse("btl", "a,,b").unwrap_err();
        assert!(
            matches!(&empty.reason, FilterReason::BadName { name, .. } if name.is_empty()),
            "{empty:?}"
        );
        let chain = std::error::Error::source(&empty).and_then(std::error::Error::source);
        assert!(chain.is_some_and(|e| e.is::<NameError>()), "{empty:?}");
    }

    #[test]
    fn scan_orders_and_filters_names() {
        let dir = std::env::temp_dir().join(format!("fireopal-scan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in [
            "libfireopal_btl_b.so",
            "libfireopal_btl_a.so",
            "libother.so",
            "libfireopal_memheap_x.so",
        ] {
            std::fs::write(dir.join(f), b"").unwrap();
        }
        std::fs::create_dir_all(dir.join("libfireopal_btl_dir.so")).unwrap();
        let found = scan(&[dir.clone(), dir.join("missing")]);
        let names: Vec<_> = found
            .candidates
            .iter()
            .map(|c| format!("{}/{}", c.framework, c.component))
            .collect();
        assert_eq!(names, ["btl/a", "btl/b", "memheap/x"]);
        let skipped: Vec<_> = found.skipped.iter().map(|s| &s.reason).collect();
        assert_eq!(
            skipped,
            [&SkipReason::Directory, &SkipReason::NoSuchDirectory]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn scan_reports_every_entry_named_like_a_plugin_that_it_passes_over() {
        use std::os::unix::ffi::OsStrExt;
        let dir = std::env::temp_dir().join(format!("fireopal-skips-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for f in [
            "libfireopal_btl_.so",
            "libfireopal_pipe.so",
            "libfireopal__tcp.so",
            "libfireopal_BTL_x.so",
            "libfireopal_btl_ok.so",
            "libfireopal_btl_tcp.rlib",
            "libother.so",
        ] {
            std::fs::write(dir.join(f), b"").unwrap();
        }
        std::os::unix::fs::symlink(dir.join("nowhere"), dir.join("libfireopal_btl_ghost.so"))
            .unwrap();
        std::os::unix::fs::symlink(
            dir.join("libfireopal_btl_ok.so"),
            dir.join("libfireopal_btl_link.so"),
        )
        .unwrap();
        let latin1 = std::ffi::OsStr::from_bytes(b"libfireopal_btl_caf\xe9.so");
        std::fs::write(dir.join(latin1), b"").unwrap();
        let file = dir.join("libfireopal_btl_ok.so");

        let found = scan(&[dir.clone(), file.clone()]);
        let loaded: Vec<_> = found
            .candidates
            .iter()
            .map(|c| c.component.as_str())
            .collect();
        assert_eq!(loaded, ["link", "ok"]);
        let skipped: Vec<(String, String)> = found
            .skipped
            .iter()
            .map(|s| {
                let name = s.path.file_name().unwrap().to_string_lossy().into_owned();
                (name, s.reason.to_string())
            })
            .collect();
        let form = "not named libfireopal_<framework>_<component>.so";
        let expected = [
            (
                "libfireopal_BTL_x.so",
                format!("{form}: framework part: name must start with a lowercase letter"),
            ),
            (
                "libfireopal__tcp.so",
                format!("{form}: framework part: name is empty"),
            ),
            (
                "libfireopal_btl_.so",
                format!("{form}: component part: name is empty"),
            ),
            (
                "libfireopal_btl_caf\u{fffd}.so",
                format!("{form}: the name is not UTF-8"),
            ),
            (
                "libfireopal_btl_ghost.so",
                "symbolic link to a file that does not exist".to_owned(),
            ),
            (
                "libfireopal_pipe.so",
                format!("{form}: no framework or no component part"),
            ),
            ("libfireopal_btl_ok.so", "not a directory".to_owned()),
        ];
        let expected: Vec<(String, String)> = expected
            .into_iter()
            .map(|(n, r)| (n.to_owned(), r))
            .collect();
        // In search order, and by name (bytes) within the directory.
        assert_eq!(skipped, expected);
        assert_eq!(found.skipped.last().map(|s| &s.path), Some(&file));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
