//! `fireopal run` and the PMI-1 client, end to end: the example program
//! `bootstrap_exchange` (built by `cargo test` into target/<profile>/examples)
//! runs under `fireopal run`, under MPICH's Hydra, and alone; the
//! `token_ring` example shows a job's ranks talking over the messenger;
//! and the one-sided examples, `shmem_counter` and the OpenSHMEM
//! histogram `shmem_histogram`, run over shared memory and tcp with every
//! line they print checked.
//!
//! Every launch has a time limit enforced here; on expiry the launcher and
//! everything it started are killed before the test fails.
#![allow(unsafe_code)]

mod common;
#[path = "../../tests/src/proc_tree.rs"]
mod proc_tree;

use common::{built, host_example, profile_dir, workspace, FIREOPAL};

use proc_tree::{descendants, signal};
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::OnceLock;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The example program, in the `examples` directory beside the `fireopal`
/// binary. Plain `cargo test` builds it; when a narrower command (`cargo
/// test --test bootstrap`) did not, or left it stale, it is built here
/// once, with the cargo that built this test.
fn example() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| host_example("bootstrap_exchange"));
    match built {
        Ok(path) => path.clone(),
        Err(e) => panic!("{e}"),
    }
}

/// The shared-memory and tcp plugins the examples run over, each built
/// when missing or stale.
fn transports() -> Result<(), String> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = workspace();
            for btl in ["shm", "tcp"] {
                let src = root.join("plugins").join(format!("btl-{btl}"));
                built(
                    profile_dir().join(format!("libfireopal_btl_{btl}.so")),
                    &[
                        src.join("src"),
                        src.join("Cargo.toml"),
                        root.join("abi").join("src"),
                        root.join("core").join("src"),
                    ],
                    &["-p", &format!("fireopal-btl-{btl}")],
                )?;
            }
            Ok(())
        })
        .clone()
}

/// Example `name`, built once with the transports.
fn with_transports(once: &OnceLock<Result<PathBuf, String>>, name: &str) -> PathBuf {
    let built = once.get_or_init(|| {
        transports()?;
        host_example(name)
    });
    match built {
        Ok(path) => path.clone(),
        Err(e) => panic!("{e}"),
    }
}

/// The `token_ring` example.
fn token_ring() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    with_transports(&BUILT, "token_ring")
}

/// The `shmem_histogram` example.
fn histogram() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    with_transports(&BUILT, "shmem_histogram")
}

/// The `shmem_counter` example.
fn counter() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    with_transports(&BUILT, "shmem_counter")
}

/// A launched command whose output is collected by threads.
struct Running {
    child: Child,
    lines: Receiver<String>,
    stdout_seen: Vec<String>,
    stdout: Option<JoinHandle<()>>,
    stderr: Option<JoinHandle<String>>,
    started: Instant,
}

impl Running {
    fn start(cmd: &mut Command) -> Running {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let out = child.stdout.take().expect("stdout");
        let mut err = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        let stdout = thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Running {
            child,
            lines,
            stdout_seen: Vec::new(),
            stdout: Some(stdout),
            stderr: Some(stderr),
            started: Instant::now(),
        }
    }

