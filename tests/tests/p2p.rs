//! The point-to-point suite of `fireopal-conformance` (`fireopal
//! conformance --p2p`) run as real jobs under `fireopal run`, over shared
//! memory, tcp pinned to loopback, and `self` alone; with settings that
//! push more messages into the rendezvous and the credit fallback; over a
//! transport without `get` (the pipelined rendezvous); and against a
//! transport that corrupts payloads, which the suite must fail.

use std::process::Command;
use std::time::Duration;

use fireopal_tests::{
    build_fixture, fixture_source, host_binary, run_with_timeout, RunOutput, TempDir,
};

/// Every case of the suite, in run order.
const CASES: [&str; 16] = [
    "eager-and-rendezvous",
    "wildcards",
    "ordering",
    "truncation",
    "zero-bytes",
    "self",
    "many-requests",
    "flow-control",
    "communicators",
    "random",
    "reregistration",
    "rendezvous-by-size",
    "rendezvous-put",
    "given-up-send",
    "given-up-recv",
    "peer-death",
];

/// A job of the suite: its size, transports, and extra settings.
struct Job<'a> {
    ranks: u32,
    btl: &'a str,
    /// `--param` settings of `fireopal run`, which reach every rank.
    params: &'a [&'a str],
    /// Extra environment of every rank.
    envs: &'a [(&'a str, &'a str)],
    /// Only these cases (`--case`), or all.
    cases: Option<&'a [&'a str]>,
}

impl<'a> Job<'a> {
    fn new(btl: &'a str, ranks: u32) -> Self {
        Job {
            ranks,
            btl,
            params: &[],
            envs: &[],
            cases: None,
        }
    }

    /// `fireopal run -n <ranks> [--param ...] -- fireopal conformance
    /// --p2p [--case ...]` with `FIREOPAL_BTL=<btl>`.
    fn run(&self) -> RunOutput {
        let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
        let mut cmd = Command::new(&host);
        cmd.args(["run", "-n", &self.ranks.to_string()]);
        for p in self.params {
            cmd.args(["--param", p]);
        }
        cmd.arg("--").arg(&host).args(["conformance", "--p2p"]);
        if let Some(cases) = self.cases {
            cmd.args(["--case", &cases.join(",")]);
        }
        // Settings of the developer's environment would change the job.
        for (var, _) in std::env::vars() {
            if var.starts_with("FIREOPAL_") {
                cmd.env_remove(var);
            }
        }
        cmd.env("FIREOPAL_BTL", self.btl);
        for (k, v) in self.envs {
            cmd.env(k, v);
        }
        run_with_timeout(&mut cmd, Duration::from_secs(300))
    }

    /// Runs the job and checks that every rank passed every case it ran.
    fn passes(&self) -> RunOutput {
        let out = self.run();
        let what = format!(
            "--p2p with FIREOPAL_BTL={} on {} ranks {:?} {:?}",
            self.btl, self.ranks, self.params, self.envs
        );
        assert_passed(&out, &what, self.ranks, self.cases.unwrap_or(&CASES));
        out
    }
}

/// The job ended by itself, with success, and every rank passed each of
/// `cases` and printed a summary with 0 failed.
fn assert_passed(out: &RunOutput, what: &str, ranks: u32, cases: &[&str]) {
    let report = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(!out.timed_out, "{what} timed out\n{report}");
    assert_eq!(out.code, Some(0), "{what} failed\n{report}");
    assert!(!out.stdout.contains("FAIL"), "{what}\n{report}");
    assert!(!out.stderr.contains(": error:"), "{what}\n{report}");
    // The seed variable is the suite's, not a parameter to warn about.
    assert!(
        !out.stderr
            .contains("no loaded component has this parameter"),
        "{what}\n{report}"
    );
    for rank in 0..ranks {
        // A rank dying, a send given up, or a flood, needs a peer; a
        // route that sends 1 MiB eagerly, or pipelines its rendezvous,
        // registers nothing to register again; only a route that reads
        // from a size above its eager limit has sizes to tell apart.
        let mut not_applicable = 0;
        for case in cases {
            let passed = format!("rank {rank}: PASS {case} (");
            let na = format!("rank {rank}: N/A {case}: ");
            let may_not_apply = (ranks == 1
                && matches!(
                    *case,
                    "peer-death" | "given-up-send" | "given-up-recv" | "flow-control"
                ))
                || matches!(
                    *case,
                    "reregistration" | "rendezvous-by-size" | "rendezvous-put"
                );
            let skipped = may_not_apply && out.stdout.contains(&na);
            not_applicable += usize::from(skipped);
            assert!(
                out.stdout.contains(&passed) || skipped,
                "{what}: missing {passed:?}\n{report}"
            );
        }
        let summary = format!(
            "rank {rank}: {} passed, 0 failed, {not_applicable} not applicable\n",
            cases.len() - not_applicable
        );
        assert!(
            out.stdout.contains(&summary),
            "{what}: missing {summary:?}\n{report}"
        );
    }
}

