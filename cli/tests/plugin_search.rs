//! What the plugin search passes over is reported, with the reason: in
//! `fireopal info`, in its `--json` output, in the debug log and through
//! `Registry::skipped`; files that do not claim to be plugins are not.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use fireopal::plugin::{Options, Registry, SkipReason};

const FIREOPAL: &str = env!("CARGO_BIN_EXE_fireopal");

/// A plugin directory holding one entry of every kind the search skips,
/// and a file that is no plugin at all; removed when dropped.
struct Fixture(PathBuf);

impl Fixture {
    fn new(tag: &str) -> Self {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("plugin-search-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("libfireopal_btl_dir.so")).expect("mkdir");
        for f in ["libfireopal_btl_.so", "libfireopal_pipe.so", "libother.so"] {
            std::fs::write(dir.join(f), b"").expect("write");
        }
        std::os::unix::fs::symlink(dir.join("gone"), dir.join("libfireopal_btl_ghost.so"))
            .expect("symlink");
        Self(dir)
    }

    /// The plugin path: the directory, then one that does not exist.
    fn plugin_path(&self) -> String {
        format!("{}:{}", self.0.display(), self.missing().display())
    }

    fn missing(&self) -> PathBuf {
        self.0.join("missing")
    }

    /// Each skipped entry as `info` prints it, in search order.
    fn expected_lines(&self) -> Vec<String> {
        let form = "not named libfireopal_<framework>_<component>.so";
        [
            (
                "libfireopal_btl_.so",
                format!("{form}: component part: name is empty"),
            ),
            (
                "libfireopal_btl_dir.so",
                "a directory, not a library".into(),
            ),
            (
                "libfireopal_btl_ghost.so",
                "symbolic link to a file that does not exist".into(),
            ),
            (
                "libfireopal_pipe.so",
                format!("{form}: no framework or no component part"),
            ),
        ]
        .into_iter()
        .map(|(name, why)| format!("{}: {why}", self.0.join(name).display()))
        .chain(std::iter::once(format!(
            "{}: no such directory",
            self.missing().display()
        )))
        .collect()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `fireopal info args...` with the fixture as plugin path and nothing
/// else of this environment's fireopal settings.
fn info(fixture: &Fixture, args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(FIREOPAL);
    cmd.arg("info").args(args).stdin(Stdio::null());
    for (k, _) in std::env::vars() {
        if k.starts_with("PMI_") || k.starts_with("FIREOPAL_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd
        .env("FIREOPAL_PLUGIN_PATH", fixture.plugin_path())
        .output()
        .expect("run fireopal info");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn info_lists_every_skipped_entry_with_its_reason() {
    let f = Fixture::new("text");
    let (code, out, err) = info(&f, &[]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let section = out
        .split("\nskipped:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no skipped section in\n{out}"));
    let listed: Vec<&str> = section
        .lines()
        .take_while(|l| !l.is_empty())
        .map(str::trim)
        .collect();
    // The executable's own directories may add entries of their own (a
    // missing <prefix>/lib/fireopal); the fixture's come first, in order.
    let expected = f.expected_lines();
    assert_eq!(
        listed.get(..expected.len()),
        Some(&expected.iter().map(String::as_str).collect::<Vec<_>>()[..]),
        "{out}"
    );
    assert!(!out.contains("libother.so"), "{out}");
}

#[test]
fn info_json_lists_every_skipped_entry_with_a_code() {
    let f = Fixture::new("json");
    let (code, out, err) = info(&f, &["--json"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let entry = |name: &str, code: &str| {
        format!(
            r#"{{"path":"{}","code":"{code}","reason":""#,
            f.0.join(name).display()
        )
    };
    for needle in [
        entry("libfireopal_btl_.so", "bad_component_name"),
        entry("libfireopal_btl_dir.so", "directory"),
        entry("libfireopal_btl_ghost.so", "dangling_symlink"),
        entry("libfireopal_pipe.so", "bad_name"),
        entry("missing", "no_such_directory"),
    ] {
        assert!(out.contains(&needle), "missing {needle} in {out}");
    }
    assert!(out.contains(r#""skipped":[{"path":"#), "{out}");
    assert!(!out.contains("libother.so"), "{out}");
}

#[test]
fn the_debug_log_names_every_skipped_entry() {
    let f = Fixture::new("log");
    let (code, out, err) = info(&f, &["--param", "log_level=debug"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    for line in f.expected_lines() {
        let logged = format!("debug: plugin search: skipped {line}");
        assert!(err.contains(&logged), "missing {logged:?} in\n{err}");
    }
    let (_, _, quiet) = info(&f, &[]);
    assert!(!quiet.contains("plugin search"), "{quiet}");
}

#[test]
fn the_registry_keeps_what_it_skipped() {
    let f = Fixture::new("api");
    let r = Registry::discover(&Options {
        environment: Some(vec![("FIREOPAL_PLUGIN_PATH".into(), f.plugin_path())]),
        ..Options::default()
    });
    let reasons: Vec<(&Path, &SkipReason)> = r
        .skipped()
        .iter()
        .map(|s| (s.path.as_path(), &s.reason))
        .collect();
    assert!(
        reasons.contains(&(f.missing().as_path(), &SkipReason::NoSuchDirectory)),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&(
            f.0.join("libfireopal_btl_ghost.so").as_path(),
            &SkipReason::DanglingSymlink
        )),
        "{reasons:?}"
    );
    // Nothing skipped is listed as a component.
    assert!(
        r.components()
            .iter()
            .all(|c| !c.name().is_empty() && c.name() != "ghost" && c.name() != "dir"),
        "{:?}",
        r.components()
    );
}
