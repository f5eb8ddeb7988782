//! `scripts/install.sh`: the installed command finds the installed plugins
//! by itself (`<prefix>/lib/fireopal`, no `FIREOPAL_PLUGIN_PATH`), and a
//! job of the installed command moves messages over them; the installed
//! files carry no debug info, or link to it split out.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fireopal_tests::{host_binary, run_with_timeout, workspace_root, RunOutput, TempDir};

fn report(out: &RunOutput) -> String {
    format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr)
}

/// `cmd` without the variables that would point it at other plugins.
fn isolated(cmd: &mut Command) -> &mut Command {
    cmd.env_remove("FIREOPAL_PLUGIN_PATH")
        .env_remove("FIREOPAL_BTL")
        .env_remove("FIREOPAL_MEMHEAP")
}

/// Runs `scripts/install.sh --prefix <prefix> <extra>` on the build of
/// this test's profile.
fn install(prefix: &Path, extra: &[&str]) {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let profile_dir = host.parent().expect("target/<profile>");
    let target_dir = profile_dir.parent().expect("target");
    let mut install = Command::new("bash");
    install
        .arg(workspace_root().join("scripts").join("install.sh"))
        .arg("--prefix")
        .arg(prefix)
        .args(extra)
        .env("CARGO_TARGET_DIR", target_dir)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    if profile_dir.file_name().is_some_and(|n| n != "release") {
        install.arg("--debug");
    }
    let out = run_with_timeout(&mut install, Duration::from_secs(600));
    assert_eq!(out.code, Some(0), "install.sh failed\n{}", report(&out));
}

/// The command and every plugin under `prefix`.
fn installed_files(prefix: &Path) -> Vec<PathBuf> {
    let lib = prefix.join("lib").join("fireopal");
    let mut files = vec![prefix.join("bin").join("fireopal")];
    for plugin in ["btl_shm", "btl_tcp", "btl_verbs", "memheap_ptmalloc"] {
        files.push(lib.join(format!("libfireopal_{plugin}.so")));
    }
    files
}

/// The ELF section names of `file`, from `readelf` (binutils, which
/// install.sh needs for objcopy anyway).
fn sections(file: &Path) -> Vec<String> {
    let out = Command::new("readelf")
        .args(["-S", "-W"])
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("readelf: {e}"));
    assert!(out.status.success(), "readelf -S {}", file.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with('.')))
        .map(str::to_owned)
        .collect()
}

/// Whether `sections` hold DWARF debug info (`.debug_gdb_scripts` is not:
/// a loaded section naming gdb's pretty-printers, which strip keeps).
fn has_dwarf(sections: &[String]) -> bool {
    sections
        .iter()
        .any(|n| [".debug_info", ".debug_line", ".debug_str"].contains(&n.as_str()))
}

#[test]
fn installed_files_carry_no_debug_info_or_link_to_it() {
    let stripped = TempDir::new("install-strip").unwrap_or_else(|e| panic!("{e}"));
    install(stripped.path(), &[]);
    for file in installed_files(stripped.path()) {
        let s = sections(&file);
        let what = format!("{}: {s:?}", file.display());
        assert!(s.iter().any(|n| n == ".symtab"), "{what}");
        assert!(!has_dwarf(&s), "{what}");
    }

    let split = TempDir::new("install-split").unwrap_or_else(|e| panic!("{e}"));
    install(split.path(), &["--split-debug"]);
    for file in installed_files(split.path()) {
        let s = sections(&file);
        let what = format!("{}: {s:?}", file.display());
        assert!(!has_dwarf(&s), "{what}");
        assert!(s.iter().any(|n| n == ".gnu_debuglink"), "{what}");
        let name = file.file_name().expect("a file name").to_string_lossy();
        let debug = file
            .parent()
            .expect("a directory")
            .join(".debug")
            .join(format!("{name}.debug"));
        let d = sections(&debug);
        assert!(has_dwarf(&d), "{}: {d:?}", debug.display());
    }
}

#[test]
fn the_installed_command_finds_its_plugins_and_runs_a_job() {
    let prefix = TempDir::new("install").unwrap_or_else(|e| panic!("{e}"));
    install(prefix.path(), &[]);

    let bin = prefix.path().join("bin").join("fireopal");
    let lib = prefix.path().join("lib").join("fireopal");
    let out = run_with_timeout(
        isolated(Command::new(&bin).arg("info")),
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(0), "{}", report(&out));
    for plugin in ["btl_shm", "btl_tcp", "btl_verbs", "memheap_ptmalloc"] {
        let file = lib.join(format!("libfireopal_{plugin}.so"));
        let from = format!("from {}", file.display());
        assert!(
            out.stdout.contains(&from),
            "{from:?} missing\n{}",
            report(&out)
        );
    }

    let job = run_with_timeout(
        isolated(
            Command::new(&bin)
                .args(["run", "-n", "2", "--"])
                .arg(&bin)
                .args(["conformance", "--btl", "shm", "--case", "sizes,many"]),
        ),
        Duration::from_secs(120),
    );
    assert_eq!(job.code, Some(0), "{}", report(&job));
    for rank in 0..2 {
        for case in ["sizes", "many"] {
            let line = format!("rank {rank}: PASS {case}");
            assert!(
                job.stdout.contains(&line),
                "{line:?} missing\n{}",
                report(&job)
            );
        }
    }
}
