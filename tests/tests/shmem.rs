//! The one-sided suite of `fireopal-conformance` (`fireopal conformance
//! --shmem`) run as real jobs under `fireopal run`: over shared memory
//! (every node-local PE reached through a mapping), with half the PEs
//! going through the transports instead (one word updated by CPU atomics
//! through mappings, by the target's handler and by the target itself at
//! once), over tcp pinned to loopback, over two tcp links (striped RDMA),
//! and alone.

use std::process::Command;
use std::time::Duration;

use fireopal_tests::{host_binary, run_with_timeout, RunOutput};

/// Every case of the suite, in run order.
const CASES: [&str; 6] = [
    "heap",
    "put-get",
    "nonblocking",
    "atomics",
    "signal",
    "bad-arguments",
];

/// `fireopal run -n <ranks> [--param ...] -- fireopal conformance --shmem
/// [extra...]` with `FIREOPAL_BTL=<btl>`; checks that every rank passed
/// every case.
fn passes(btl: &str, ranks: u32, params: &[&str], extra: &[&str]) -> RunOutput {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = Command::new(&host);
    cmd.args(["run", "-n", &ranks.to_string()]);
    for p in params {
        cmd.args(["--param", p]);
    }
    cmd.arg("--")
        .arg(&host)
        .args(["conformance", "--shmem"])
        .args(extra);
    for (var, _) in std::env::vars() {
        if var.starts_with("FIREOPAL_") {
            cmd.env_remove(var);
        }
    }
    cmd.env("FIREOPAL_BTL", btl);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(300));
    let what = format!("--shmem {extra:?} with FIREOPAL_BTL={btl} on {ranks} ranks {params:?}");
    let report = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(!out.timed_out, "{what} timed out\n{report}");
    assert_eq!(out.code, Some(0), "{what} failed\n{report}");
    assert!(!out.stdout.contains("FAIL"), "{what}\n{report}");
    for rank in 0..ranks {
        for case in CASES {
            let passed = format!("rank {rank}: PASS {case} (");
            assert!(
                out.stdout.contains(&passed),
                "{what}: missing {passed:?}\n{report}"
            );
        }
        let summary = format!(
            "rank {rank}: {} passed, 0 failed, 0 not applicable\n",
            CASES.len()
        );
        assert!(
            out.stdout.contains(&summary),
            "{what}: missing {summary:?}\n{report}"
        );
    }
    out
}

/// The paths rank `rank` printed, as `Own, Mapped, ...`.
fn paths_of(out: &RunOutput, rank: u32) -> String {
    let prefix = format!("rank {rank}: paths to the PEs: ");
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| panic!("no paths of rank {rank}:\n{}", out.stdout))
        .to_owned()
}

#[test]
fn shared_memory_reaches_every_pe_through_a_mapping() {
    let out = passes("self,shm", 2, &[], &[]);
    assert_eq!(paths_of(&out, 0), "Own, Mapped");
    assert_eq!(paths_of(&out, 1), "Mapped, Own");
}

#[test]
fn mappings_handlers_and_local_atomics_on_one_word_lose_no_update() {
    let out = passes("self,shm", 4, &[], &["--mixed-paths"]);
    assert_eq!(paths_of(&out, 0), "Own, Mapped, Mapped, Mapped");
    assert_eq!(paths_of(&out, 1), "Remote, Own, Remote, Remote");
    assert_eq!(paths_of(&out, 3), "Remote, Remote, Remote, Own");
}

#[test]
fn tcp_on_loopback_goes_through_the_transport() {
    let out = passes("self,tcp", 3, &["btl_tcp_if_include=lo"], &[]);
    assert_eq!(paths_of(&out, 2), "Remote, Remote, Own");
}

#[test]
fn tcp_over_two_links_stripes_the_heap_s_rdma() {
    let out = passes(
        "self,tcp",
        2,
        &[
            "btl_tcp_if_include=lo",
            "btl_tcp_links=2",
            "bml_stripe_min=4k",
        ],
        &[],
    );
    assert_eq!(paths_of(&out, 0), "Own, Remote");
}

#[test]
fn one_pe_alone() {
    let out = passes("self", 1, &[], &[]);
    assert_eq!(paths_of(&out, 0), "Own");
}
