//! The one-sided suite of `fireopal-conformance` (`fireopal conformance
//! --shmem`) run as real jobs under `fireopal run`: over shared memory
//! (every node-local PE reached through a mapping), with half the PEs
//! going through the transports instead (one word updated by CPU atomics
//! through mappings, by the target's handler and by the target itself at
//! once), over tcp pinned to loopback (with RDMA, and with the data in
//! messages the target copies), over two tcp links (striped RDMA), on
//! eight PEs over each transport, alone, and with one PE's heap elsewhere
//! than the others'; and what `fireopal info` tells of the one-sided
//! layer in a job. (Two nodes, shm inside and tcp across: `lanes.rs`.)

use std::process::Command;
use std::time::Duration;

use fireopal_tests::{host_binary, run_with_timeout, RunOutput};

/// Every case of the suite, in run order.
const CASES: [&str; 13] = [
    "heap",
    "heap-limits",
    "put-get",
    "nonblocking",
    "quiet",
    "fence",
    "atomics",
    "atomic-ops",
    "lock",
    "signal",
    "small-puts",
    "bad-arguments",
    "pe-death",
];

/// `fireopal run -n <ranks> [--param ...] -- <rank command>` with
/// `FIREOPAL_BTL=<btl>` and nothing else of the developer's settings.
fn job(btl: &str, ranks: u32, params: &[&str], rank_command: &[&str]) -> RunOutput {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = Command::new(&host);
    cmd.args(["run", "-n", &ranks.to_string()]);
    for p in params {
        cmd.args(["--param", p]);
    }
    cmd.arg("--").args(rank_command);
    for (var, _) in std::env::vars() {
        if var.starts_with("FIREOPAL_") {
            cmd.env_remove(var);
        }
    }
    cmd.env("FIREOPAL_BTL", btl);
    cmd.env("SHMEM_TEST_FIREOPAL", &host);
    run_with_timeout(&mut cmd, Duration::from_secs(300))
}

/// `fireopal run -n <ranks> [--param ...] -- fireopal conformance --shmem
/// [extra...]` with `FIREOPAL_BTL=<btl>`; checks that every rank passed
/// every case.
fn passes(btl: &str, ranks: u32, params: &[&str], extra: &[&str]) -> RunOutput {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let host = host.to_string_lossy();
    let mut command = vec![host.as_ref(), "conformance", "--shmem"];
    command.extend_from_slice(extra);
    let out = job(btl, ranks, params, &command);
    check_passed(&out, btl, ranks, params, extra);
    out
}

/// Every rank passed every case and said so in its summary.
fn check_passed(out: &RunOutput, btl: &str, ranks: u32, params: &[&str], extra: &[&str]) {
    let what = format!("--shmem {extra:?} with FIREOPAL_BTL={btl} on {ranks} ranks {params:?}");
    let report = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(!out.timed_out, "{what} timed out\n{report}");
    assert_eq!(out.code, Some(0), "{what} failed\n{report}");
    assert!(!out.stdout.contains("FAIL"), "{what}\n{report}");
    // The death case needs a job of two PEs or more.
    let na = usize::from(ranks < 2);
    for rank in 0..ranks {
        for case in CASES {
            let passed = format!("rank {rank}: PASS {case} (");
            let skipped = case == "pe-death" && na == 1;
            let na_line = format!("rank {rank}: N/A {case}: ");
            assert!(
                out.stdout.contains(&passed) || (skipped && out.stdout.contains(&na_line)),
                "{what}: missing {passed:?}\n{report}"
            );
        }
        let summary = format!(
            "rank {rank}: {} passed, 0 failed, {na} not applicable\n",
            CASES.len() - na
        );
        assert!(
            out.stdout.contains(&summary),
            "{what}: missing {summary:?}\n{report}"
        );
    }
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
fn tcp_without_rdma_moves_the_data_in_messages_the_target_copies() {
    for ranks in [2, 3] {
        let out = passes(
            "self,tcp",
            ranks,
            &["btl_tcp_if_include=lo", "shmem_rdma=false"],
            &[],
        );
        assert!(paths_of(&out, 0).ends_with("Remote"));
    }
}

#[test]
fn tcp_with_small_frames_moves_large_transfers_in_rdma_fragments() {
    // tcp's `rdma_pipeline_frag_size` is its largest send: the messenger
    // cuts 1 MiB puts and gets into 64 KiB operations.
    passes(
        "self,tcp",
        2,
        &[
            "btl_tcp_if_include=lo",
            "btl_tcp_eager_limit=16k",
            "btl_tcp_max_send_size=64k",
        ],
        &[],
    );
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
fn eight_pes_over_shared_memory() {
    let out = passes("self,shm", 8, &[], &[]);
    assert_eq!(
        paths_of(&out, 5),
        "Mapped, Mapped, Mapped, Mapped, Mapped, Own, Mapped, Mapped"
    );
}

#[test]
fn eight_pes_over_tcp() {
    let out = passes("self,tcp", 8, &["btl_tcp_if_include=lo"], &[]);
    assert_eq!(
        paths_of(&out, 7),
        "Remote, Remote, Remote, Remote, Remote, Remote, Remote, Own"
    );
}

#[test]
fn one_pe_alone() {
    let out = passes("self", 1, &[], &[]);
    assert_eq!(paths_of(&out, 0), "Own");
}

#[test]
fn a_heap_away_from_the_agreed_address_leaves_offsets_symmetric() {
    // PE 1 lets the kernel place its heap: addresses differ, offsets do
    // not, and every case still passes.
    let script = r#"[ "$PMI_RANK" = 1 ] && export FIREOPAL_SYMMETRIC_BASE=any
exec "$SHMEM_TEST_FIREOPAL" conformance --shmem"#;
    let out = job("self,shm", 2, &[], &["sh", "-c", script]);
    check_passed(&out, "self,shm", 2, &[], &["(PE 1 at any address)"]);
    for rank in 0..2 {
        let line = format!("rank {rank}: paths to the PEs: ");
        assert!(
            out.stdout
                .lines()
                .any(|l| l.starts_with(&line) && l.ends_with("symmetric addresses: false")),
            "{}",
            out.stdout
        );
    }
}

#[test]
fn info_in_a_job_shows_the_heap_and_the_path_to_every_pe() {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let out = job("self,shm", 2, &[], &[host.to_str().unwrap(), "info"]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    for rank in 0..2 {
        let head = format!(
            "one-sided layer of rank {rank}: symmetric heap at 0x600000000000, the agreed address on every PE"
        );
        assert!(out.stdout.contains(&head), "{}", out.stdout);
    }
    assert!(
        out.stdout.contains("  PE 0: mapped\n  PE 1: own\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("  PE 0: own\n  PE 1: mapped\n"),
        "{}",
        out.stdout
    );
}

#[test]
fn a_bad_symmetric_base_is_refused_naming_the_parameter() {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = Command::new(&host);
    cmd.args(["info", "--param", "symmetric_base=0x1001"]);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(60));
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    assert!(
        out.stderr
            .contains("parameter symmetric_base: invalid value \"0x1001\" from the command line"),
        "{}",
        out.stderr
    );
}
