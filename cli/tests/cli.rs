//! The command-line convention of every `fireopal` subcommand: `--help`
//! prints the usage on stdout and exits 0, naming every option the parser
//! takes; a usage error goes to stderr and exits 2, and a value outside a
//! known set names the valid ones; parameters say where their value came
//! from.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const FIREOPAL: &str = env!("CARGO_BIN_EXE_fireopal");

/// Guards against a hang only; every command here ends by itself.
const LIMIT: Duration = Duration::from_secs(120);

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// `fireopal args...` with no launcher variables nor parameters inherited,
/// killed if it outlives [`LIMIT`].
fn fireopal(args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut cmd = Command::new(FIREOPAL);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("PMI_") || k.starts_with("FIREOPAL_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    let mut child = cmd.spawn().expect("start fireopal");
    let pipe = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out = pipe(child.stdout.take().map(|s| Box::new(s) as _));
    let err = pipe(child.stderr.take().map(|s| Box::new(s) as _));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for fireopal") {
            break status;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("fireopal {args:?} still running after {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Out {
        code: status.code(),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// Each subcommand, the options its help must name, and a command line
/// using every one of them, which its parser must take.
const SUBCOMMANDS: [(&[&str], &[&str], &[&str]); 7] = [
    (
        &["run"],
        &[
            "-n N",
            "--param",
            "--tag-output",
            "--bind-to core|none",
            "--",
        ],
        &[
            "-n",
            "2",
            "--param",
            "a=1",
            "--tag-output",
            "--bind-to",
            "core",
        ],
    ),
    (
        &["info"],
        &["--json", "--param"],
        &["--json", "--param", "a=1"],
    ),
    (
        &["bench"],
        &[
            "pingpong", "put|get", "--btl", "--from", "--json", "--quick", "--param",
        ],
        &[],
    ),
    (
        &["bench", "pingpong"],
        &[
            "--btl NAME",
            "--from auto|buffer|heap|user|copy|registered",
            "--json",
            "--quick",
            "--param",
        ],
        &[
            "--btl", "tcp", "--from", "user", "--json", "--quick", "--param", "a=1",
        ],
    ),
    (
        &["bench", "put"],
        &["--btl NAME", "--json", "--quick", "--param"],
        &["--btl", "tcp", "--json", "--quick", "--param", "a=1"],
    ),
    (
        &["bench", "get"],
        &["--btl NAME", "--json", "--quick", "--param"],
        &["--btl=tcp", "--json", "--quick", "--param=a=1"],
    ),
    (
        &["conformance"],
        &["--btl NAME", "--memheap NAME", "--case", "--param"],
        &["--btl", "tcp", "--case", "sizes", "--param", "a=1"],
    ),
];

fn assert_help(args: &[&str], options: &[&str]) -> String {
    let out = fireopal(args, &[]);
    assert_eq!(out.code, Some(0), "{args:?}: {}", out.stderr);
    assert!(out.stderr.is_empty(), "{args:?}: {}", out.stderr);
    assert!(
        out.stdout.starts_with("usage: fireopal"),
        "{args:?}: {}",
        out.stdout
    );
    for option in options {
        assert!(
            out.stdout.contains(option),
            "{args:?}: help does not name {option:?}:\n{}",
            out.stdout
        );
    }
    out.stdout
}

#[test]
fn every_subcommand_answers_help_naming_every_option() {
    for (command, options, _) in SUBCOMMANDS {
        for help in ["--help", "-h"] {
            assert_help(&[command, &[help]].concat(), options);
        }
    }
    let mut everything: Vec<&str> = SUBCOMMANDS
        .iter()
        .flat_map(|(_, options, _)| options.iter().copied())
        .collect();
    everything.extend(["run", "info", "bench", "conformance", "version", "help"]);
    for help in [&["--help"][..], &["-h"], &["help"]] {
        assert_help(help, &everything);
    }
}

#[test]
fn every_option_the_help_names_is_taken_by_the_parser() {
    // Options are parsed in order, so help after all of them is reached
    // only if each was taken.
    for (command, options, used) in SUBCOMMANDS {
        let args = [command, used, &["--help"]].concat();
        assert_help(&args, options);
    }
}

#[test]
fn usage_errors_go_to_stderr_with_exit_2_naming_the_valid_values() {
    for (args, needle) in [
        (
            &["nosuch"][..],
            "unknown command \"nosuch\": expected one of run, info, bench, conformance, \
             version or help",
        ),
        (&[], "no command given"),
        (&["info", "--frob"], "unknown option \"--frob\""),
        (&["info", "extra"], "unexpected argument \"extra\""),
        (&["info", "--param", "Bad"], "--param expects name=value"),
        (&["info", "--json=yes"], "--json takes no value"),
        (
            &["bench", "nosuch"],
            "unknown benchmark \"nosuch\": expected one of pingpong, p2p, layer, registration, put, get, shmem, shmem-put, shmem-get or shmem-atomic",
        ),
        (
            &["bench"],
            "which benchmark? expected one of pingpong, p2p, layer, registration, put, get, shmem, shmem-put, shmem-get or shmem-atomic",
        ),
        (
            &["bench", "pingpong", "--from", "x"],
            "--from \"x\": expected one of auto, buffer, heap, user, copy or registered",
        ),
        (
            &["bench", "put", "--from", "user"],
            "unknown option \"--from\"",
        ),
        (&["bench", "get", "--btl"], "--btl needs a value"),
        (
            &["conformance", "--btl", "self", "--case", "nosuch"],
            "no case named \"nosuch\": expected one of sizes, many, completions, sendi, \
             rdma, reregistration, unmapped-get, in-place, symmetric-heap or peer-death",
        ),
        (
            &["conformance", "--memheap", "buddy", "--case", "sizes"],
            "no case named \"sizes\": expected one of align, random, symmetric, \
             exhaustion or bad-free",
        ),
        (
            &["conformance"],
            "one of --btl, --memheap, --p2p and --shmem is required",
        ),
        (
            &["run", "-n", "2", "--bind-to", "socket", "--", "true"],
            "--bind-to \"socket\": expected core or none",
        ),
        (
            &["run", "-n", "2", "--frob", "true"],
            "unknown option \"--frob\"",
        ),
    ] {
        let out = fireopal(args, &[]);
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("usage: fireopal"),
            "{args:?}: {}",
            out.stderr
        );
    }
}

#[test]
fn an_unknown_component_lists_the_ones_found() {
    let not_found = "btl component \"nosuch\" was requested but not found on the search path";
    for (args, env) in [
        (
            &["bench", "pingpong", "--quick", "--btl", "nosuch"][..],
            &[][..],
        ),
        (&["conformance", "--btl", "nosuch"], &[]),
        (&["info"], &[("FIREOPAL_BTL", "nosuch")]),
    ] {
        let out = fireopal(args, env);
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(not_found), "{args:?}: {}", out.stderr);
        // The built-in transport is always found.
        let found = out
            .stderr
            .lines()
            .find(|l| l.starts_with("btl components found: "))
            .unwrap_or_else(|| panic!("{args:?}: no list in {}", out.stderr));
        assert!(found.contains("self"), "{args:?}: {found}");
    }
    let out = fireopal(&["conformance", "--memheap", "nosuch"], &[]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("memheap components found: ") && out.stderr.contains("buddy"),
        "{}",
        out.stderr
    );
}

/// The `info` line of parameter `name`.
fn info_line<'a>(stdout: &'a str, name: &str) -> &'a str {
    let head = format!("  {name} = ");
    stdout
        .lines()
        .find(|l| l.starts_with(&head))
        .unwrap_or_else(|| panic!("no line for {name} in {stdout}"))
}

