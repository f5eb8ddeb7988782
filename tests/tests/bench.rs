//! `fireopal bench` end to end, in its quick form (the one-sided ones also
//! at full length): every benchmark runs as a two-rank job over shm and
//! over tcp (and alone over `self`), ends by itself, and prints a row per
//! size. The one-sided benchmarks check the bytes they moved last, so a
//! transport that completes without moving data fails them. The figures
//! themselves belong in docs/BENCHMARKS.md, not here.

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
    let args: Vec<&str> = ["--quick"].iter().chain(more).copied().collect();
    bench_full(what, btl, ranks, &args, Duration::from_secs(300))
}

/// `fireopal bench <what> --btl <btl> <more>`, at full length unless
/// `more` says `--quick`, killed after `limit`.
fn bench_full(what: &str, btl: &str, ranks: u32, more: &[&str], limit: Duration) -> String {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = Command::new(&host);
    if ranks > 1 {
        cmd.args(["run", "-n", &ranks.to_string(), "--"]).arg(&host);
    }
    cmd.args(["bench", what, "--btl", btl]).args(more);
    let out = run_with_timeout(&mut cmd, limit);
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

/// The layer's cost is measured in one job over each transport: the two
/// ping-pongs alternate, and each size gets both medians and the spread
/// of the rounds' differences.
#[test]
fn layer_alternates_both_pingpongs_over_shm_tcp_and_self() {
    for (btl, ranks) in [("shm", 2), ("tcp", 2), ("self", 1)] {
        let more = ["--rounds", "3", "--sizes", "0,8,65536"];
        let table = bench_with("layer", btl, ranks, &more);
        assert!(table.starts_with("# fireopal layer: "), "{table}");
        assert!(table.contains(&format!("over btl {btl}[")), "{table}");
        assert!(table.contains("3 alternated rounds"), "{table}");
        let rows: Vec<Vec<&str>> = table
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim_start().starts_with("size"))
            .map(|l| l.split_whitespace().collect())
            .collect();
        let sizes: Vec<String> = rows.iter().map(|r| r[..2].join(" ")).collect();
        assert_eq!(sizes, ["0 B", "8 B", "64 KiB"], "{table}");
        for r in &rows {
            assert_eq!(r.len(), 7, "{table}");
            let figures: Vec<f64> = r[2..]
                .iter()
                .map(|f| f.parse().unwrap_or(f64::NAN))
                .collect();
            assert!(figures[0] > 0.0 && figures[1] > 0.0, "{table}");
            // The median difference lies within the rounds' spread.
            assert!(
                figures[3] <= figures[2] && figures[2] <= figures[4],
                "{table}"
            );
        }
    }
    // A usage error: status 2, with the reason.
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let out = run_with_timeout(
        Command::new(&host).args(["bench", "layer", "--rounds", "0"]),
        Duration::from_secs(60),
    );
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("--rounds 0: expected a count above 0"),
        "{}",
        out.stderr
    );
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

/// `--sizes` picks the rows of put and get too; a size the window cannot
/// hold is refused before anything runs.
#[test]
fn put_and_get_take_sizes() {
    for what in ["put", "get"] {
        let table = bench_with(what, "self", 1, &["--sizes", "64,65536"]);
        assert_eq!(sizes(&table), ["64 B", "64 KiB"], "{table}");
    }
    refused(
        &["bench", "put", "--btl", "self", "--sizes", "8,4194305"],
        "--sizes 4194305: the window holds 4194304 bytes",
    );
}