#[test]
fn shared_memory_two_ranks() {
    Job::new("self,shm", 2).passes();
}

#[test]
fn shared_memory_three_ranks() {
    Job::new("self,shm", 3).passes();
}

#[test]
fn shared_memory_eight_ranks() {
    Job::new("self,shm", 8).passes();
}

#[test]
fn tcp_on_loopback_two_ranks() {
    Job {
        params: &["btl_tcp_if_include=lo"],
        ..Job::new("self,tcp", 2)
    }
    .passes();
}

/// A symmetric heap as large as the registration cache's byte limit,
/// exposed on every module, leaves the cache room for the buffers it keeps
/// for reuse: the `reregistration` case sends twice from one buffer and
/// the second send must register nothing.
#[test]
fn a_heap_as_large_as_the_cache_limit_leaves_room_for_user_buffers() {
    Job {
        params: &["symmetric_size=1g", "rcache_max_bytes=1g"],
        cases: Some(&["reregistration"]),
        ..Job::new("self,shm", 2)
    }
    .passes();
}

#[test]
fn tcp_on_loopback_four_ranks() {
    Job {
        params: &["btl_tcp_if_include=lo"],
        ..Job::new("self,tcp", 4)
    }
    .passes();
}

#[test]
fn tcp_on_loopback_eight_ranks() {
    Job {
        params: &["btl_tcp_if_include=lo"],
        ..Job::new("self,tcp", 8)
    }
    .passes();
}

/// Two tcp links to every peer: eager messages, rendezvous
/// announcements and the protocol's answers go round robin, and the
/// suite's ordering and random cases still see MPI's order.
#[test]
fn tcp_on_loopback_over_two_links() {
    Job {
        params: &["btl_tcp_if_include=lo", "btl_tcp_links=2"],
        ..Job::new("self,tcp", 3)
    }
    .passes();
}

/// One rank: every message goes to itself.
#[test]
fn self_alone_one_rank() {
    Job::new("self", 1).passes();
}

/// A small eager limit sends most messages by rendezvous, to self too
/// (the self route is eager up to 64 MiB otherwise); two credits send
/// the small ones by rendezvous as soon as a receiver falls behind.
#[test]
fn small_eager_limit_and_few_credits() {
    let out = Job {
        params: &["p2p_eager_limit=1024", "p2p_eager_credits=2"],
        ..Job::new("self,shm", 3)
    }
    .passes();
    assert!(
        !out.stdout.contains("note self: the route to self is eager"),
        "the self case sent no rendezvous to self:\n{}",
        out.stdout
    );
    let out = Job {
        params: &["p2p_eager_limit=4096"],
        ..Job::new("self", 1)
    }
    .passes();
    assert!(!out.stdout.contains("note self: the route to self is eager"));
}

/// Rendezvous messages split between receiver and sender from 8 KiB up
/// (most sizes of the suite), and never split.
#[test]
fn split_rendezvous_from_small_sizes_and_not_at_all() {
    Job {
        params: &["p2p_eager_limit=1024", "p2p_split_min=8192"],
        ..Job::new("self,shm", 3)
    }
    .passes();
    Job {
        params: &["p2p_split_min=0"],
        ..Job::new("self,shm", 2)
    }
    .passes();
}

/// `p2p_rendezvous=pipeline`: every rendezvous is sent by the sender once
/// the receiver is ready, over tcp and shm, which otherwise read with get.
#[test]
fn the_pipeline_rendezvous_by_parameter_over_tcp_and_shm() {
    Job {
        params: &["btl_tcp_if_include=lo", "p2p_rendezvous=pipeline"],
        ..Job::new("self,tcp", 2)
    }
    .passes();
    Job {
        params: &["p2p_rendezvous=pipeline"],
        ..Job::new("self,shm", 3)
    }
    .passes();
}

/// shm sends a rendezvous under its `min_rdma_pipeline_size` in
/// fragments of its eager limit through the queue; with the threshold
/// above every size of the suite, each rendezvous goes that way,
/// including those of a peer that dies and of a send given up.
#[test]
fn every_shm_rendezvous_in_eager_fragments_by_the_read_threshold() {
    Job {
        params: &["btl_shm_min_rdma_pipeline_size=4194304"],
        ..Job::new("self,shm", 3)
    }
    .passes();
}

