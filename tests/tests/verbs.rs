//! `fireopal info` on the verbs plugin where it cannot run: without an
//! RDMA device it declines with libibverbs's own answer, with the library
//! path pointing elsewhere (on the command line or in the environment) it
//! names the missing file, and loading it prints nothing on stderr.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fireopal_tests::{host_binary, run_with_timeout, RunOutput};

const LIMIT: Duration = Duration::from_secs(120);
const MISSING: &str = "/nonexistent/libibverbs.so.1";

fn info(env: &[(&str, &str)], args: &[&str]) -> RunOutput {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = Command::new(host);
    cmd.env_remove("FIREOPAL_BTL")
        .env_remove("FIREOPAL_BTL_VERBS_LIBRARY")
        .env_remove("FIREOPAL_BTL_VERBS_DEVICE")
        .envs(env.iter().copied())
        .arg("info")
        .args(args);
    let out = run_with_timeout(&mut cmd, LIMIT);
    assert!(!out.timed_out, "timed out: {args:?}\n{}", out.stderr);
    assert_eq!(out.code, Some(0), "{args:?}\n{}", out.stderr);
    out
}

/// The `btl verbs` line of `fireopal info`.
fn verbs_line(out: &RunOutput) -> String {
    out.stdout
        .lines()
        .find(|l| l.trim_start().starts_with("btl") && l.contains(" verbs "))
        .unwrap_or_else(|| panic!("no verbs line:\n{}", out.stdout))
        .to_owned()
}

#[test]
fn info_says_why_verbs_declines_without_a_device() {
    let out = info(&[], &[]);
    let line = verbs_line(&out);
    println!("{line}");
    assert!(
        !out.stderr.contains("verbs"),
        "loading the plugin wrote to stderr:\n{}",
        out.stderr
    );
    if Path::new("/sys/class/infiniband_verbs").exists() {
        eprintln!("this machine has verbs devices; the no-device reason is not checked");
        return;
    }
    assert!(
        line.contains("unavailable: no RDMA device: ibv_get_device_list: ")
            || line.contains("unavailable: libibverbs.so.1 not found: "),
        "{line}"
    );
}

#[test]
fn info_names_a_missing_library_from_the_command_line_or_the_environment() {
    let want = format!("unavailable: {MISSING} not found: ");
    let param = format!("btl_verbs_library={MISSING}");
    let out = info(&[], &["--param", &param]);
    let line = verbs_line(&out);
    println!("{line}");
    assert!(line.contains(&want), "{line}");
    let out = info(&[("FIREOPAL_BTL_VERBS_LIBRARY", MISSING)], &[]);
    let line = verbs_line(&out);
    assert!(line.contains(&want), "{line}");
}