#[test]
fn parameters_name_where_their_value_came_from() {
    let ran = fireopal(
        &[
            "run",
            "-n",
            "1",
            "--param",
            "warn_unknown_params=no",
            "--",
            FIREOPAL,
            "info",
        ],
        &[],
    );
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    assert_eq!(
        info_line(&ran.stdout, "warn_unknown_params"),
        "  warn_unknown_params = \"false\" (bool, default \"true\"; \
         from the command line (--param warn_unknown_params=no))"
    );

    let own = fireopal(&["info", "--param", "warn_unknown_params=no"], &[]);
    assert_eq!(own.code, Some(0), "{}", own.stderr);
    assert_eq!(
        info_line(&own.stdout, "warn_unknown_params"),
        info_line(&ran.stdout, "warn_unknown_params")
    );

    let env = fireopal(&["info"], &[("FIREOPAL_WARN_UNKNOWN_PARAMS", "no")]);
    assert_eq!(env.code, Some(0), "{}", env.stderr);
    assert_eq!(
        info_line(&env.stdout, "warn_unknown_params"),
        "  warn_unknown_params = \"false\" (bool, default \"true\"; \
         from the environment (FIREOPAL_WARN_UNKNOWN_PARAMS=no))"
    );
    // A default is said once; an empty one reads as such.
    assert_eq!(
        info_line(&env.stdout, "plugin_path"),
        "  plugin_path = \"\" (string, default)"
    );

    let bad = fireopal(
        &[
            "run",
            "-n",
            "1",
            "--param",
            "warn_unknown_params=perhaps",
            "--",
            FIREOPAL,
            "info",
        ],
        &[],
    );
    assert!(
        bad.stderr.contains(
            "parameter warn_unknown_params: invalid value \"perhaps\" \
             from the command line (--param warn_unknown_params=perhaps)"
        ),
        "{}",
        bad.stderr
    );
}

#[test]
fn info_columns_fit_long_component_names() {
    let dir = std::env::temp_dir().join(format!("fireopal-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    // Not a library: listed with its reason, under its long name.
    let long = "averyveryverylongname";
    std::fs::write(dir.join(format!("libfireopal_btl_{long}.so")), b"junk").expect("write");
    let out = fireopal(
        &["info"],
        &[("FIREOPAL_PLUGIN_PATH", dir.to_str().unwrap_or(""))],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let table: Vec<&str> = out
        .stdout
        .lines()
        .skip_while(|l| *l != "components:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(table.iter().any(|l| l.contains(long)), "{}", out.stdout);
    // Every status, and every origin below it, starts in the same column.
    let mut columns = Vec::new();
    for pair in table.chunks(2) {
        let [first, second] = pair else {
            panic!("a component without its origin line: {pair:?}");
        };
        let at = second.find("from ").unwrap_or(0);
        let (before, status) = first.split_at(at.min(first.len()));
        assert!(
            before.ends_with(' ') && !status.starts_with(' ') && !status.is_empty(),
            "misaligned:\n{first}\n{second}"
        );
        columns.push(at);
    }
    assert!(
        columns.windows(2).all(|w| w[0] == w[1]),
        "columns differ: {columns:?}\n{}",
        out.stdout
    );
}