/// Over tcp, whose peer serves reads over the stream its sends take, a
/// receiver reads one rendezvous from a peer at a time and asks the
/// sender to move the others (`p2p_rget_reads=1`, the default): to put
/// those of `p2p_put_min` bytes or more into the receive buffer, to send
/// the rest; with no bound every rendezvous is read. A small eager limit
/// makes most of the suite's messages rendezvous, many of them in flight
/// at once; the jobs put those from the default 512 KiB, every one, and
/// none.
#[test]
fn tcp_rendezvous_read_put_or_sent_by_the_bound_on_reads() {
    let put = |params: &[&str]| {
        let out = Job {
            params,
            ..Job::new("self,tcp", 3)
        }
        .passes();
        for rank in [0, 2] {
            let passed = format!("rank {rank}: PASS rendezvous-put (");
            assert!(
                out.stdout.contains(&passed),
                "{params:?}: missing {passed:?}\n{}",
                out.stdout
            );
        }
    };
    put(&["btl_tcp_if_include=lo", "p2p_eager_limit=1024"]);
    put(&[
        "btl_tcp_if_include=lo",
        "p2p_eager_limit=1024",
        "p2p_put_min=1025",
    ]);
    Job {
        params: &[
            "btl_tcp_if_include=lo",
            "p2p_eager_limit=1024",
            "p2p_put_min=0",
        ],
        ..Job::new("self,tcp", 3)
    }
    .passes();
    Job {
        params: &[
            "btl_tcp_if_include=lo",
            "p2p_eager_limit=1024",
            "p2p_rget_reads=0",
        ],
        ..Job::new("self,tcp", 3)
    }
    .passes();
}

/// The random case with other seeds than the default, which each rank
/// reports.
#[test]
fn random_traffic_with_other_seeds() {
    for (seed, shown) in [("1", "seed 1 "), ("0xfeed", "seed 65261 ")] {
        let out = Job {
            envs: &[("FIREOPAL_P2P_SEED", seed)],
            cases: Some(&["random"]),
            ..Job::new("self,shm", 4)
        }
        .passes();
        for rank in 0..4 {
            let note = format!("rank {rank}: note random: {shown}");
            assert!(
                out.stdout.contains(&note),
                "{note:?} missing:\n{}",
                out.stdout
            );
        }
    }
    let out = Job {
        envs: &[("FIREOPAL_P2P_SEED", "lots")],
        cases: Some(&["random"]),
        ..Job::new("self", 1)
    }
    .run();
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("rank 0: FAIL random: FIREOPAL_P2P_SEED=\"lots\" is not a number"),
        "{}",
        out.stdout
    );
}

/// The `loop` transport fixture (no `get`: rendezvous messages are
/// pipelined), built with `envs`, in a fresh plugin directory.
fn loop_transport(tag: &str, envs: &[(&str, &str)]) -> TempDir {
    host_binary().unwrap_or_else(|e| panic!("{e}"));
    let dir = TempDir::new(tag).unwrap_or_else(|e| panic!("{e}"));
    let (out, _guard) =
        build_fixture(&fixture_source("btl-loop"), envs).unwrap_or_else(|e| panic!("{e}"));
    std::fs::copy(
        out.join("libfixture_btl_loop.so"),
        dir.path().join("libfireopal_btl_loop.so"),
    )
    .unwrap_or_else(|e| panic!("installing the fixture: {e}"));
    dir
}

/// Over a transport without `get` every rendezvous is pipelined, in
/// fragments of at least 1 KiB; a transport that cuts a byte off each
/// payload fails the suite, which names the case, instead of passing or
/// hanging.
#[test]
fn pipelined_rendezvous_and_a_corrupting_transport() {
    let good = loop_transport("p2p-loop", &[]);
    let path = good.path().to_string_lossy().into_owned();
    Job {
        params: &["p2p_pipeline_fragment=1024"],
        envs: &[("FIREOPAL_PLUGIN_PATH", &path)],
        ..Job::new("loop", 1)
    }
    .passes();

    let broken = loop_transport("p2p-loop-broken", &[("FIXTURE_FAULT", "truncate")]);
    let path = broken.path().to_string_lossy().into_owned();
    // The pipelined messages never complete: a short stall limit ends
    // their wait.
    let out = Job {
        params: &["p2p_stall_limit=5"],
        envs: &[("FIREOPAL_PLUGIN_PATH", &path)],
        ..Job::new("loop", 1)
    }
    .run();
    let report = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(!out.timed_out, "{report}");
    assert_ne!(out.code, Some(0), "{report}");
    assert!(
        out.stdout.contains("rank 0: FAIL eager-and-rendezvous:"),
        "{report}"
    );
}