    /// Kills the launcher and everything under it, reaps the launcher, and
    /// fails the test.
    fn abandon(&mut self, why: &str) -> ! {
        let pid = self.child.id();
        for p in descendants(pid) {
            signal(p, libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let stderr = self.stderr.take().map(|h| h.join().unwrap_or_default());
        panic!(
            "{why} after {:?}; stdout so far: {:?}; stderr: {}",
            self.started.elapsed(),
            self.stdout_seen,
            stderr.unwrap_or_default()
        );
    }

    /// The pids `n` ranks of the example's `hang` mode print, in the
    /// order they print them.
    fn rank_pids(&mut self, n: usize) -> Vec<u32> {
        (0..n)
            .map(|_| {
                let line = self.wait_line(" pid ", LIMIT);
                let pid = line.rsplit(' ').next().and_then(|p| p.parse::<u32>().ok());
                pid.expect("pid in line")
            })
            .collect()
    }

    /// Waits for a stdout line containing `needle`.
    fn wait_line(&mut self, needle: &str, limit: Duration) -> String {
        let deadline = self.started + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.stdout_seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.abandon(&format!("no output line with {needle:?}"))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.abandon(&format!("output ended without {needle:?}"))
                }
            }
        }
    }

    /// Waits for the end, within `limit` of the start.
    fn finish(self, limit: Duration) -> (ExitStatus, Vec<String>, String) {
        let deadline = self.started + limit;
        self.finish_by(deadline, limit)
    }

    /// Waits for the end until `deadline` (`limit` is for the message).
    fn finish_by(
        mut self,
        deadline: Instant,
        limit: Duration,
    ) -> (ExitStatus, Vec<String>, String) {
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
                Ok(None) => self.abandon(&format!("did not finish within {limit:?}")),
                Err(e) => self.abandon(&format!("wait failed: {e}")),
            }
        };
        if let Some(h) = self.stdout.take() {
            let _ = h.join();
        }
        self.stdout_seen.extend(self.lines.try_iter());
        let stderr = self.stderr.take().map(|h| h.join().unwrap_or_default());
        (status, self.stdout_seen, stderr.unwrap_or_default())
    }
}

fn fireopal_run(args: &[&str]) -> Command {
    let mut cmd = Command::new(FIREOPAL);
    cmd.arg("run").args(args);
    // An enclosing launcher's variables must not leak into the test.
    for var in ["PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_PORT", "PMI_ID"] {
        cmd.env_remove(var);
    }
    cmd
}

fn assert_exchange_output(stdout: &[String], size: u32) {
    for rank in 0..size {
        let want =
            format!("rank {rank} of {size}: checked {size} peers (local rank {rank} of {size})");
        assert!(stdout.contains(&want), "missing {want:?} in {stdout:?}");
    }
    assert_eq!(stdout.len(), size as usize, "{stdout:?}");
}

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn four_ranks_exchange_under_fireopal_run() {
    let ex = example();
    let mut cmd = fireopal_run(&["-n", "4", "--"]);
    cmd.arg(&ex);
    let (status, stdout, stderr) = Running::start(&mut cmd).finish(LIMIT);
    assert!(status.success(), "{status}: {stderr}");
    assert_exchange_output(&stdout, 4);
}

#[test]
fn a_token_goes_round_four_ranks_over_shm_and_over_tcp() {
    let ex = token_ring();
    for (btl, used) in [("self,shm", "shm"), ("self,tcp", "tcp")] {
        let mut cmd = fireopal_run(&["-n", "4", "--"]);
        cmd.arg(&ex).arg("3").env("FIREOPAL_BTL", btl);
        let (status, stdout, stderr) = Running::start(&mut cmd).finish(LIMIT);
        assert!(status.success(), "{btl}: {status}: {stderr}");
        let want =
            format!("token went round 3 laps of 4 ranks (12 hops); rank 0 sends over {used}");
        assert_eq!(stdout, [want], "{btl}");
    }
}

#[test]
fn singleton_without_launcher() {
    let mut cmd = Command::new(example());
    for var in ["PMI_FD", "PMI_RANK", "PMI_SIZE"] {
        cmd.env_remove(var);
    }
    let (status, stdout, stderr) = Running::start(&mut cmd).finish(LIMIT);
    assert!(status.success(), "{status}: {stderr}");
    assert_exchange_output(&stdout, 1);
}

