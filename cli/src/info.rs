//! `fireopal info`: every component seen, its status, and every parameter.

use std::process::ExitCode;

use fireopal::param::Source;
use fireopal::plugin::{Origin, Registry, Status};
use fireopal_abi::param::ParamValue;

use super::args::{self, Arg, Args, Stop};
use super::json::Json;
use super::CommonArgs;

pub(super) const SYNOPSIS: &str = "fireopal info [--json] [--param name=value]...";

const USAGE: &str = "usage: fireopal info [--json] [--param name=value]...

Lists every component found (built-in or the file it came from), its
version and status, then every parameter with its value and where the
value came from. Under `fireopal run`, shows what a rank of that job sees.

  --json                the same as one JSON object
  --param name=value    set a parameter (beats FIREOPAL_<NAME>)
";

fn parse(args: &[String]) -> Result<(CommonArgs, bool), Stop> {
    let (mut common, mut json) = (CommonArgs::default(), false);
    let mut it = Args::new(args);
    while let Some(arg) = it.next()? {
        if common.take(arg, &mut it)? {
            continue;
        }
        match arg {
            Arg::Opt("--json") => json = true,
            other => return Err(args::unknown(other)),
        }
    }
    Ok((common, json))
}

pub(crate) fn main(args: &[String]) -> ExitCode {
    let (common, json) = match parse(args) {
        Ok(parsed) => parsed,
        Err(stop) => return stop.exit("fireopal info", USAGE),
    };
    let mut options = common.discovery_options();
    // Under a launcher, show what a rank of that job sees (transports that
    // need node-local peers, for one).
    let boot = if std::env::var_os("PMI_FD").is_some() {
        match fireopal::bootstrap::Bootstrap::init() {
            Ok(b) => {
                options.job = b.job_info();
                Some(b)
            }
            Err(e) => {
                eprintln!("fireopal info: joining the job: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        None
    };
    let mut registry = Registry::discover(&options);
    // A component whose open fails is disabled in a job: show it so.
    registry.check_btls_open();
    // In a job of several ranks, the lanes to every peer (collective: the
    // messenger exchanges addresses).
    // and the one-sided layer's heap and paths (collective: the runtime
    // starts as every rank's does).
    let mut routes = None;
    let mut one_sided = None;
    if let Some(b) = boot {
        if b.size() > 1 {
            // The registry above has warned about unknown settings.
            let mut again = options.clone();
            again
                .command_line
                .retain(|(name, _)| name != "warn_unknown_params");
            again
                .command_line
                .push(("warn_unknown_params".into(), "false".into()));
            match fireopal::Runtime::with_bootstrap(b, again) {
                Ok(mut rt) => {
                    routes = Some(Routes::of(rt.messenger()));
                    one_sided = Some(OneSided::of(&mut rt));
                    if let Err(e) = rt.finalize() {
                        eprintln!("fireopal info: leaving the job: {e}");
                    }
                }
                Err(e) => eprintln!("fireopal info: starting the runtime: {e}"),
            }
        } else if let Err(e) = b.finalize() {
            eprintln!("fireopal info: leaving the job: {e}");
        }
    }
    if json {
        let mut out = to_json(&registry);
        if let Json::Obj(fields) = &mut out {
            if let Some(r) = &routes {
                fields.push(("routes", r.to_json()));
            }
            if let Some(o) = &one_sided {
                fields.push(("one_sided", o.to_json()));
            }
        }
        println!("{}", out.render());
    } else {
        print!("{}", to_text(&registry));
        if let Some(r) = &routes {
            print!("{}", r.to_text());
        }
        if let Some(o) = &one_sided {
            print!("{}", o.to_text());
        }
    }
    for e in registry.errors() {
        eprintln!(
            "fireopal info: error: {}",
            super::discovery_error(&registry, e)
        );
    }
    if registry.errors().iter().any(super::is_usage_error) {
        ExitCode::from(2)
    } else if registry.errors().is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// This rank's symmetric heap and how its one-sided operations reach
/// every PE.
struct OneSided {
    rank: u32,
    base: usize,
    symmetric: bool,
    paths: Vec<String>,
}

impl OneSided {
    fn of(rt: &mut fireopal::Runtime) -> Self {
        let rank = rt.rank();
        let base = rt.heap().base() as usize;
        let mut sh = rt.shmem();
        let symmetric = sh.symmetric_addresses();
        let paths = (0..sh.n_pes())
            .map(|pe| match sh.path_kind(pe) {
                Ok(fireopal::shmem::PathKind::Own) => "own".to_owned(),
                Ok(fireopal::shmem::PathKind::Mapped) => "mapped".to_owned(),
                Ok(fireopal::shmem::PathKind::Remote) => "transport".to_owned(),
                Err(e) => format!("unreachable ({e})"),
            })
            .collect();
        OneSided {
            rank,
            base,
            symmetric,
            paths,
        }
    }

    fn to_text(&self) -> String {
        use std::fmt::Write;
        let how = if self.symmetric {
            "the agreed address on every PE: a pointer into it means the same object on each"
        } else {
            "not at the agreed address on every PE: operations carry offsets"
        };
        let mut out = format!(
            "
one-sided layer of rank {}: symmetric heap at {:#x}, {how}
",
            self.rank, self.base
        );
        for (pe, path) in self.paths.iter().enumerate() {
            let _ = writeln!(out, "  PE {pe}: {path}");
        }
        out
    }

    fn to_json(&self) -> Json {
        Json::Obj(vec![
            ("rank", Json::Int(i128::from(self.rank))),
            ("heap_base", Json::Int(self.base as i128)),
            ("symmetric_addresses", Json::Bool(self.symmetric)),
            (
                "paths",
                Json::Arr(self.paths.iter().map(|p| Json::str(p.clone())).collect()),
            ),
        ])
    }
}

/// This rank's lanes to every rank of the job.
struct Routes {
    rank: u32,
    peers: Vec<(u32, Vec<fireopal::btl::LaneInfo>)>,
}

impl Routes {
    fn of(m: &fireopal::btl::Messenger) -> Self {
        Routes {
            rank: m.rank(),
            peers: (0..m.size()).map(|p| (p, m.lanes(p))).collect(),
        }
    }

    fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut out = format!("\nroutes of rank {} (module, weight):\n", self.rank);
        for (peer, lanes) in &self.peers {
            let list: Vec<String> = lanes
                .iter()
                .map(|l| format!("{}[{}] {} Mb/s", l.component, l.index, l.bandwidth_mbps))
                .collect();
            let _ = writeln!(out, "  rank {peer}: {}", list.join(", "));
        }
        out
    }

    fn to_json(&self) -> Json {
        Json::Obj(vec![
            ("rank", Json::Int(i128::from(self.rank))),
            (
                "peers",
                Json::Arr(
                    self.peers
                        .iter()
                        .map(|(peer, lanes)| {
                            Json::Obj(vec![
                                ("rank", Json::Int(i128::from(*peer))),
                                (
                                    "lanes",
                                    Json::Arr(
                                        lanes
                                            .iter()
                                            .map(|l| {
                                                Json::Obj(vec![
                                                    ("component", Json::str(l.component.clone())),
                                                    ("index", Json::Int(l.index as i128)),
                                                    (
                                                        "weight_mbps",
                                                        Json::Int(i128::from(l.bandwidth_mbps)),
                                                    ),
                                                ])
                                            })
                                            .collect(),
                                    ),
                                ),
                            ])
                        })
                        .collect(),
                ),
            ),
        ])
    }
}

fn status_fields(status: &Status) -> (&'static str, Option<u32>, Option<String>) {
    match status {
        Status::Available { priority } => ("available", Some(*priority), None),
        Status::Unavailable { reason } => ("unavailable", None, Some(reason.clone())),
        Status::NotLoaded(e) => ("not_loaded", None, Some(e.to_string())),
        Status::Excluded { by } => (
            "excluded",
            None,
            Some(format!("excluded by parameter {by}")),
        ),
    }
}

fn value_json(v: &ParamValue) -> Json {
    match v {
        ParamValue::Bool(b) => Json::Bool(*b),
        ParamValue::Int(i) => Json::Int(i128::from(*i)),
        ParamValue::UInt(u) | ParamValue::Size(u) => Json::Int(i128::from(*u)),
        ParamValue::Str(s) => Json::str(s.as_str()),
    }
}

fn to_json(r: &Registry) -> Json {
    let components = r
        .components()
        .iter()
        .map(|c| {
            let (status, priority, reason) = status_fields(c.status());
            Json::Obj(vec![
                ("framework", Json::str(c.framework().name())),
                ("name", Json::str(c.name())),
                (
                    "origin",
                    match c.origin() {
                        Origin::BuiltIn => Json::str("built-in"),
                        Origin::File(p) => Json::str(p.display().to_string()),
                    },
                ),
                (
                    "version",
                    c.version().map_or(Json::Null, |v| Json::str(v.to_string())),
                ),
                ("status", Json::str(status)),
                (
                    "priority",
                    priority.map_or(Json::Null, |p| Json::Int(i128::from(p))),
                ),
                ("reason", reason.map_or(Json::Null, Json::Str)),
                ("note", c.note().map_or(Json::Null, Json::str)),
                ("selected", Json::Bool(c.is_selected())),
            ])
        })
        .collect();
    let params = r
        .params()
        .iter()
        .map(|p| {
            Json::Obj(vec![
                ("name", Json::str(&p.name)),
                ("owner", Json::str(&p.owner)),
                ("type", Json::str(p.default.type_name())),
                ("value", value_json(&p.value)),
                ("default", value_json(&p.default)),
                ("source", Json::str(p.source.to_string())),
                ("env", Json::str(fireopal::param::env_var_name(&p.name))),
                ("help", Json::str(&p.help)),
                (
                    "error",
                    p.error
                        .as_ref()
                        .map_or(Json::Null, |e| Json::str(e.to_string())),
                ),
            ])
        })
        .collect();
    Json::Obj(vec![
        ("version", Json::str(env!("CARGO_PKG_VERSION"))),
        (
            "interface_version",
            Json::str(fireopal_abi::INTERFACE_VERSION),
        ),
        (
            "search_path",
            Json::Arr(
                r.search_path()
                    .iter()
                    .map(|p| Json::str(p.display().to_string()))
                    .collect(),
            ),
        ),
        ("skipped", skipped_json(r)),
        ("components", Json::Arr(components)),
        ("memory_monitor", monitor_json(r)),
        ("parameters", Json::Arr(params)),
        (
            "errors",
            Json::Arr(
                r.errors()
                    .iter()
                    .map(|e| Json::str(e.to_string()))
                    .collect(),
            ),
        ),
    ])
}

/// The memory monitor in use and why the others are not.
fn monitor_json(r: &Registry) -> Json {
    match fireopal::memory::monitor_report(r.params()) {
        Ok(report) => Json::Obj(vec![
            ("active", Json::str(report.active.to_string())),
            (
                "declined",
                Json::Arr(
                    report
                        .declined
                        .iter()
                        .map(|(kind, why)| {
                            Json::Obj(vec![
                                ("name", Json::str(kind.to_string())),
                                ("reason", Json::str(why.clone())),
                            ])
                        })
                        .collect(),
                ),
            ),
            ("summary", Json::str(report.to_string())),
        ]),
        Err(e) => Json::Obj(vec![("error", Json::str(e.to_string()))]),
    }
}

fn to_text(r: &Registry) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "fireopal {} (plugin interface fireopal-abi {})",
        env!("CARGO_PKG_VERSION"),
        fireopal_abi::INTERFACE_VERSION
    );
    let _ = writeln!(out, "\nsearch path:");
    for p in r.search_path() {
        let _ = writeln!(out, "  {}", p.display());
    }
    out.push_str(&skipped_text(r));
    let _ = writeln!(out, "\ncomponents:");
    let versions: Vec<String> = r
        .components()
        .iter()
        .map(|c| {
            c.version()
                .map_or_else(|| "-".to_owned(), |v| v.to_string())
        })
        .collect();
    // Each column as wide as its longest entry, so long names stay aligned.
    let components = r.components();
    let widest = |lens: &mut dyn Iterator<Item = usize>| lens.max().unwrap_or(0);
    let fw = widest(&mut components.iter().map(|c| c.framework().name().len()));
    let name = widest(&mut components.iter().map(|c| c.name().len()));
    let ver = widest(&mut versions.iter().map(String::len));
    for (c, version) in components.iter().zip(&versions) {
        let selected = if c.is_selected() { " [selected]" } else { "" };
        let note = c.note().map(|n| format!("; {n}")).unwrap_or_default();
        let _ = writeln!(
            out,
            "  {:<fw$} {:<name$} {:<ver$} {}{}{}\n  {:<fw$} {:<name$} {:<ver$} from {}",
            c.framework().name(),
            c.name(),
            version,
            c.status(),
            note,
            selected,
            "",
            "",
            "",
            c.origin()
        );
    }
    let _ = writeln!(out, "\nregistration cache:");
    match fireopal::memory::monitor_report(r.params()) {
        Ok(report) => {
            let _ = writeln!(out, "  {report}");
        }
        Err(e) => {
            let _ = writeln!(out, "  error: {e}");
        }
    }
    let _ = writeln!(out, "\nparameters:");
    for p in r.params().iter() {
        if let Some(e) = &p.error {
            let _ = writeln!(out, "  {} = error: {e}\n      {}", p.name, p.help);
            continue;
        }
        let origin = match p.source {
            Source::Default => "default".to_owned(),
            _ => format!("default {}; from {}", shown(&p.default), p.source),
        };
        let _ = writeln!(
            out,
            "  {} = {:?} ({}, {origin})\n      {}",
            p.name,
            p.value.to_string(),
            p.default.type_name(),
            p.help
        );
    }
    out
}

/// A default as `info` shows it: quoted, or `empty`.
fn shown(v: &ParamValue) -> String {
    match v.to_string() {
        t if t.is_empty() => "empty".to_owned(),
        t => format!("{t:?}"),
    }
}

/// The `skipped:` section: what the plugin search passed over, and why.
fn skipped_text(r: &Registry) -> String {
    let mut out = String::new();
    if !r.skipped().is_empty() {
        out.push_str("\nskipped:\n");
        for s in r.skipped() {
            out.push_str(&format!("  {s}\n"));
        }
    }
    out
}

/// `skipped` of the JSON output: path, reason code and reason text.
fn skipped_json(r: &Registry) -> Json {
    Json::Arr(
        r.skipped()
            .iter()
            .map(|s| {
                Json::Obj(vec![
                    ("path", Json::str(s.path.display().to_string())),
                    ("code", Json::str(s.reason.code())),
                    ("reason", Json::str(s.reason.to_string())),
                ])
            })
            .collect(),
    )
}
