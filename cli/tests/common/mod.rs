//! What the host's integration tests share: building the artifacts a test
//! runs (plugins, examples) when a narrower `cargo test` left them missing
//! or stale, with the cargo and profile that built the test.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

/// The `fireopal` binary this test was built with.
pub(crate) const FIREOPAL: &str = env!("CARGO_BIN_EXE_fireopal");

/// The profile directory (`target/debug` or `target/release`) holding the
/// `fireopal` binary.
pub(crate) fn profile_dir() -> PathBuf {
    Path::new(FIREOPAL)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The workspace root.
pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// Newest modification time of the files under `dir`.
fn newest_under(dir: &Path) -> Option<SystemTime> {
    let mut newest = None;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        let t = if p.is_dir() {
            newest_under(&p)
        } else {
            modified(&p)
        };
        newest = newest.max(t);
    }
    newest
}

/// `args` with `-p <package>` replaced by `--workspace`: a build of one
/// package resolves features for it alone, unlike the `cargo test` of the
/// workspace that built this test, and its plugin files (named without a
/// hash) would overwrite that build's and have it recompile them
/// (tests/tests/build_reuse.rs).
fn workspace_wide<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut out = vec!["--workspace"];
    let mut it = args.iter();
    while let Some(&arg) = it.next() {
        if arg == "-p" {
            it.next();
        } else {
            out.push(arg);
        }
    }
    out
}

/// Builds `output` with `cargo build <args>` unless it is newer than every
/// input (files, or directories taken by their newest file); returns it.
pub(crate) fn built(output: PathBuf, inputs: &[PathBuf], args: &[&str]) -> Result<PathBuf, String> {
    let newest_input = inputs
        .iter()
        .filter_map(|i| newest_under(i).or(modified(i)))
        .max();
    if modified(&output).is_some_and(|b| newest_input.is_none_or(|i| i <= b)) {
        return Ok(output);
    }
    let mut cargo = Command::new(env!("CARGO"));
    cargo.arg("build").args(workspace_wide(args));
    if profile_dir().file_name().is_some_and(|n| n == "release") {
        cargo.arg("--release");
    }
    let status = cargo
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() && output.exists() {
        Ok(output)
    } else {
        Err(format!(
            "cargo build {args:?} did not make {} ({status})",
            output.display()
        ))
    }
}

/// The host library's example `name` (`host/examples/<name>.rs`), in the
/// `examples` directory beside the `fireopal` binary, built when missing or
/// older than its source or the library (which the binary also links).
pub(crate) fn host_example(name: &str) -> Result<PathBuf, String> {
    let host = workspace().join("host");
    built(
        profile_dir().join("examples").join(name),
        &[
            PathBuf::from(FIREOPAL),
            host.join("src"),
            host.join("examples").join(format!("{name}.rs")),
        ],
        &["-p", "fireopal", "--example", name],
    )
}
