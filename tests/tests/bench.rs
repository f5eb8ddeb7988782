//! `fireopal bench` end to end, in its quick form: every benchmark runs as
//! a two-rank job over shm and over tcp (and alone over `self`), ends by
//! itself, and prints a row per size. The one-sided benchmarks check the
//! bytes they moved last, so a transport that completes without moving
//! data fails them. The figures themselves belong in docs/BENCHMARKS.md,
//! not here.

use std::process::Command;
use std::time::Duration;

use fireopal_tests::{host_binary, run_with_timeout};

/// Runs `fireopal bench <what> --quick --btl <btl>` on `ranks` ranks and
/// returns its table.
fn bench(what: &str, btl: &str, ranks: u32) -> String {
    bench_with(what, btl, ranks, &[])
}

/// [`bench`] with more arguments.
fn bench_with(what: &str, btl: &str, ranks: u32, more: &[&str]) -> String {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = Command::new(&host);
    if ranks > 1 {
        cmd.args(["run", "-n", &ranks.to_string(), "--"]).arg(&host);
    }
    cmd.args(["bench", what, "--quick", "--btl", btl])
        .args(more);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(300));
    let report = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(
        !out.timed_out,
        "bench {what} over {btl} timed out\n{report}"
    );
    assert_eq!(out.code, Some(0), "bench {what} over {btl}\n{report}");
    out.stdout
}

/// The sizes of the table's rows, and that every figure is a positive
/// number.
fn sizes(table: &str) -> Vec<String> {
    table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim_start().starts_with("size"))
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(cols.len(), 4, "row {l:?}");
            let latency: f64 = cols[2].parse().unwrap_or(-1.0);
            assert!(latency > 0.0, "latency in {l:?}");
            format!("{} {}", cols[0], cols[1])
        })
        .collect()
}

/// By default large messages take the path that moves them once: shm's
/// transfer buffers, tcp's rendezvous on `get`.
#[test]
fn pingpong_over_shm_and_tcp() {
    for (btl, path) in [
        ("shm", "a transfer buffer, sent in place"),
        ("tcp", "read by the receiver with get (rendezvous)"),
    ] {
        let table = bench("pingpong", btl, 2);
        assert!(table.contains(&format!("over btl {btl}[")), "{table}");
        assert!(table.contains(path), "{table}");
        assert_eq!(sizes(&table).len(), 8, "{table}");
    }
}

/// Large messages by rendezvous: announced, then read by the receiver
/// with `get`, which checks at the end that every byte it fetched is the
/// sender's.
#[test]
fn pingpong_by_rendezvous_over_shm_tcp_and_self() {
    for (btl, ranks) in [("shm", 2), ("tcp", 2), ("self", 1)] {
        let table = bench_with("pingpong", btl, ranks, &["--from", "registered"]);
        assert!(
            table.contains("read by the receiver with get (rendezvous)"),
            "{table}"
        );
        assert!(table.contains(&format!("over btl {btl}[")), "{table}");
        assert_eq!(sizes(&table).len(), 8, "{table}");
    }
}

#[test]
fn put_and_get_over_shm_tcp_and_self() {
    for what in ["put", "get"] {
        for (btl, ranks) in [("shm", 2), ("tcp", 2), ("self", 1)] {
            let table = bench(what, btl, ranks);
            assert!(
                table.starts_with(&format!("# fireopal {what}: ")),
                "{table}"
            );
            assert!(table.contains(&format!("over btl {btl}[")), "{table}");
            assert_eq!(
                sizes(&table),
                ["8 B", "64 B", "1 KiB", "8 KiB", "64 KiB", "1 MiB", "4 MiB"],
                "{table}"
            );
        }
    }
}

#[test]
fn a_put_no_transport_can_carry_is_a_clear_error() {
    // tcp does not reach the own process: a one-rank put over tcp fails at
    // once, saying why, instead of measuring nothing.
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let out = run_with_timeout(
        Command::new(&host).args(["bench", "put", "--quick", "--btl", "tcp"]),
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("\"tcp\" was requested but is unavailable: a job of 1 process"),
        "{}",
        out.stderr
    );
}
