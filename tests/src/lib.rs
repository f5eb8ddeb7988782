//! Shared helpers of the cross-crate tests: running jobs with a time
//! limit, building the out-of-tree fixtures, finding the host binary,
//! temporary directories.
//!
//! Fixtures are built with their own `cargo build` into
//! `target/fixtures`, after the host and test binaries were built, so a
//! test that loads them proves that a plugin built later is picked up
//! without rebuilding the host.

pub mod netns;
mod proc_tree;

use proc_tree::{descendants, signal};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};

/// Root of the fireopal workspace.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Where fixture builds go (shared, so abi_stable compiles once).
pub fn fixture_target_dir() -> PathBuf {
    workspace_root().join("target").join("fixtures")
}

/// The fixture sources under `tests/fixtures`.
pub fn fixture_source(name: &str) -> PathBuf {
    workspace_root().join("tests").join("fixtures").join(name)
}

/// The `fireopal` binary of the build that runs this test
/// (`target/<profile>/fireopal`), built first with the in-tree plugins if
/// missing or stale: cargo builds another package's binaries only for that
/// package's own tests.
pub fn host_binary() -> Result<PathBuf, String> {
    static HOST: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    HOST.get_or_init(|| {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        // target/<profile>/deps/<test> -> target/<profile>
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .ok_or("test binary has no profile directory")?;
        let target_dir = profile_dir.parent().ok_or("no target directory")?;
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        // Every library of the workspace too: the in-tree transport plugins
        // are cdylibs found next to the binaries.
        cmd.args([
            "build",
            "--quiet",
            "--workspace",
            "--lib",
            "--bin",
            "fireopal",
        ])
        .arg("--manifest-path")
        .arg(workspace_root().join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target_dir);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let out = cmd.output().map_err(|e| format!("cannot run cargo: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "building the fireopal binary failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let bin = profile_dir.join("fireopal");
        if bin.is_file() {
            Ok(bin)
        } else {
            Err(format!("{} is missing after the build", bin.display()))
        }
    })
    .clone()
}

// Fixture builds share one target directory and output file names.
static BUILD_LOCK: Mutex<()> = Mutex::new(());

/// `cargo <subcommand>` on the crate at `manifest_dir` with extra
/// environment variables, in the fixtures' target directory.
fn fixture_cargo(subcommand: &str, manifest_dir: &Path, envs: &[(&str, &str)]) -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    cmd.arg(subcommand)
        .arg("--manifest-path")
        .arg(manifest_dir.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", fixture_target_dir())
        // Variables of the outer cargo would leak into the fixture build.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET_DIR");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd
}

/// Runs `cargo build` on the crate at `manifest_dir` with extra
/// environment variables and returns `target/fixtures/debug`. Holds a
/// process-wide lock: callers copy what they need before releasing it
/// through the returned guard.
pub fn build_fixture(
    manifest_dir: &Path,
    envs: &[(&str, &str)],
) -> Result<(PathBuf, std::sync::MutexGuard<'static, ()>), String> {
    let guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let out = fixture_cargo("build", manifest_dir, envs)
        .arg("--quiet")
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "building {} failed:\n{}",
            manifest_dir.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok((fixture_target_dir().join("debug"), guard))
}

/// Runs `cargo test` on the crate at `manifest_dir` with extra environment
/// variables, as its author would, in the fixtures' target directory and
/// under the same lock as [`build_fixture`]; its output, passed or not.
pub fn test_fixture(manifest_dir: &Path, envs: &[(&str, &str)]) -> Result<Output, String> {
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    fixture_cargo("test", manifest_dir, envs)
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))
}

/// Compiles C source into a shared library with the system C compiler.
pub fn cc_shared(source: &str, output: &Path, link: &[&str]) -> Result<(), String> {
    let dir = output.parent().ok_or("output has no directory")?;
    let src = dir.join(format!(
        "{}.c",
        output.file_name().and_then(|n| n.to_str()).unwrap_or("lib")
    ));
    std::fs::write(&src, source).map_err(|e| e.to_string())?;
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(output)
        .arg(&src)
        .args(link)
        .output()
        .map_err(|e| format!("cannot run cc: {e}"))?;
    let _ = std::fs::remove_file(&src);
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "cc failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A directory removed when dropped.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates a fresh directory named after `tag` under the workspace's
    /// `target/tmp`.
    pub fn new(tag: &str) -> Result<Self, String> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = workspace_root()
            .join("target")
            .join("tmp")
            .join(format!("{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Self(dir))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Copies a directory tree (sources only: `target/` is skipped).
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == "target" {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            copy_tree(&path, &to.join(&name))?;
        } else {
            std::fs::copy(&path, to.join(&name))?;
        }
    }
    Ok(())
}

/// Replaces exactly one occurrence of `from` in the file at `path`; more
/// or fewer is an error, so a fixture patch never silently stops applying.
pub fn patch_once(path: &Path, from: &str, to: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let count = text.matches(from).count();
    if count != 1 {
        return Err(format!(
            "{}: expected one occurrence of {from:?}, found {count}",
            path.display()
        ));
    }
    std::fs::write(path, text.replacen(from, to, 1)).map_err(|e| e.to_string())
}

/// What a bounded run of a command produced.
#[derive(Debug)]
pub struct RunOutput {
    /// Exit code, `None` if killed by a signal.
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
    /// Whether the time limit was hit (and the process tree killed).
    pub timed_out: bool,
}

impl RunOutput {
    /// Panics, showing both streams, unless the command exited with 0.
    #[track_caller]
    pub fn assert_success(&self) {
        assert_eq!(
            self.code,
            Some(0),
            "stdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
    }
}

/// Runs `cmd` with a time limit. On expiry the command and every process
/// below it get SIGTERM, then SIGKILL, and are reaped, so a hung job never
/// outlives the test.
pub fn run_with_timeout(cmd: &mut Command, limit: std::time::Duration) -> RunOutput {
    use std::io::Read;
    use std::process::Stdio;
    use std::time::Instant;
    let mut child = match cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            return RunOutput {
                code: None,
                stdout: String::new(),
                stderr: format!("spawn failed: {e}"),
                timed_out: false,
            }
        }
    };
    let reader = |stream: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = stream {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if start.elapsed() > limit => {
                timed_out = true;
                let tree = descendants(child.id());
                signal(child.id(), libc::SIGTERM);
                std::thread::sleep(std::time::Duration::from_secs(3));
                for pid in tree.iter().chain(std::iter::once(&child.id())) {
                    signal(*pid, libc::SIGKILL);
                }
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(20)),
            Err(_) => break None,
        }
    };
    RunOutput {
        code: status.and_then(|s| s.code()),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        timed_out,
    }
}
