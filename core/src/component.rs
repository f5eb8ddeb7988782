//! Plain facts about components that host and plugins must agree on: how a
//! plugin file is named and which component names are valid.
//!
//! A plugin file is `libfireopal_<framework>_<component>.so`. The framework
//! and component names are short lowercase identifiers (`[a-z0-9]`, starting
//! with a letter; the component may also hold `-`), so that the file name
//! splits in exactly one way and can be matched against include/exclude
//! lists before the file is ever opened.

use core::fmt;

/// Prefix of every plugin file name.
pub const PLUGIN_FILE_PREFIX: &str = "libfireopal_";
/// Suffix of every plugin file name (ELF shared object).
pub const PLUGIN_FILE_SUFFIX: &str = ".so";
/// Longest framework or component name accepted.
pub const MAX_NAME_LEN: usize = 32;

/// Why a name is not a valid framework or component name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameError {
    /// The name is empty.
    Empty,
    /// The name is longer than [`MAX_NAME_LEN`].
    TooLong,
    /// The name does not start with a lowercase ASCII letter.
    BadFirstChar,
    /// The name holds a character outside `[a-z0-9-]` (`-` only in
    /// component names).
    BadChar(char),
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("name is empty"),
            Self::TooLong => write!(f, "name is longer than {MAX_NAME_LEN} characters"),
            Self::BadFirstChar => f.write_str("name must start with a lowercase letter"),
            Self::BadChar(c) => write!(f, "character {c:?} is not allowed in a name"),
        }
    }
}

impl core::error::Error for NameError {}

fn check_name(name: &str, allow_dash: bool) -> Result<(), NameError> {
    let mut chars = name.chars();
    let first = chars.next().ok_or(NameError::Empty)?;
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong);
    }
    if !first.is_ascii_lowercase() {
        return Err(NameError::BadFirstChar);
    }
    for c in chars {
        let ok = c.is_ascii_lowercase() || c.is_ascii_digit() || (allow_dash && c == '-');
        if !ok {
            return Err(NameError::BadChar(c));
        }
    }
    Ok(())
}

/// Checks a framework name (`btl`, `memheap`): `[a-z][a-z0-9]*`.
pub fn check_framework_name(name: &str) -> Result<(), NameError> {
    check_name(name, false)
}

/// Checks a component name (`tcp`, `shm`, `ptmalloc`): `[a-z][a-z0-9-]*`.
pub fn check_component_name(name: &str) -> Result<(), NameError> {
    check_name(name, true)
}

/// The framework and component a plugin file name announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PluginFileName<'a> {
    /// Framework part, e.g. `btl`.
    pub framework: &'a str,
    /// Component part, e.g. `tcp`.
    pub component: &'a str,
}

/// Splits `libfireopal_<framework>_<component>.so` into its parts.
///
/// Returns `None` for any other file name, including ones whose parts are
/// not valid names; such files are not plugins and are never opened.
///
/// ```
/// use fireopal_core::component::parse_plugin_file_name;
/// let p = parse_plugin_file_name("libfireopal_btl_tcp.so").unwrap();
/// assert_eq!((p.framework, p.component), ("btl", "tcp"));
/// assert!(parse_plugin_file_name("libfoo.so").is_none());
/// ```
pub fn parse_plugin_file_name(file_name: &str) -> Option<PluginFileName<'_>> {
    let stem = file_name
        .strip_prefix(PLUGIN_FILE_PREFIX)?
        .strip_suffix(PLUGIN_FILE_SUFFIX)?;
    let (framework, component) = stem.split_once('_')?;
    check_framework_name(framework).ok()?;
    check_component_name(component).ok()?;
    Some(PluginFileName {
        framework,
        component,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names() {
        let p = parse_plugin_file_name("libfireopal_memheap_ptmalloc.so").unwrap();
        assert_eq!(p.framework, "memheap");
        assert_eq!(p.component, "ptmalloc");
        let p = parse_plugin_file_name("libfireopal_btl_my-nic.so").unwrap();
        assert_eq!(p.component, "my-nic");
        for bad in [
            "libfireopal_btl.so",
            "libfireopal__tcp.so",
            "libfireopal_btl_.so",
            "libfireopal_btl_tcp.so.1",
            "libfireopal_btl_Tcp.so",
            "libfireopal_btl_tcp_x.so",
            "fireopal_btl_tcp.so",
            "libfireopal_btl_9tcp.so",
        ] {
            assert!(parse_plugin_file_name(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn name_errors() {
        assert_eq!(check_component_name(""), Err(NameError::Empty));
        assert_eq!(check_framework_name("a-b"), Err(NameError::BadChar('-')));
        assert_eq!(check_component_name("-a"), Err(NameError::BadFirstChar));
        let long = "a".repeat(MAX_NAME_LEN + 1);
        assert_eq!(check_component_name(&long), Err(NameError::TooLong));
    }
}
