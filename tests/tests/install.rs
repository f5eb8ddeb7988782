//! `scripts/install.sh`: the installed command finds the installed plugins
//! by itself (`<prefix>/lib/fireopal`, no `FIREOPAL_PLUGIN_PATH`), and a
//! job of the installed command moves messages over them.

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

#[test]
fn the_installed_command_finds_its_plugins_and_runs_a_job() {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let profile_dir = host.parent().expect("target/<profile>");
    let target_dir = profile_dir.parent().expect("target");
    let prefix = TempDir::new("install").unwrap_or_else(|e| panic!("{e}"));

    let mut install = Command::new("bash");
    install
        .arg(workspace_root().join("scripts").join("install.sh"))
        .arg("--prefix")
        .arg(prefix.path())
        .env("CARGO_TARGET_DIR", target_dir)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    if profile_dir.file_name().is_some_and(|n| n != "release") {
        install.arg("--debug");
    }
    let out = run_with_timeout(&mut install, Duration::from_secs(600));
    assert_eq!(out.code, Some(0), "install.sh failed\n{}", report(&out));

    let bin = prefix.path().join("bin").join("fireopal");
    let lib = prefix.path().join("lib").join("fireopal");
    let out = run_with_timeout(
        isolated(Command::new(&bin).arg("info")),
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(0), "{}", report(&out));
    for plugin in ["btl_shm", "btl_tcp", "memheap_ptmalloc"] {
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
