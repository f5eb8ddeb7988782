//! The messenger suite of `fireopal-conformance` (run by `fireopal
//! conformance`) against every BTL and heap allocator, each run as a real
//! job under `fireopal run`. Adding a transport is
//! one line below. The suite also passes an out-of-tree transport built
//! after the host, and fails a broken one.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fireopal_tests::{
    build_fixture, fixture_source, host_binary, run_with_timeout, test_fixture, RunOutput, TempDir,
};

const CASES: [&str; 10] = [
    "sizes",
    "many",
    "completions",
    "sendi",
    "rdma",
    "reregistration",
    "unmapped-get",
    "in-place",
    "symmetric-heap",
    "peer-death",
];

/// `fireopal run -n <ranks> -- fireopal conformance --btl <btl>`, with
/// extra environment.
fn run_suite(btl: &str, ranks: u32, envs: &[(&str, &Path)]) -> RunOutput {
    run_subject("--btl", btl, ranks, envs)
}

/// `fireopal run -n <ranks> -- fireopal conformance <flag> <name>`.
fn run_subject(flag: &str, name: &str, ranks: u32, envs: &[(&str, &Path)]) -> RunOutput {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = Command::new(&host);
    cmd.args(["run", "-n", &ranks.to_string(), "--"])
        .arg(&host)
        .args(["conformance", flag, name]);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    run_with_timeout(&mut cmd, Duration::from_secs(300))
}

/// Messages per lane from the `many` case's notes, per rank.
fn lane_counts(stdout: &str) -> Vec<Vec<u64>> {
    stdout
        .lines()
        .filter_map(|l| l.split_once(": note many: lanes "))
        .map(|(_, lanes)| {
            lanes
                .split(", ")
                .filter_map(|lane| lane.rsplit_once(' ')?.1.parse().ok())
                .collect()
        })
        .collect()
}

/// Several tcp links to each peer: the suite passes (the `sizes` and
/// `many` cases check the order of mixed sizes and of 10^5 small
/// messages), with both `bml_sendi` policies. FAST hands each message to
/// the module whose turn it is, so the lanes carry the same count to
/// within one; FAIR may move a message to the next lane whose immediate
/// send has room, and every lane still carries messages.
#[test]
fn tcp_over_two_and_four_links_in_order_with_both_sendi_policies() {
    let lo = Path::new("lo");
    for (links, policy) in [("2", "fast"), ("4", "fast"), ("2", "fair"), ("4", "fair")] {
        let envs = [
            ("FIREOPAL_BTL_TCP_IF_INCLUDE", lo),
            ("FIREOPAL_BTL_TCP_LINKS", Path::new(links)),
            ("FIREOPAL_BML_SENDI", Path::new(policy)),
        ];
        let out = run_suite("tcp", 2, &envs);
        let what = format!("tcp, {links} links, {policy}");
        assert_passed(&out, &what, 2);
        let counts = lane_counts(&out.stdout);
        assert_eq!(
            counts.len(),
            2,
            "{what}: a lane note per rank\n{}",
            out.stdout
        );
        for lanes in counts {
            assert_eq!(lanes.len().to_string(), links, "{what}: {lanes:?}");
            let (min, max) = (lanes.iter().min(), lanes.iter().max());
            assert!(
                min.is_some_and(|&m| m > 0),
                "{what}: an idle lane: {lanes:?}"
            );
            if policy == "fast" {
                assert!(
                    max.zip(min).is_some_and(|(a, b)| a - b <= 1),
                    "{what}: not round robin: {lanes:?}"
                );
            }
        }
    }
}

