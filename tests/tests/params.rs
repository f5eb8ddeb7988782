//! Every parameter a tool reads is validated where it is read, with one
//! error naming the parameter and where its value came from: `info`,
//! `run`'s ranks, `bench --from heap` and `conformance` refuse a bad
//! `symmetric_size`, `info` shows it as an error, and a value that makes a
//! component unavailable is reported at the job's start, once, by rank 0.

use std::process::Command;
use std::time::Duration;

use fireopal_tests::{host_binary, run_with_timeout, RunOutput};

const LIMIT: Duration = Duration::from_secs(120);
const BAD_SIZES: [&str; 4] = ["12qq", "NaN", "-5", "1e30"];

fn fireopal(env: &[(&str, &str)], args: &[&str]) -> RunOutput {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = Command::new(host);
    cmd.env_remove("FIREOPAL_SYMMETRIC_SIZE")
        .env_remove("SHMEM_SYMMETRIC_SIZE")
        .env_remove("FIREOPAL_BTL")
        .envs(env.iter().copied())
        .args(args);
    let out = run_with_timeout(&mut cmd, LIMIT);
    assert!(!out.timed_out, "timed out: {args:?}\n{}", out.stderr);
    out
}

/// `fireopal run -n 2 --param <param> -- fireopal <command>`.
fn in_a_job_of_two(param: &str, command: &[&str]) -> RunOutput {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let host = host.to_str().expect("a UTF-8 path");
    let mut args = vec!["run", "-n", "2", "--param", param, "--", host];
    args.extend_from_slice(command);
    fireopal(&[], &args)
}

/// The error every tool gives for `value` set as `FIREOPAL_SYMMETRIC_SIZE`.
fn env_error(value: &str) -> String {
    format!(
        "parameter symmetric_size: invalid value {value:?} from the environment \
         (FIREOPAL_SYMMETRIC_SIZE={value})"
    )
}

#[test]
fn info_shows_an_invalid_symmetric_size_as_an_error() {
    for value in BAD_SIZES {
        let out = fireopal(&[("FIREOPAL_SYMMETRIC_SIZE", value)], &["info"]);
        assert_eq!(out.code, Some(2), "{value}: {}", out.stderr);
        let want = env_error(value);
        assert!(
            out.stdout
                .contains(&format!("  symmetric_size = error: {want}")),
            "{value}:\n{}",
            out.stdout
        );
        assert!(
            out.stderr
                .contains(&format!("fireopal info: error: {want}")),
            "{value}: {}",
            out.stderr
        );
        let out = fireopal(&[("FIREOPAL_SYMMETRIC_SIZE", value)], &["info", "--json"]);
        assert_eq!(out.code, Some(2), "{value}: {}", out.stderr);
        assert!(
            out.stdout
                .contains("\"error\":\"parameter symmetric_size: invalid value"),
            "{value}:\n{}",
            out.stdout
        );
    }
    // On the command line, the source says so; a good value has no error.
    let out = fireopal(&[], &["info", "--param", "symmetric_size=-5"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "parameter symmetric_size: invalid value \"-5\" from the command line \
             (--param symmetric_size=-5)"
        ),
        "{}",
        out.stderr
    );
    let out = fireopal(&[("FIREOPAL_SYMMETRIC_SIZE", "1.5g")], &["info", "--json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("\"value\":\"1.5g\"") && !out.stdout.contains("invalid value"),
        "{}",
        out.stdout
    );
}

#[test]
fn the_ranks_of_run_bench_and_conformance_refuse_an_invalid_symmetric_size() {
    let tools: [&[&str]; 3] = [
        &["bench", "pingpong", "--from", "heap"],
        &["conformance", "--btl", "shm", "--case", "sizes"],
        &["conformance", "--memheap", "buddy", "--case", "align"],
    ];
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let host = host.display().to_string();
    for value in BAD_SIZES {
        for tool in tools {
            let mut args = vec!["run", "-n", "2", "--", host.as_str()];
            args.extend_from_slice(tool);
            let out = fireopal(&[("FIREOPAL_SYMMETRIC_SIZE", value)], &args);
            assert_ne!(out.code, Some(0), "{value} {tool:?}: {}", out.stdout);
            assert!(
                out.stderr.contains(&env_error(value)),
                "{value} {tool:?}: {}",
                out.stderr
            );
            // Refused before any transport was opened: nothing measured.
            assert!(
                !out.stdout.contains("PASS"),
                "{value} {tool:?}: {}",
                out.stdout
            );
        }
    }
    // Given to run with --param, the ranks name the command line.
    let out = fireopal(
        &[],
        &[
            "run",
            "-n",
            "2",
            "--param",
            "symmetric_size=12qq",
            "--",
            &host,
            "bench",
            "pingpong",
            "--from",
            "heap",
        ],
    );
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    assert!(
        out.stderr.contains(
            "parameter symmetric_size: invalid value \"12qq\" from the command line \
             (--param symmetric_size=12qq)"
        ),
        "{}",
        out.stderr
    );
}

