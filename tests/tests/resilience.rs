//! A transport that fails does not end the job: a component whose `open`
//! fails or panics is disabled, and a module whose `progress` fails or
//! panics is closed, its peers routed over the next transport. The
//! `faulty` fixture (tests/fixtures/btl-faulty) fails where its
//! parameters say; `failover_peer` (tests/src/bin) sends every message
//! before its first `progress` and sends again what a closed module
//! failed, so the outcome depends on counts, never on timing.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use fireopal_tests::{build_fixture, fixture_source, fixture_target_dir, host_binary, RunOutput};

const LIMIT: Duration = Duration::from_secs(120);
const MESSAGES: &str = "40";

/// A directory holding only the `faulty` plugin, built after the host.
fn plugin_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        host_binary().unwrap_or_else(|e| panic!("{e}"));
        let dir = fixture_target_dir()
            .join("dirs")
            .join(format!("faulty-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let (built, _guard) =
            build_fixture(&fixture_source("btl-faulty"), &[]).unwrap_or_else(|e| panic!("{e}"));
        std::fs::copy(
            built.join("libfixture_btl_faulty.so"),
            dir.join("libfireopal_btl_faulty.so"),
        )
        .unwrap_or_else(|e| panic!("copying the faulty plugin: {e}"));
        dir
    })
}

/// `fireopal run -n N --param ... -- failover_peer MESSAGES`, with the
/// faulty plugin on the path.
fn job(ranks: u32, params: &[&str]) -> RunOutput {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = Command::new(host);
    cmd.env("FIREOPAL_PLUGIN_PATH", plugin_dir())
        .env("RUST_BACKTRACE", "0")
        .env_remove("FIREOPAL_BTL")
        .args(["run", "-n", &ranks.to_string()]);
    for p in params {
        cmd.args(["--param", p]);
    }
    cmd.args(["--", env!("CARGO_BIN_EXE_failover_peer"), MESSAGES]);
    let out = fireopal_tests::run_with_timeout(&mut cmd, LIMIT);
    assert!(!out.timed_out, "job timed out:\n{}", out.stderr);
    out
}

fn lines_with<'a>(text: &'a str, needle: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.contains(needle)).collect()
}

fn assert_completed(out: &RunOutput, ranks: u32) {
    out.assert_success();
    let messages: u32 = MESSAGES.parse().unwrap_or(0);
    let want = format!("rank 0: received {}", messages * (ranks - 1));
    assert!(out.stdout.contains(&want), "{}", out.stdout);
}

#[test]
fn a_component_whose_open_fails_is_disabled_and_named_once() {
    for (mode, why) in [
        (
            "open-error",
            "open failed: i/o error: open of faulty failed on purpose",
        ),
        (
            "open-panic",
            "open failed: panicked: open of faulty exploded on purpose",
        ),
    ] {
        let out = job(2, &[&format!("btl_faulty_fail={mode}")]);
        assert_completed(&out, 2);
        assert!(
            out.stdout.contains("resent 0, peers now via shm"),
            "{}",
            out.stdout
        );
        // Rank 0 speaks for the job: rank 1 failed the same way.
        let named = lines_with(&out.stderr, "component \"faulty\" disabled");
        assert_eq!(named.len(), 1, "{mode}:\n{}", out.stderr);
        assert!(
            named[0].starts_with("fireopal[0] btl: warning:") && named[0].contains(why),
            "{mode}: {}",
            named[0]
        );
    }
}

#[test]
fn a_module_whose_progress_fails_is_closed_and_its_peers_go_over_shm() {
    for (mode, why) in [
        (
            "progress-panic",
            "panicked: progress of faulty exploded on purpose",
        ),
        (
            "progress-error",
            "i/o error: progress of faulty failed on purpose",
        ),
    ] {
        let ranks = 3;
        let out = job(
            ranks,
            &[&format!("btl_faulty_fail={mode}"), "btl_faulty_after=25"],
        );
        assert_completed(&out, ranks);
        // Every message went to the faulty module first (it claims every
        // peer and takes sends without delivering them): each failed with
        // the module's error and was sent again over shm.
        let held = MESSAGES.parse::<u32>().unwrap_or(0) * (ranks - 1);
        assert!(
            out.stdout
                .contains(&format!("resent {held}, peers now via shm")),
            "{}",
            out.stdout
        );
        let closed = lines_with(&out.stderr, "module faulty[0] closed: progress failed:");
        assert_eq!(closed.len(), ranks as usize, "{mode}:\n{}", out.stderr);
        for line in closed {
            assert!(
                line.contains(why)
                    && line.contains(&format!("{held} pending operations on it failed"))
                    && line.contains("2 peers rerouted, 0 left without a transport"),
                "{mode}: {line}"
            );
        }
        assert_eq!(
            lines_with(&out.stdout, "closed faulty[0]:").len(),
            ranks as usize,
            "{}",
            out.stdout
        );
    }
}

#[test]
fn a_component_named_by_the_include_list_that_fails_to_open_is_an_error() {
    let out = job(2, &["btl=self,shm,faulty", "btl_faulty_fail=open-panic"]);
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    assert!(
        out.stderr
            .contains("opening \"faulty\" failed: panicked: open of faulty exploded on purpose"),
        "{}",
        out.stderr
    );
}

#[test]
fn fireopal_info_shows_a_component_that_fails_to_open_as_unavailable() {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    for json in [false, true] {
        let mut cmd = Command::new(&host);
        cmd.env("FIREOPAL_PLUGIN_PATH", plugin_dir())
            .env("FIREOPAL_BTL_FAULTY_FAIL", "open-error")
            .env("RUST_BACKTRACE", "0")
            .env_remove("FIREOPAL_BTL")
            .arg("info");
        if json {
            cmd.arg("--json");
        }
        let out = fireopal_tests::run_with_timeout(&mut cmd, LIMIT);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let want = if json {
            "\"status\":\"unavailable\",\"priority\":null,\"reason\":\"open failed: i/o error: \
             open of faulty failed on purpose\""
        } else {
            "unavailable: open failed: i/o error: open of faulty failed on purpose"
        };
        assert!(out.stdout.contains(want), "{}", out.stdout);
    }
}
