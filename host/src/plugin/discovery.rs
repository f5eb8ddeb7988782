//! Finding plugin files: the search path, file naming, and the
//! include/exclude lists that are applied before any file is opened.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use fireopal_core::component::{check_component_name, parse_plugin_file_name};

/// Directories searched for plugins, in order:
/// `plugin_path` entries (colon-separated, from `--param plugin_path=` or
/// `FIREOPAL_PLUGIN_PATH`), the running executable's directory, its parent
/// (so cargo's `deps/` and `examples/` binaries find plugins in
/// `target/<profile>/`), then `<prefix>/lib/fireopal` where the executable
/// lives in `<prefix>/bin`.
pub fn search_path(plugin_path: &str) -> Vec<PathBuf> {
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
pub struct Candidate {
    /// Framework part of the name.
    pub framework: String,
    /// Component part of the name.
    pub component: String,
    /// Full path.
    pub path: PathBuf,
}

/// Lists the plugin files in `dirs`, in search-path order, and within a
/// directory in file-name order. Unreadable or missing directories are
/// skipped: the search path names places that need not exist.
pub fn scan(dirs: &[PathBuf]) -> Vec<Candidate> {
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut names: Vec<(String, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
            .collect();
        names.sort();
        for (name, path) in names {
            if let Some(p) = parse_plugin_file_name(&name) {
                if path.is_file() {
                    out.push(Candidate {
                        framework: p.framework.to_owned(),
                        component: p.component.to_owned(),
                        path,
                    });
                }
            }
        }
    }
    out
}

/// Which components of a framework to use, from `FIREOPAL_<FRAMEWORK>`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ComponentFilter {
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
    pub reason: String,
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

impl std::error::Error for FilterError {}

impl ComponentFilter {
    /// Parses `a,b` (include) or `^a,b` (exclude). `^` may only lead the
    /// list; mixing included and excluded names is an error.
    pub fn parse(param: &str, value: &str) -> Result<Self, FilterError> {
        let err = |reason: String| FilterError {
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
                return Err(err(
                    "'^' may only start the list; a list either includes or excludes".into(),
                ));
            }
            check_component_name(name).map_err(|e| err(format!("component name {name:?}: {e}")))?;
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
    pub fn admits(&self, name: &str) -> bool {
        match self {
            Self::All => true,
            Self::Include(list) => list.iter().any(|n| n == name),
            Self::Exclude(list) => !list.iter().any(|n| n == name),
        }
    }

    /// Whether `name` is explicitly asked for (its failure is fatal).
    pub fn requires(&self, name: &str) -> bool {
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
            .iter()
            .map(|c| format!("{}/{}", c.framework, c.component))
            .collect();
        assert_eq!(names, ["btl/a", "btl/b", "memheap/x"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