/// The reregistration case catches a cache that keeps registrations of
/// memory nobody watches: with the monitor off and registrations left
/// cached anyway, memory mapped again at the same address is served the
/// old registration, and the case fails on every transport with RDMA.
#[test]
fn reregistration_fails_when_unwatched_registrations_stay_cached() {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    for btl in ["shm", "tcp"] {
        let mut cmd = Command::new(&host);
        cmd.args(["run", "-n", "2", "--"])
            .arg(&host)
            .args(["conformance", "--btl", btl, "--case", "reregistration"])
            .env("FIREOPAL_MEMORY_MONITOR", "none")
            .env("FIREOPAL_RCACHE_LEAVE_PINNED", "always");
        let out = run_with_timeout(&mut cmd, Duration::from_secs(300));
        let report = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
        assert!(!out.timed_out, "{btl} timed out\n{report}");
        assert_ne!(
            out.code,
            Some(0),
            "{btl} passed without a monitor\n{report}"
        );
        assert!(
            out.stdout.contains(
                "FAIL reregistration: the cache served the registration of the unmapped memory"
            ),
            "{btl}: {report}"
        );
        // The point-to-point suite's case: a rendezvous sent again from the
        // memory mapped again.
        let mut cmd = Command::new(&host);
        cmd.args(["run", "-n", "2", "--"])
            .arg(&host)
            .args(["conformance", "--p2p", "--case", "reregistration"])
            .env("FIREOPAL_BTL", format!("self,{btl}"))
            .env("FIREOPAL_MEMORY_MONITOR", "none")
            .env("FIREOPAL_RCACHE_LEAVE_PINNED", "always");
        let out = run_with_timeout(&mut cmd, Duration::from_secs(300));
        let report = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
        assert!(!out.timed_out, "{btl} timed out\n{report}");
        assert_ne!(
            out.code,
            Some(0),
            "{btl} passed without a monitor\n{report}"
        );
        assert!(
            out.stdout.contains(
                "FAIL reregistration: the send from memory mapped again was served the \
                 registration of the unmapped memory"
            ),
            "{btl}: {report}"
        );
    }
}

/// The job ended by itself, with success, and every rank passed every case.
fn assert_passed(out: &RunOutput, what: &str, ranks: u32) {
    assert_passed_cases(out, what, ranks, &CASES);
}

/// As [`assert_passed`], for the cases `cases`: each passed, or does not
/// apply to the component, and each rank's summary counts them.
fn assert_passed_cases(out: &RunOutput, what: &str, ranks: u32, cases: &[&str]) {
    let report = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(!out.timed_out, "{what} timed out\n{report}");
    assert_eq!(out.code, Some(0), "{what} failed\n{report}");
    assert!(!out.stdout.contains("FAIL"), "{report}");
    // The peer death a case causes on purpose is a warning on every
    // transport, never an error.
    assert!(!out.stderr.contains(": error:"), "{report}");
    for rank in 0..ranks {
        let mut not_applicable = 0;
        for case in cases {
            let passed = format!("rank {rank}: PASS {case}");
            let na = format!("rank {rank}: N/A {case}:");
            not_applicable += usize::from(out.stdout.contains(&na));
            assert!(
                out.stdout.contains(&passed) || out.stdout.contains(&na),
                "missing {passed:?}\n{report}"
            );
        }
        let summary = format!(
            "rank {rank}: {} passed, 0 failed, {not_applicable} not applicable\n",
            cases.len() - not_applicable
        );
        assert!(
            out.stdout.contains(&summary),
            "missing {summary:?}\n{report}"
        );
    }
}

fn conformance(btl: &str, ranks: u32) {
    let out = run_suite(btl, ranks, &[]);
    assert_passed(&out, &format!("{btl} with {ranks} ranks"), ranks);
}

macro_rules! transports {
    ($($name:ident: $btl:literal with $ranks:literal ranks;)*) => {
        $(
            #[test]
            fn $name() {
                conformance($btl, $ranks);
            }
        )*
    };
}

transports! {
    self_one_rank: "self" with 1 ranks;
    tcp_two_ranks: "tcp" with 2 ranks;
    tcp_four_ranks: "tcp" with 4 ranks;
    shm_two_ranks: "shm" with 2 ranks;
    shm_four_ranks: "shm" with 4 ranks;
    shm_eight_ranks: "shm" with 8 ranks;
}