#[test]
fn a_value_that_makes_a_component_unavailable_is_reported_once_at_the_start() {
    let out = fireopal(
        &[],
        &[
            "run",
            "-n",
            "2",
            "--param",
            "btl_shm_priority=8589934592",
            "--",
            env!("CARGO_BIN_EXE_failover_peer"),
            "5",
        ],
    );
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    let reports: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("component \"shm\" is unavailable"))
        .collect();
    assert_eq!(reports.len(), 1, "{}", out.stderr);
    // The job went on without it.
    assert!(out.stdout.contains("peers now via tcp"), "{}", out.stdout);
    assert!(
        reports[0].starts_with("fireopal[0] ")
            && reports[0].contains("btl_shm_priority = 8589934592 does not fit in 32 bits")
            && reports[0].contains("from the command line (--param btl_shm_priority=8589934592)"),
        "{}",
        reports[0]
    );
    // A component unavailable for a reason of its own is not reported.
    let out = fireopal(&[("FIREOPAL_BTL_SHM_PRIORITY", "90")], &["info"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!out.stderr.contains("is unavailable"), "{}", out.stderr);
}

#[test]
fn info_in_a_job_names_the_interfaces_tcp_listens_on() {
    let out = in_a_job_of_two("btl_tcp_if_include=lo", &["info"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let tcp: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.contains("btl") && l.contains(" tcp "))
        .collect();
    assert_eq!(tcp.len(), 2, "one line per rank:\n{}", out.stdout);
    for line in tcp {
        assert!(line.contains("listens on lo 127.0.0.1"), "{line}");
    }
}

/// The congestion control each rank's tcp connection reports at
/// `log_level=info`, under `param`.
fn congestion_of_connections(param: &str) -> Vec<String> {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let host = host.to_str().expect("a UTF-8 path");
    let args = [
        "run",
        "-n",
        "2",
        "--param",
        "btl_tcp_if_include=lo",
        "--param",
        "log_level=info",
        "--param",
        param,
        "--",
        host,
        "bench",
        "p2p",
        "--btl",
        "tcp",
        "--quick",
        "--sizes",
        "8",
    ];
    let out = fireopal(&[], &args);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    out.stderr
        .lines()
        .filter(|l| l.contains("connected to rank"))
        .map(|l| {
            l.rsplit("congestion control ")
                .next()
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}

#[test]
fn tcp_connections_within_the_host_use_reno_unless_told_otherwise() {
    assert_eq!(
        congestion_of_connections("btl_tcp_congestion=auto"),
        ["reno", "reno"]
    );
    let system = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .expect("the system's congestion control");
    let system = system.trim();
    assert_eq!(
        congestion_of_connections("btl_tcp_congestion=system"),
        [system, system]
    );
}

/// A job of two whose `param` makes `btl`'s bench fail with `error`.
fn refused_by_name(param: &str, btl: &str, error: &str) {
    let out = in_a_job_of_two(
        param,
        &["bench", "p2p", "--btl", btl, "--quick", "--sizes", "8"],
    );
    assert_ne!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains(error), "{}", out.stderr);
}

#[test]
fn tcp_refuses_a_congestion_control_the_kernel_lacks_by_name() {
    refused_by_name(
        "btl_tcp_congestion=no-such-cc",
        "tcp",
        "btl_tcp_congestion: cannot use \"no-such-cc\": this kernel has no such algorithm",
    );
}

#[test]
fn shm_refuses_a_read_threshold_under_its_eager_limit_by_name() {
    refused_by_name(
        "btl_shm_min_rdma_pipeline_size=4096",
        "shm",
        "btl_shm_min_rdma_pipeline_size = 4096: must be at least btl_shm_eager_limit (32768)",
    );
}
