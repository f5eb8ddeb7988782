//! The transport conformance suite: the same checks
//! (`src/bin/btl_conformance.rs`) against every BTL, each run as a real
//! job under `fireopal run`. Adding a transport is one line below.

use std::process::Command;
use std::time::Duration;

use fireopal_tests::{host_binary, run_with_timeout};

const CASES: [&str; 8] = [
    "sizes",
    "many",
    "completions",
    "sendi",
    "rdma",
    "in-place",
    "symmetric-heap",
    "peer-death",
];

fn conformance(btl: &str, ranks: u32) {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let out = run_with_timeout(
        Command::new(host)
            .args(["run", "-n", &ranks.to_string(), "--"])
            .arg(env!("CARGO_BIN_EXE_btl_conformance"))
            .args(["--btl", btl]),
        Duration::from_secs(300),
    );
    let report = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(
        !out.timed_out,
        "{btl} with {ranks} ranks timed out\n{report}"
    );
    assert_eq!(
        out.code,
        Some(0),
        "{btl} with {ranks} ranks failed\n{report}"
    );
    assert!(!out.stdout.contains("FAIL"), "{report}");
    for rank in 0..ranks {
        for case in CASES {
            let line = format!("rank {rank}: PASS {case}");
            assert!(out.stdout.contains(&line), "missing {line:?}\n{report}");
        }
    }
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
        Command::new(host)
            .args(["run", "-n", "2", "--param", "btl_tcp_if_exclude=lo", "--"])
            .args([
                "sh",
                "-c",
                r#"exec ip netns exec "$FO_NETNS$PMI_RANK" "$0" "$@""#,
            ])
            .arg(env!("CARGO_BIN_EXE_btl_conformance"))
            .args(["--btl", "tcp"])
            .env("FO_NETNS", pair.prefix()),
        Duration::from_secs(300),
    );
    let report = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(!out.timed_out, "timed out\n{report}");
    assert_eq!(out.code, Some(0), "{report}");
    for rank in 0..2 {
        for case in CASES {
            let line = format!("rank {rank}: PASS {case}");
            assert!(out.stdout.contains(&line), "missing {line:?}\n{report}");
        }
    }
}