/// tcp between two "hosts": each rank in its own network namespace, joined
/// by a veth pair the test creates (and removes). Skipped, saying why,
/// where namespaces cannot be made.
#[test]
fn tcp_between_two_network_namespaces() {
    let pair = match fireopal_tests::netns::VethPair::create() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("skipped: cannot create network namespaces here: {why}");
            return;
        }
    };
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    // Each rank enters the namespace named after its rank; the PMI socket
    // is inherited through `ip netns exec`.
    let out = run_with_timeout(
        Command::new(&host)
            .args(["run", "-n", "2", "--param", "btl_tcp_if_exclude=lo", "--"])
            .args([
                "sh",
                "-c",
                r#"exec ip netns exec "$FO_NETNS$PMI_RANK" "$0" "$@""#,
            ])
            .arg(&host)
            .args(["conformance", "--btl", "tcp"])
            .env("FO_NETNS", pair.prefix()),
        Duration::from_secs(300),
    );
    assert_passed(&out, "tcp between two namespaces", 2);
}

/// Builds an out-of-tree fixture (after the host, as a vendor builds a
/// plugin) with `envs`, and installs its library `built` as `installed` in
/// a fresh plugin directory named after `tag`.
fn vendor_build(
    fixture: &str,
    built: &str,
    installed: &str,
    tag: &str,
    envs: &[(&str, &str)],
) -> TempDir {
    host_binary().unwrap_or_else(|e| panic!("{e}"));
    let dir = TempDir::new(tag).unwrap_or_else(|e| panic!("{e}"));
    let (out, _guard) =
        build_fixture(&fixture_source(fixture), envs).unwrap_or_else(|e| panic!("{e}"));
    std::fs::copy(out.join(built), dir.path().join(installed))
        .unwrap_or_else(|e| panic!("installing the fixture: {e}"));
    dir
}

/// The `loop` transport fixture, installed as `libfireopal_btl_loop.so`.
fn vendor_plugin(tag: &str, envs: &[(&str, &str)]) -> TempDir {
    vendor_build(
        "btl-loop",
        "libfixture_btl_loop.so",
        "libfireopal_btl_loop.so",
        tag,
        envs,
    )
}

/// The job ended by itself, non-zero, and its output names `needle`.
fn assert_failed(out: &RunOutput, needle: &str) {
    let report = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(!out.timed_out, "{report}");
    assert_ne!(out.code, Some(0), "{report}");
    assert!(out.stdout.contains(needle), "{needle:?} missing\n{report}");
}

/// A transport built outside the tree, after the host, and found through
/// `FIREOPAL_PLUGIN_PATH` passes the suite of the host it ships against.
#[test]
fn an_out_of_tree_transport_passes() {
    let dir = vendor_plugin("conformance-vendor", &[]);
    let out = run_suite("loop", 1, &[("FIREOPAL_PLUGIN_PATH", dir.path())]);
    assert_passed(&out, "the out-of-tree loop transport", 1);
    // What it does not offer does not apply, and does not fail.
    assert!(
        out.stdout
            .contains("rank 0: N/A rdma: put and get not offered"),
        "{}",
        out.stdout
    );
}

/// An out-of-tree transport with two modules, each a loop: messages to
/// the own rank go round robin over both lanes and still pass the suite.
/// When one lane's module fails with messages in it, the rank they went
/// to fails with an error naming the lost module, or, with copies kept
/// (`bml_replay_size`), the copies go again on the other lane.
#[test]
fn two_lanes_of_an_out_of_tree_transport_and_the_loss_of_one() {
    let dir = vendor_plugin("conformance-lanes", &[("FIXTURE_MODULES", "2")]);
    let out = run_suite("loop", 1, &[("FIREOPAL_PLUGIN_PATH", dir.path())]);
    assert_passed(&out, "two loop lanes", 1);
    let counts = lane_counts(&out.stdout);
    assert!(
        counts
            .first()
            .is_some_and(|l| l.len() == 2 && l.iter().all(|&n| n > 0)),
        "{}",
        out.stdout
    );
    // Module 1 fails with messages queued in it: their copies go again on
    // module 0, and every case still sees each message once, in order.
    let dir = vendor_plugin(
        "conformance-lane-lost",
        &[("FIXTURE_MODULES", "2"), ("FIXTURE_FAULT", "lane")],
    );
    let out = run_suite(
        "loop",
        1,
        &[
            ("FIREOPAL_PLUGIN_PATH", dir.path()),
            ("FIREOPAL_BML_REPLAY_SIZE", Path::new("64M")),
        ],
    );
    assert_passed(&out, "two loop lanes, one lost", 1);
    assert!(
        out.stderr
            .contains("module loop[1] closed: progress failed: i/o error: lane 1 broke on purpose")
            && out.stderr.contains("peers go on over other lanes")
            && !out.stderr.contains(" and 0 peers go on"),
        "{}",
        out.stderr
    );
    // With no copies kept (the default), nothing can replace what the
    // lane took.
    let out = run_suite("loop", 1, &[("FIREOPAL_PLUGIN_PATH", dir.path())]);
    assert_failed(
        &out,
        "rank 0 reported failed: its lane over btl loop[1] was lost, with ordered messages \
         no kept copy replaces: i/o error: lane 1 broke on purpose",
    );
}