#[test]
fn rank_exiting_with_3_fails_the_job_naming_it() {
    let ex = example();
    let mut cmd = fireopal_run(&["-n", "4", "--"]);
    cmd.arg(&ex).args(["exit", "2", "3"]);
    let (status, _, stderr) = Running::start(&mut cmd).finish(LIMIT);
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("fireopal run: job failed: rank 2 exited with code 3"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn rank_killed_by_sigkill_ends_the_job_within_5_s() {
    let ex = example();
    let mut cmd = fireopal_run(&["-n", "4", "--"]);
    cmd.arg(&ex).args(["kill", "1"]);
    // The other ranks are blocked in a fence when rank 1 dies; the clock
    // starts when rank 1 says it is about to kill itself.
    let mut job = Running::start(&mut cmd);
    job.wait_line("rank 1 kills itself", LIMIT);
    let limit = Duration::from_secs(5);
    let (status, _, stderr) = job.finish_by(Instant::now() + limit, limit);
    assert!(!status.success());
    assert_eq!(status.code(), Some(128 + libc::SIGKILL), "{stderr}");
    assert!(
        stderr.contains("rank 1 was killed by signal 9 (SIGKILL)"),
        "{stderr}"
    );
}

#[test]
fn sigint_to_the_launcher_stops_and_reaps_every_rank() {
    let ex = example();
    let mut cmd = fireopal_run(&["-n", "3", "--"]);
    // Ranks that ignore SIGTERM make the launcher escalate to SIGKILL.
    cmd.arg(&ex).args(["hang", "ignore-term"]);
    let mut job = Running::start(&mut cmd);
    let pids = job.rank_pids(3);
    let launcher = job.child.id();
    assert_eq!(descendants(launcher).len(), 3);
    let sent = Instant::now();
    signal(launcher, libc::SIGINT);
    let limit = Duration::from_secs(5);
    let (status, _, stderr) = job.finish_by(sent + limit, limit);
    assert!(sent.elapsed() < Duration::from_secs(5));
    assert_eq!(status.code(), Some(128 + libc::SIGINT), "{stderr}");
    assert!(stderr.contains("caught SIGINT"), "{stderr}");
    assert!(stderr.contains("sending SIGKILL"), "{stderr}");
    for pid in pids {
        // Reaped by the launcher: not even a zombie is left.
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "rank pid {pid} still exists"
        );
    }
}

#[test]
fn ranks_die_with_a_launcher_killed_outright() {
    /// Kills what is left of the ranks, whatever the test found.
    struct Leftovers(Vec<u32>);
    impl Drop for Leftovers {
        fn drop(&mut self) {
            for &pid in &self.0 {
                signal(pid, libc::SIGKILL);
            }
        }
    }
    /// Whether `pid` still runs (a zombie waits only for its reaper).
    fn running(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        })
    }

    let ex = example();
    let mut cmd = fireopal_run(&["-n", "2", "--"]);
    cmd.arg(&ex).args(["hang", "ignore-term"]);
    let mut job = Running::start(&mut cmd);
    let ranks = Leftovers(job.rank_pids(2));
    signal(job.child.id(), libc::SIGKILL);
    let limit = Duration::from_secs(5);
    let (status, _, _) = job.finish_by(Instant::now() + limit, limit);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    let deadline = Instant::now() + limit;
    while ranks.0.iter().any(|&pid| running(pid)) {
        assert!(
            Instant::now() < deadline,
            "ranks {:?} outlived their launcher by {limit:?}",
            ranks.0
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn params_become_environment_and_output_is_tagged() {
    let mut cmd = fireopal_run(&[
        "-n",
        "2",
        "--param",
        "btl_tcp_eager_limit=4096",
        "--param=btl=^tcp",
        "--tag-output",
        "--",
        "sh",
        "-c",
        "echo \"$FIREOPAL_BTL_TCP_EAGER_LIMIT $FIREOPAL_BTL $PMI_SIZE\"; echo oops >&2; printf partial",
    ]);
    let (status, mut stdout, stderr) = Running::start(&mut cmd).finish(LIMIT);
    assert!(status.success(), "{status}: {stderr}");
    stdout.sort();
    assert_eq!(
        stdout,
        [
            "[0] 4096 ^tcp 2",
            "[0] partial",
            "[1] 4096 ^tcp 2",
            "[1] partial"
        ]
    );
    let mut err: Vec<&str> = stderr.lines().collect();
    err.sort_unstable();
    assert_eq!(err, ["[0] oops", "[1] oops"]);
}

#[test]
fn untagged_lines_of_two_ranks_never_mix() {
    // Each rank writes its line in five writes and, after each, leaves a
    // mark and waits for the other rank's mark of the same write (polling
    // at most 6000 times, 10 ms apart): so both ranks always have part of a
    // line written, however they are scheduled, and the launcher must
    // still print whole lines.
    struct Marks(PathBuf);
    impl Drop for Marks {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let marks = Marks(std::env::temp_dir().join(format!("fireopal-lines-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&marks.0);
    std::fs::create_dir(&marks.0).expect("mark directory");
    let mut cmd = fireopal_run(&[
        "-n",
        "2",
        "--",
        "sh",
        "-c",
        "o=$((1 - PMI_RANK)); for i in 1 2 3 4 5; do printf \"r$PMI_RANK.$i \"; \
         : > \"$FO_MARKS/$PMI_RANK.$i\"; n=0; while [ ! -e \"$FO_MARKS/$o.$i\" ]; do \
         n=$((n + 1)); [ $n -le 6000 ] || exit 9; sleep 0.01; done; done; echo",
    ]);
    cmd.env("FO_MARKS", &marks.0);
    let (status, mut stdout, stderr) = Running::start(&mut cmd).finish(LIMIT);
    assert!(status.success(), "{status}: {stderr}");
    stdout.sort();
    assert_eq!(
        stdout,
        ["r0.1 r0.2 r0.3 r0.4 r0.5 ", "r1.1 r1.2 r1.3 r1.4 r1.5 "]
    );
}

#[test]
fn a_parameter_nothing_has_is_warned_about_once_per_job() {
    // Given to `fireopal run`, it is named as the command line gave it.
    let warning = "--param btl_tcp_eager_limt: no loaded component has this parameter";
    let mut cmd = fireopal_run(&[
        "-n",
        "2",
        "--param",
        "btl_tcp_eager_limt=4096",
        "--",
        FIREOPAL,
        "info",
    ]);
    let (status, _, stderr) = Running::start(&mut cmd).finish(LIMIT);
    assert!(status.success(), "{status}: {stderr}");
    // Rank 0 says it; the other ranks would only repeat it.
    assert_eq!(stderr.matches(warning).count(), 1, "{stderr}");
    assert!(
        stderr.contains("fireopal[0] fireopal: warning: "),
        "{stderr}"
    );

    let mut quiet = fireopal_run(&[
        "-n",
        "2",
        "--param",
        "btl_tcp_eager_limt=4096",
        "--param",
        "warn_unknown_params=no",
        "--",
        FIREOPAL,
        "info",
    ]);
    let (status, _, stderr) = Running::start(&mut quiet).finish(LIMIT);
    assert!(status.success(), "{status}: {stderr}");
    assert!(!stderr.contains("no loaded component"), "{stderr}");
}

#[test]
fn bad_command_lines_are_clear_errors() {
    for (args, needle) in [
        (
            &["-n", "2", "--param", "eager", "--", "true"][..],
            "malformed --param \"eager\": expected name=value",
        ),
        (
            &["-n", "2", "--param", "Eager-Limit=1", "--", "true"][..],
            "malformed --param",
        ),
        (&["-n", "0", "--", "true"][..], "-n \"0\""),
        (&["--", "true"][..], "missing -n N"),
        (&["-n", "2"][..], "missing the program"),
    ] {
        let (status, _, stderr) = Running::start(&mut fireopal_run(args)).finish(LIMIT);
        assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    let (status, _, stderr) = Running::start(&mut fireopal_run(&[
        "-n",
        "2",
        "--",
        "/nonexistent/program",
    ]))
    .finish(LIMIT);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot start rank 0 (/nonexistent/program)"),
        "{stderr}"
    );
}

#[test]
fn version_names_the_plugin_interface() {
    let out = Command::new(FIREOPAL)
        .arg("--version")
        .output()
        .expect("run fireopal --version");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.trim(),
        format!(
            "fireopal {}, plugin interface {}",
            env!("CARGO_PKG_VERSION"),
            fireopal_abi::INTERFACE_VERSION
        )
    );
}

#[test]
fn rank_leaving_while_others_fence_is_reported() {
    // Rank 1 runs a program that never joins the exchange and exits 0: the
    // others, in a fence, are released with an error instead of hanging.
    let ex = example();
    let script = format!(
        "if [ \"$PMI_RANK\" = 1 ]; then exit 0; else exec {} fence; fi",
        ex.display()
    );
    let mut cmd = fireopal_run(&["-n", "3", "--", "sh", "-c", &script]);
    let (status, _, stderr) = Running::start(&mut cmd).finish(LIMIT);
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("rank_1_left_the_job"), "{stderr}");
    assert!(stderr.contains("job failed: rank "), "{stderr}");
}

#[test]
fn four_ranks_exchange_under_hydra() {
    let required = std::env::var("REQUIRE_MPICH_TESTS").as_deref() == Ok("1");
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("mpiexec.hydra").is_file()))
        .unwrap_or(false);
    if !found {
        assert!(
            !required,
            "mpiexec.hydra not found and REQUIRE_MPICH_TESTS=1 (install Debian's mpich)"
        );
        eprintln!("skipped: mpiexec.hydra not found (install Debian's mpich to run this test)");
        return;
    }
    let mut cmd = Command::new("mpiexec.hydra");
    cmd.args(["-n", "4"]).arg(example());
    for var in ["PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_PORT", "PMI_ID"] {
        cmd.env_remove(var);
    }
    let (status, stdout, stderr) = Running::start(&mut cmd).finish(LIMIT);
    assert!(status.success(), "{status}: {stderr}");
    assert_exchange_output(&stdout, 4);
}

/// One histogram job: `n` PEs over `btl` (`FIREOPAL_BTL`), with the
/// example's SAMPLES and BINS arguments and extra `fireopal run`
/// arguments; checks it and its output, and says what it checked.
fn histogram_job(btl: &str, n: u32, samples: u64, bins: usize, run_args: &[&str]) {
    let n_arg = n.to_string();
    let mut args = vec!["-n", &n_arg];
    args.extend_from_slice(run_args);
    args.push("--");
    let mut cmd = fireopal_run(&args);
    cmd.arg(histogram())
        .arg(samples.to_string())
        .arg(bins.to_string())
        .env("FIREOPAL_BTL", btl);
    let (status, stdout, stderr) = Running::start(&mut cmd).finish(LIMIT);
    let what = format!("{n} PEs over {btl}, {samples} samples each, {bins} bins");
    assert!(status.success(), "{what}: {status}: {stderr}");
    assert!(!stderr.contains("shmem_histogram"), "{what}: {stderr}");
    check_output(&what, &stdout, n, samples, bins);
}

/// Each PE says it holds its share of the bins (`ceil(bins / n)`, the
/// last PEs fewer) and that they match, the samples it holds add up to
/// every PE's draws, and PE 0 gives that total once.
fn check_output(what: &str, stdout: &[String], n: u32, samples: u64, bins: usize) {
    let per_pe = bins.div_ceil(n as usize);
    let total = u64::from(n) * samples;
    let mut held = 0u64;
    for pe in 0..n {
        let prefix = format!("PE {pe} of {n}: ");
        let mine: Vec<&String> = stdout.iter().filter(|l| l.starts_with(&prefix)).collect();
        assert_eq!(mine.len(), 1, "{what}: PE {pe}: {stdout:?}");
        let start = (pe as usize * per_pe).min(bins);
        let owned = start..(start + per_pe).min(bins);
        let line = mine[0];
        let count = line
            .split_whitespace()
            .skip_while(|w| *w != "hold")
            .nth(1)
            .and_then(|c| c.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{what}: no sample count in {line:?}"));
        let want =
            format!("{prefix}bins {owned:?} hold {count} samples, all match the senders' counts");
        assert_eq!(*line, want, "{what}: PE {pe}");
        held += count;
    }
    assert_eq!(held, total, "{what}: the PEs' bins hold {held}: {stdout:?}");
    let grand = format!("total: {total} samples in {bins} bins, {total} drawn by {n} PEs");
    assert_eq!(
        stdout.iter().filter(|l| **l == grand).count(),
        1,
        "{what}: want {grand:?} once in {stdout:?}"
    );
    assert_eq!(stdout.len(), n as usize + 1, "{what}: {stdout:?}");
}

#[test]
fn histogram_of_four_pes_over_shm_and_over_tcp() {
    histogram_job("self,shm", 4, 100_000, 1000, &[]);
    histogram_job(
        "self,tcp",
        4,
        100_000,
        1000,
        &["--param", "btl_tcp_if_include=lo"],
    );
}

#[test]
fn histogram_with_bins_the_pe_count_does_not_divide() {
    // 1000 bins: 334, 334 and 332 on three PEs.
    histogram_job("self,shm", 3, 50_000, 1000, &[]);
    // 1003 bins: 126 on seven PEs, 121 on the last.
    histogram_job("self,shm", 8, 20_000, 1003, &[]);
    // Fewer bins than PEs: the last three own none.
    histogram_job("self,shm", 8, 1000, 5, &[]);
}

#[test]
fn histogram_of_three_pes_over_tcp_with_uneven_bins() {
    histogram_job(
        "self,tcp",
        3,
        20_000,
        1000,
        &["--param", "btl_tcp_if_include=lo"],
    );
}

#[test]
fn shmem_counter_counts_every_pe_once_over_shm_and_tcp() {
    for (btl, path, extra) in [
        ("self,shm", "Mapped", &[][..]),
        (
            "self,tcp",
            "Remote",
            &["--param", "btl_tcp_if_include=lo"][..],
        ),
    ] {
        let mut args = vec!["-n", "3"];
        args.extend_from_slice(extra);
        args.push("--");
        let mut cmd = fireopal_run(&args);
        cmd.arg(counter()).env("FIREOPAL_BTL", btl);
        let (status, mut stdout, stderr) = Running::start(&mut cmd).finish(LIMIT);
        assert!(status.success(), "{btl}: {status}: {stderr}");
        stdout.sort();
        // PE 0 reaches itself; the others see the PE before them, which
        // saw some value below 3.
        assert_eq!(stdout.len(), 3, "{btl}: {stdout:?}");
        assert!(
            stdout[0].starts_with("PE 0 of 3: counter 3, the previous PE saw "),
            "{stdout:?}"
        );
        assert!(stdout[0].ends_with(", path to PE 0 Own"), "{stdout:?}");
        for (pe, line) in stdout.iter().enumerate().skip(1) {
            let want = format!("PE {pe} of 3: counter 3, the previous PE saw ");
            assert!(line.starts_with(&want), "{btl}: {line}");
            assert!(
                line.ends_with(&format!(", path to PE 0 {path}")),
                "{btl}: {line}"
            );
        }
        let seen: Vec<u64> = stdout
            .iter()
            .map(|l| {
                l.split("saw ")
                    .nth(1)
                    .and_then(|r| r.split(',').next())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{btl}: {l}"))
            })
            .collect();
        // Every fetch-add saw a different count: 0, 1 and 2 in some order.
        let mut sorted = seen.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [0, 1, 2], "{btl}: {stdout:?}");
    }
}