/// `fireopal <args>` ends with status 1 and says `why` on stderr.
fn refused(args: &[&str], why: &str) {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let out = run_with_timeout(Command::new(&host).args(args), Duration::from_secs(60));
    assert_eq!(
        out.code,
        Some(1),
        "{args:?}\nstdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
    assert!(out.stderr.contains(why), "{args:?}: {}", out.stderr);
}

#[test]
fn shmem_benches_take_sizes() {
    let out = bench_with("shmem", "self", 1, &["--sizes", "8,65536"]);
    let tables: Vec<String> = out
        .split("# fireopal ")
        .skip(1)
        .map(|t| format!("# fireopal {t}"))
        .collect();
    assert_eq!(tables.len(), 3, "{out}");
    assert_eq!(sizes(&tables[0]), ["8 B", "64 KiB"], "{out}");
    assert_eq!(sizes(&tables[1]), ["8 B", "64 KiB"], "{out}");
    assert_eq!(sizes(&tables[2]), ["8 B"], "the atomic is one word: {out}");
    for bad in ["0", "4194305"] {
        refused(
            &["bench", "shmem-put", "--btl", "self", "--sizes", bad],
            &format!("--sizes {bad}: the symmetric buffer holds 1 to 4194304 bytes"),
        );
    }
}

#[test]
fn shmem_over_shm_tcp_and_self() {
    for (btl, ranks, path) in [
        ("shm", 2, "mapped heap"),
        ("tcp", 2, "transport"),
        ("self", 1, "own heap"),
    ] {
        let out = bench("shmem", btl, ranks);
        let tables: Vec<&str> = out.split("# fireopal ").skip(1).collect();
        assert_eq!(tables.len(), 3, "{out}");
        for (table, what) in tables
            .iter()
            .zip(["shmem-put", "shmem-get", "shmem-atomic"])
        {
            let table = format!("# fireopal {table}");
            assert!(
                table.starts_with(&format!("# fireopal {what}: ")),
                "{table}"
            );
            assert!(table.contains(&format!("over {path} (btl ")), "{table}");
            let want: &[&str] = if what == "shmem-atomic" {
                &["8 B"]
            } else {
                &[
                    "8 B", "64 B", "512 B", "4 KiB", "32 KiB", "256 KiB", "1 MiB", "4 MiB",
                ]
            };
            assert_eq!(sizes(&table), want, "{table}");
        }
    }
}

/// A rank that only serves the other's puts or gets is not taken for a
/// stalled one: at full length, over tcp with socket buffers so small
/// that every operation trickles (longer than the bench's 30 s stall
/// limit, about 40 s each in a debug build on an idle machine), and over
/// shm, whose target sees nothing of the operations that land in its
/// memory, both benches finish. The time limit only guards against a
/// hang: a busy machine stretches the run.
///
/// Its meaning needs a run longer than the stall limit, several minutes on
/// a loaded machine, so it is left out of the default run; the transport's
/// own count is checked by `serving_puts_and_gets_counts_as_work_at_the_target`
/// in `plugins/btl-tcp/tests/rdma.rs`. Run it with
/// `cargo test -p fireopal-tests --test bench -- --ignored full_length`.
#[test]
#[ignore = "longer than the bench's 30 s stall limit by design; run with --ignored"]
fn full_length_put_and_get_finish_while_the_target_only_serves() {
    let tiny = [
        "--param",
        "btl_tcp_sndbuf=8k",
        "--param",
        "btl_tcp_rcvbuf=8k",
        "--param",
        "btl_tcp_write_chunk=2k",
    ];
    for what in ["put", "get"] {
        for (btl, more) in [("tcp", &tiny[..]), ("shm", &[][..])] {
            let table = bench_full(what, btl, 2, more, Duration::from_secs(1800));
            assert_eq!(sizes(&table).len(), 7, "{what} over {btl}\n{table}");
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

/// Whether `name` is an executable on `PATH`.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}

/// The line of `scripts/compare_report.py` before its table of the rounds
/// in each contender's faster state.
const FASTER: &str = "# the rounds in each contender's faster state only";

/// The line of `scripts/compare_report.py` before its tables of ratios
/// paired within rounds.
const PAIRED: &str = "# paired: fireopal / peer within each round";

/// The data rows of the markdown tables in `text`.
fn table_rows(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| size"))
        .collect()
}

/// The report tells rounds the host ran in its slow state (latencies at
/// several sizes well over the contender's best) and gives the medians of
/// the others apart; a single slow size is not enough. It also divides
/// each round's figures by the peer's of the same round.
#[test]
fn compare_report_sets_apart_the_rounds_of_the_hosts_slow_state() {
    if !on_path("python3") {
        eprintln!("skipped: python3 not found");
        return;
    }
    let tmp = fireopal_tests::TempDir::new("report").unwrap_or_else(|e| panic!("{e}"));
    let dir = tmp.path();
    let fireopal = |lat: [f64; 3]| {
        let rows: Vec<String> = [8, 1024, 1 << 20]
            .iter()
            .zip(lat)
            .map(|(s, l)| format!(r#"{{"size":{s},"latency_us":{l},"bandwidth_mbs":1.0}}"#))
            .collect();
        format!(r#"{{"benchmark":"p2p","results":[{}]}}"#, rows.join(","))
    };
    let mpi = |lat: [f64; 3]| {
        format!(
            "# MPI pingpong\n       8 B {:.2} 1.0\n     1 KiB {:.2} 1.0\n     1 MiB {:.2} 1.0\n",
            lat[0], lat[1], lat[2]
        )
    };
    let files = [
        // Two fast rounds each; fireopal's third is slow at every size,
        // Open MPI's third only at one (noise, not the slow state).
        ("round-1-fireopal.txt", fireopal([1.0, 2.0, 100.0])),
        ("round-2-fireopal.txt", fireopal([1.1, 2.1, 110.0])),
        ("round-3-fireopal.txt", fireopal([2.5, 5.0, 400.0])),
        ("round-1-openmpi.txt", mpi([2.0, 4.0, 200.0])),
        ("round-2-openmpi.txt", mpi([2.0, 4.0, 220.0])),
        ("round-3-openmpi.txt", mpi([2.0, 9.0, 200.0])),
        (
            "machine.txt",
            "bench=p2p\nbtl=shm\npeers=openmpi\n".to_string(),
        ),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("{e}"));
    }
    let out = Command::new("python3")
        .arg(fireopal_tests::workspace_root().join("scripts/compare_report.py"))
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains("fireopal 1 of 3, openmpi 0 of 3"),
        "slow rounds\n{report}"
    );
    let (all, rest) = stdout
        .split_once(FASTER)
        .unwrap_or_else(|| panic!("{report}"));
    let (faster, paired) = rest
        .split_once(PAIRED)
        .unwrap_or_else(|| panic!("{report}"));
    // All rounds: fireopal's medians 1.1 / 2.1 / 110 against 2 / 4 / 200.
    assert!(
        all.contains("| 1 MiB | 110.00 (100.00-400.00) | 200.00 (200.00-220.00) | 0.55 |"),
        "{report}"
    );
    // Its faster state: fireopal's two fast rounds against all three of
    // Open MPI's, latency then bandwidth.
    let rows = table_rows(faster);
    assert_eq!(rows.len(), 3 + 3, "{report}");
    assert!(
        rows[3..]
            .iter()
            .all(|r| r.ends_with("| 1.00 (1.00-1.00) | 1.00 |")),
        "{report}"
    );
    assert!(
        rows.contains(&"| 1 MiB | 105.00 (100.00-110.00) | 200.00 (200.00-220.00) | 0.53 |"),
        "{report}"
    );
    assert!(
        rows.contains(&"| 8 B | 1.05 (1.00-1.10) | 2.00 (2.00-2.00) | 0.53 |"),
        "{report}"
    );
    // Paired within rounds: at 1 MiB 100/200, 110/220 and 400/200; the
    // first two rounds have both in their faster state.
    let rows = table_rows(paired);
    assert_eq!(rows.len(), 3 + 3, "{report}");
    assert!(
        rows.contains(&"| 1 MiB | 0.50 (0.50-2.00) | [2] 0.50 |"),
        "{report}"
    );
    assert!(
        rows[3..]
            .iter()
            .all(|r| r.ends_with("| 1.00 (1.00-1.00) | [2] 1.00 |")),
        "{report}"
    );
}

/// Whether what `scripts/compare.sh` needs with MPICH as the peer is
/// installed; if not, says so (and fails where `REQUIRE_MPICH_TESTS=1`).
fn compare_tools_found() -> bool {
    let needed = ["mpicc.mpich", "mpiexec.hydra", "python3", "cc"];
    let Some(missing) = needed.iter().find(|n| !on_path(n)) else {
        return true;
    };
    assert!(
        std::env::var("REQUIRE_MPICH_TESTS").as_deref() != Ok("1"),
        "{missing} not found and REQUIRE_MPICH_TESTS=1 (install Debian's mpich libmpich-dev)"
    );
    eprintln!("skipped: {missing} not found (install Debian's mpich libmpich-dev)");
    false
}

/// `bash scripts/compare.sh` with the built host as its fireopal.
fn compare_sh() -> Command {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = Command::new("bash");
    cmd.arg(fireopal_tests::workspace_root().join("scripts/compare.sh"))
        .env("FIREOPAL", host);
    cmd
}

/// `scripts/compare.sh` runs fireopal and an MPI peer for every round,
/// keeps each run's output, and reports every size with a ratio, as table
/// and as JSON.
#[test]
fn compare_script_runs_both_sides_every_round_and_reports_ratios() {
    if !compare_tools_found() {
        return;
    }
    let tmp = fireopal_tests::TempDir::new("compare").unwrap_or_else(|e| panic!("{e}"));
    let (raw, json) = (tmp.path().join("raw"), tmp.path().join("figures.json"));
    let mut cmd = compare_sh();
    cmd.args([
        "--btl", "shm", "--rounds", "2", "--quick", "--peers", "mpich",
    ])
    .arg("--no-limits")
    .arg("--out")
    .arg(&raw)
    .arg("--json")
    .arg(&json);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(600));
    let report = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(!out.timed_out, "compare.sh timed out\n{report}");
    assert_eq!(out.code, Some(0), "compare.sh\n{report}");

    for round in 1..=2 {
        for who in ["fireopal", "mpich"] {
            let f = raw.join(format!("round-{round}-{who}.txt"));
            assert!(f.is_file(), "{} missing\n{report}", f.display());
        }
    }
    assert!(
        out.stdout.starts_with("# pingpong over shm: "),
        "no machine line\n{report}"
    );
    // Two tables (latency, bandwidth); every size in each, with a ratio.
    // Two more, of the rounds in the host's faster state, follow when a
    // round ran in the slow one (a busy machine can put one there). The
    // paired ratios come last, every size again.
    let (tables, paired) = out
        .stdout
        .split_once(PAIRED)
        .unwrap_or_else(|| panic!("no paired ratios\n{report}"));
    let (all, faster) = tables.split_once(FASTER).unwrap_or((tables, ""));
    let paired = table_rows(paired);
    assert_eq!(paired.len(), 8 + 7, "paired rows\n{report}");
    for row in &paired {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 3, "paired row {row:?}");
    }
    let rows = table_rows(all);
    assert_eq!(rows.len(), 8 + 7, "rows\n{report}");
    let faster = table_rows(faster);
    assert!(faster.is_empty() || faster.len() == 8 + 7, "rows\n{report}");
    let rows: Vec<&str> = rows.into_iter().chain(faster).collect();
    for row in &rows {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 4, "row {row:?}");
        // A number, rounded to two places: a contender slowed down by the
        // tests running beside this one may print 0.00.
        let ratio: f64 = cells[3].parse().unwrap_or(-1.0);
        assert!(ratio >= 0.0 && ratio.is_finite(), "ratio in {row:?}");
    }
    let doc = std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("{e}\n{report}"));
    // Per size: fireopal and mpich, latency and bandwidth, each with both
    // rounds' values (the faster state's figures are not repeated there).
    assert_eq!(doc.matches("\"runs\"").count(), 8 * 2 * 2, "{doc}");
    assert_eq!(doc.matches("\"ratio\"").count(), 8, "{doc}");
    assert_eq!(doc.matches("\"paired\"").count(), 8, "{doc}");
}

/// `--sizes` measures the same sizes on both sides, in place of the
/// default ones, and the machine line says which. A size that is not a
/// whole number of KiB prints in bytes on both sides, so it pairs up.
#[test]
fn compare_script_measures_the_sizes_asked_for_on_both_sides() {
    if !compare_tools_found() {
        return;
    }
    let tmp = fireopal_tests::TempDir::new("compare-sizes").unwrap_or_else(|e| panic!("{e}"));
    let raw = tmp.path().join("raw");
    let mut cmd = compare_sh();
    cmd.args(["--bench", "p2p", "--btl", "shm", "--rounds", "1", "--quick"])
        .args(["--peers", "mpich", "--no-limits", "--sizes", "16384,33000"])
        .arg("--out")
        .arg(&raw);
    let out = run_with_timeout(&mut cmd, Duration::from_secs(600));
    let report = format!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(!out.timed_out, "compare.sh timed out\n{report}");
    assert_eq!(out.code, Some(0), "compare.sh\n{report}");
    assert!(
        out.stdout
            .lines()
            .next()
            .is_some_and(|l| l.contains("sizes 16384,33000")),
        "machine line\n{report}"
    );
    let (tables, _) = out
        .stdout
        .split_once(PAIRED)
        .unwrap_or((out.stdout.as_str(), ""));
    let (all, _) = tables.split_once(FASTER).unwrap_or((tables, ""));
    let labels: Vec<&str> = table_rows(all)
        .iter()
        .map(|r| r.trim_matches('|').split('|').next().unwrap_or("").trim())
        .collect();
    assert_eq!(
        labels,
        ["16 KiB", "33000 B", "16 KiB", "33000 B"],
        "latency and bandwidth rows\n{report}"
    );
    let mpi = std::fs::read_to_string(raw.join("round-1-mpich.txt"))
        .unwrap_or_else(|e| panic!("{e}\n{report}"));
    assert_eq!(sizes(&mpi), ["16 KiB", "33000 B"], "{mpi}");
    let bad = compare_sh()
        .args(["--bench", "p2p", "--sizes", "16k"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(bad.status.code(), Some(2), "a malformed list is refused");
}