/// A transport that cuts a byte off its payloads fails the suite: the job
/// ends by itself, non-zero, naming the case.
#[test]
fn a_broken_transport_fails() {
    let dir = vendor_plugin("conformance-broken", &[("FIXTURE_FAULT", "truncate")]);
    let out = run_suite("loop", 1, &[("FIREOPAL_PLUGIN_PATH", dir.path())]);
    assert_failed(&out, "rank 0: FAIL sizes:");
    assert_failed(
        &out,
        &format!(
            "rank 0: 0 passed, 1 failed, 0 not applicable, {} not run",
            CASES.len() - 1
        ),
    );
}

/// The out-of-tree transport runs the transport suite from its own `cargo
/// test`, with `fireopal-conformance` as a dev-dependency, as a vendor
/// would; built with a fault, the same command fails and names the case.
#[test]
fn the_out_of_tree_transport_runs_the_suite_in_its_own_tests() {
    let crate_dir = fixture_source("btl-loop");
    let out = test_fixture(&crate_dir, &[]).unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for case in ["sizes", "many_small", "remove_peer", "rdma"] {
        assert!(
            stdout.contains(&format!("test conformance::{case} ... ok")),
            "{case} did not run:\n{stdout}"
        );
    }
    assert!(stdout.contains("11 passed; 0 failed"), "{stdout}");

    let out = test_fixture(&crate_dir, &[("FIXTURE_FAULT", "truncate")])
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a truncating transport passed:\n{stdout}"
    );
    assert!(
        stderr.contains("btl loop fails the transport contract in case sizes")
            || stdout.contains("btl loop fails the transport contract in case sizes"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("test conformance::sizes ... FAILED"),
        "{stdout}"
    );
}

const MEMHEAP_CASES: [&str; 5] = ["align", "random", "symmetric", "exhaustion", "bad-free"];

/// The built-in buddy allocator and the ptmalloc plugin pass the memheap
/// suite on three ranks.
#[test]
fn memheap_buddy_and_ptmalloc_pass() {
    for name in ["buddy", "ptmalloc"] {
        let out = run_subject("--memheap", name, 3, &[]);
        assert_passed_cases(&out, &format!("memheap {name}"), 3, &MEMHEAP_CASES);
    }
}

/// The `list` allocator fixture, installed as
/// `libfireopal_memheap_list.so`.
fn vendor_allocator(tag: &str, envs: &[(&str, &str)]) -> TempDir {
    vendor_build(
        "memheap-list",
        "libfixture_memheap_list.so",
        "libfireopal_memheap_list.so",
        tag,
        envs,
    )
}

#[test]
fn an_out_of_tree_allocator_passes_and_a_broken_one_fails() {
    let good = vendor_allocator("conformance-list", &[]);
    let out = run_subject(
        "--memheap",
        "list",
        2,
        &[("FIREOPAL_PLUGIN_PATH", good.path())],
    );
    assert_passed_cases(&out, "the out-of-tree list allocator", 2, &MEMHEAP_CASES);

    let broken = vendor_allocator("conformance-list-broken", &[("FIXTURE_FAULT", "overlap")]);
    let out = run_subject(
        "--memheap",
        "list",
        2,
        &[("FIREOPAL_PLUGIN_PATH", broken.path())],
    );
    assert_failed(&out, ": FAIL ");
    assert_failed(&out, "overlaps the live block");
}
