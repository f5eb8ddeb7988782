//! Plugin discovery, loading, ranking, filtering and use, with plugins
//! built out of tree after the host, and every kind of broken plugin.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use abi_stable::sabi_trait::TD_Opaque;
use abi_stable::std_types::{RResult, RSlice};
use fireopal::plugin::{DiscoveryError, Framework, LoadError, Options, Origin, Registry, Status};
use fireopal_abi::btl::{
    BtlEventSink, BtlEventSink_TO, Completion, PeerAddress, Reachability, SendiOutcome,
};
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_tests::{
    build_fixture, cc_shared, copy_tree, fixture_source, fixture_target_dir, host_binary,
    patch_once,
};

struct Fixtures {
    /// alpha (priority 30), beta (50), gamma (10).
    good: PathBuf,
    /// One plugin file per way of being broken.
    broken: PathBuf,
    /// memheap components first (priority 20) and second (40).
    memheap: PathBuf,
    /// `newer`: built against this interface with one more module method
    /// appended, as a later 0.x.y release would have it.
    newer: PathBuf,
}

const LOOP_LIB: &str = "libfixture_btl_loop.so";

fn build_loop_variant(source: &Path, envs: &[(&str, &str)], dest: &Path) -> Result<(), String> {
    let (dir, _guard) = build_fixture(source, envs)?;
    std::fs::copy(dir.join(LOOP_LIB), dest).map_err(|e| format!("{}: {e}", dest.display()))?;
    Ok(())
}

/// The loop fixture built against a modified copy of fireopal-abi: the
/// interface a plugin author would have had with another host.
fn build_against_modified_abi(
    tag: &str,
    version: &str,
    patches: &[(&str, &str, &str)],
    dest: &Path,
) -> Result<(), String> {
    let root = fixture_target_dir().join("src").join(tag);
    let _ = std::fs::remove_dir_all(&root);
    let abi = root.join("abi");
    let plugin = root.join("plugin");
    copy_tree(&fireopal_tests::workspace_root().join("abi"), &abi).map_err(|e| e.to_string())?;
    copy_tree(&fixture_source("btl-loop"), &plugin).map_err(|e| e.to_string())?;
    std::fs::write(
        abi.join("Cargo.toml"),
        format!(
            "[package]\nname = \"fireopal-abi\"\nversion = \"{version}\"\nedition = \"2021\"\n\n\
             [dependencies]\nabi_stable = \"0.11\"\n\n[workspace]\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    for (file, from, to) in patches {
        patch_once(&abi.join("src").join(file), from, to)?;
    }
    patch_once(
        &plugin.join("Cargo.toml"),
        "path = \"../../../abi\"",
        &format!("path = {:?}", abi.display().to_string()),
    )?;
    // The suite the fixture's own tests run builds against this tree's
    // interface, not the modified one; a plugin build does not need it.
    patch_once(
        &plugin.join("Cargo.toml"),
        "fireopal-conformance = { path = \"../../../conformance\", default-features = false, features = [\"abi\"] }",
        "",
    )?;
    build_loop_variant(&plugin, &[("FIXTURE_NAME", tag)], dest)
}

fn build_fixtures() -> Result<Fixtures, String> {
    // The host comes first: the plugins below are built after it.
    host_binary()?;
    let base = fixture_target_dir()
        .join("dirs")
        .join(std::process::id().to_string());
    let good = base.join("good");
    let broken = base.join("broken");
    let memheap = base.join("memheap");
    let newer = base.join("newer");
    for d in [&good, &broken, &memheap, &newer] {
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d).map_err(|e| e.to_string())?;
    }
    let src = fixture_source("btl-loop");
    for (name, prio) in [("alpha", "30"), ("beta", "50"), ("gamma", "10")] {
        build_loop_variant(
            &src,
            &[("FIXTURE_NAME", name), ("FIXTURE_PRIORITY", prio)],
            &good.join(format!("libfireopal_btl_{name}.so")),
        )?;
    }
    build_loop_variant(
        &src,
        &[("FIXTURE_NAME", "boom"), ("FIXTURE_QUERY", "panic")],
        &broken.join("libfireopal_btl_boom.so"),
    )?;
    // Installed under a name other than its own.
    build_loop_variant(
        &src,
        &[("FIXTURE_NAME", "alpha")],
        &broken.join("libfireopal_btl_renamed.so"),
    )?;
    std::fs::write(
        broken.join("libfireopal_btl_junk.so"),
        b"this is not an ELF file\n",
    )
    .map_err(|e| e.to_string())?;
    cc_shared(
        "int fireopal_nothing_here(void) { return 42; }\n",
        &broken.join("libfireopal_btl_noroot.so"),
        &[],
    )?;
    // A plugin linked against a library that is gone at run time.
    let dep_dir = base.join("dep");
    std::fs::create_dir_all(&dep_dir).map_err(|e| e.to_string())?;
    cc_shared(
        "int dep_fn(void) { return 1; }\n",
        &dep_dir.join("libvanished.so"),
        &[],
    )?;
    cc_shared(
        "int dep_fn(void);\nint use_dep(void) { return dep_fn(); }\n",
        &broken.join("libfireopal_btl_needsdep.so"),
        &[&format!("-L{}", dep_dir.display()), "-lvanished"],
    )?;
    std::fs::remove_file(dep_dir.join("libvanished.so")).map_err(|e| e.to_string())?;
    // The module trait's `remove_peer` takes a u64 instead of a rank.
    build_against_modified_abi(
        "skew",
        fireopal_abi::INTERFACE_VERSION,
        &[
            (
                "btl.rs",
                "fn remove_peer(&mut self, peer: Rank) -> RResult<(), PluginError>;",
                "fn remove_peer(&mut self, peer: u64) -> RResult<(), PluginError>;",
            ),
            (
                "export.rs",
                "fn remove_peer(&mut self, peer: Rank) -> RResult<(), PluginError> {",
                "fn remove_peer(&mut self, peer: u64) -> RResult<(), PluginError> {",
            ),
            (
                "export.rs",
                "inner.remove_peer(peer))",
                "inner.remove_peer(peer as Rank))",
            ),
        ],
        &broken.join("libfireopal_btl_skew.so"),
    )?;
    // Built against an older interface generation.
    build_against_modified_abi("old", "0.0.9", &[], &broken.join("libfireopal_btl_old.so"))?;
    // Built against this generation before methods were appended to the
    // module trait: the host's layout check wants at least its own methods.
    build_against_modified_abi(
        "older",
        fireopal_abi::INTERFACE_VERSION,
        &[
            ("btl.rs", APPENDED_SABI_METHODS, ""),
            ("export.rs", APPENDED_ADAPTER_METHODS, ""),
        ],
        &broken.join("libfireopal_btl_older.so"),
    )?;
    // Built against a later interface that appended a method: loads.
    build_against_modified_abi(
        "newer",
        fireopal_abi::INTERFACE_VERSION,
        &[(
            "btl.rs",
            LAST_SABI_METHOD,
            &format!("{LAST_SABI_METHOD}{LATER_SABI_METHOD}"),
        )],
        &newer.join("libfireopal_btl_newer.so"),
    )?;
    let list = fixture_source("memheap-list");
    for (name, prio) in [("first", "20"), ("second", "40")] {
        let (dir, _guard) =
            build_fixture(&list, &[("FIXTURE_NAME", name), ("FIXTURE_PRIORITY", prio)])?;
        let lib = dir.join("libfixture_memheap_list.so");
        std::fs::copy(&lib, memheap.join(format!("libfireopal_memheap_{name}.so")))
            .map_err(|e| e.to_string())?;
        if name == "first" {
            // A memheap library installed under the btl framework.
            std::fs::copy(&lib, broken.join("libfireopal_btl_first.so"))
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(Fixtures {
        good,
        broken,
        memheap,
        newer,
    })
}

/// The module-trait methods appended after `last_prefix_field`, as they
/// read in `abi/src/btl.rs` and in the adapter of `abi/src/export.rs`;
/// the `older` fixture is built with them cut out, the `newer` one with
/// one more after the last of them.
const APPENDED_SABI_METHODS: &str = r#"
    // Appended after the first release of this interface generation, with
    // defaults, as abi_stable wants additions: a plugin built against a
    // later release (more methods) passes this host's layout check; one
    // built before these methods does not and must be rebuilt
    // (tests/tests/plugins.rs builds both).

    /// See [`Transport::register_segment`].
    fn register_segment(&mut self, _fd: i32, _region: MemRegion) -> RResult<u64, PluginError> {
        RResult::RErr(PluginError::unsupported("mapped segments"))
    }
    /// See [`Transport::unregister_segment`].
    fn unregister_segment(&mut self, _id: u64) -> RResult<(), PluginError> {
        RResult::RErr(PluginError::unsupported("mapped segments"))
    }
    /// See [`Transport::map_remote`].
    fn map_remote(
        &mut self,
        _peer: Rank,
        _remote_key: RSlice<'_, u8>,
    ) -> RResult<RemoteMapping, PluginError> {
        RResult::RErr(PluginError::unsupported("remote mappings"))
    }
    /// See [`Transport::unmap_remote`].
    fn unmap_remote(&mut self, _id: u64) -> RResult<(), PluginError> {
        RResult::RErr(PluginError::unsupported("remote mappings"))
    }
    /// See [`Transport::unsent`].
    fn unsent(&self) -> RResult<u64, PluginError> {
        RResult::ROk(0)
    }
"#;
const LAST_SABI_METHOD: &str = r#"    fn unsent(&self) -> RResult<u64, PluginError> {
        RResult::ROk(0)
    }
"#;
const LATER_SABI_METHOD: &str = r#"    /// Appended by a later interface release.
    fn later_method(&self) -> u32 {
        7
    }
"#;
const APPENDED_ADAPTER_METHODS: &str = r#"    fn register_segment(&mut self, fd: i32, region: MemRegion) -> RResult<u64, PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| inner.register_segment(fd, region))
    }
    fn unregister_segment(&mut self, id: u64) -> RResult<(), PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| inner.unregister_segment(id))
    }
    fn map_remote(
        &mut self,
        peer: Rank,
        remote_key: RSlice<'_, u8>,
    ) -> RResult<RemoteMapping, PluginError> {
        let inner = &mut self.inner;
        self.poison
            .run(|| inner.map_remote(peer, remote_key.as_slice()))
    }
    fn unmap_remote(&mut self, id: u64) -> RResult<(), PluginError> {
        let inner = &mut self.inner;
        self.poison.run(|| inner.unmap_remote(id))
    }
    fn unsent(&self) -> RResult<u64, PluginError> {
        self.poison.run(|| Ok(self.inner.unsent()))
    }
"#;

fn fixtures() -> &'static Fixtures {
    static FIXTURES: OnceLock<Fixtures> = OnceLock::new();
    FIXTURES.get_or_init(|| build_fixtures().unwrap_or_else(|e| panic!("fixtures: {e}")))
}

fn env_for(path: &[&Path], extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let joined: Vec<String> = path.iter().map(|p| p.display().to_string()).collect();
    let mut env = vec![("FIREOPAL_PLUGIN_PATH".to_owned(), joined.join(":"))];
    env.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    env
}

fn discover(path: &[&Path], extra: &[(&str, &str)], cli: &[(&str, &str)]) -> Registry {
    Registry::discover(&Options {
        environment: Some(env_for(path, extra)),
        command_line: cli
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..Options::default()
    })
}

fn btl_ranking(r: &Registry) -> Vec<(String, u32)> {
    r.selected_btls()
        .iter()
        .map(|c| (c.name().to_owned(), c.priority().unwrap_or(0)))
        .collect()
}

fn status_of<'a>(r: &'a Registry, name: &str) -> &'a Status {
    r.components()
        .iter()
        .find(|c| c.name() == name)
        .map(|c| c.status())
        .unwrap_or_else(|| panic!("component {name} not listed"))
}

fn pairs(v: &[(&str, u32)]) -> Vec<(String, u32)> {
    v.iter().map(|(n, p)| ((*n).to_owned(), *p)).collect()
}

#[test]
fn loads_and_ranks_several_plugins_from_one_directory() {
    let f = fixtures();
    let r = discover(&[&f.good], &[], &[]);
    assert!(r.errors().is_empty(), "{:?}", r.errors());
    assert_eq!(
        btl_ranking(&r),
        pairs(&[("self", 100), ("beta", 50), ("alpha", 30), ("gamma", 10)])
    );
    let alpha = r.components().iter().find(|c| c.name() == "alpha").unwrap();
    assert_eq!(alpha.framework(), Framework::Btl);
    assert_eq!(
        alpha.version().map(|v| v.to_string()).as_deref(),
        Some("0.3.1")
    );
    assert_eq!(
        alpha.origin(),
        &Origin::File(f.good.join("libfireopal_btl_alpha.so"))
    );
    assert_eq!(r.components()[0].origin(), &Origin::BuiltIn);
    // Each plugin registered its parameters with the host.
    let p = r.params().get("btl_beta_priority").unwrap();
    assert_eq!(p.owner, "btl beta");
}

#[test]
fn include_and_exclude_lists() {
    let f = fixtures();
    let r = discover(&[&f.good], &[("FIREOPAL_BTL", "alpha,gamma")], &[]);
    assert!(r.errors().is_empty(), "{:?}", r.errors());
    assert_eq!(btl_ranking(&r), pairs(&[("alpha", 30), ("gamma", 10)]));
    assert_eq!(
        status_of(&r, "beta"),
        &Status::Excluded { by: "btl".into() }
    );
    assert_eq!(
        status_of(&r, "self"),
        &Status::Excluded { by: "btl".into() }
    );

    let r = discover(&[&f.good], &[("FIREOPAL_BTL", "^alpha")], &[]);
    assert!(r.errors().is_empty(), "{:?}", r.errors());
    assert_eq!(
        btl_ranking(&r),
        pairs(&[("self", 100), ("beta", 50), ("gamma", 10)])
    );

    // The command line beats the environment.
    let r = discover(
        &[&f.good],
        &[("FIREOPAL_BTL", "^alpha")],
        &[("btl", "alpha")],
    );
    assert_eq!(btl_ranking(&r), pairs(&[("alpha", 30)]));

    let r = discover(&[&f.good], &[("FIREOPAL_BTL", "alpha,^beta")], &[]);
    assert!(
        matches!(r.errors(), [DiscoveryError::Filter(e)] if e.param == "btl"),
        "{:?}",
        r.errors()
    );
    let err = Registry::open(&Options {
        environment: Some(env_for(&[&f.good], &[("FIREOPAL_BTL", "alpha,^beta")])),
        ..Options::default()
    })
    .unwrap_err();
    assert!(err.to_string().contains("parameter btl"), "{err}");
}

#[test]
fn requested_component_that_is_missing_or_broken_is_an_error() {
    let f = fixtures();
    let r = discover(
        &[&f.good, &f.broken],
        &[("FIREOPAL_BTL", "alpha,nosuch,junk")],
        &[],
    );
    let errors: Vec<String> = r.errors().iter().map(ToString::to_string).collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].contains("\"nosuch\" was requested but not found"),
        "{errors:?}"
    );
    assert!(
        errors[1].contains("\"junk\" was requested but is not loaded"),
        "{errors:?}"
    );
}

#[test]
fn parameters_change_the_ranking_and_bad_values_name_the_parameter() {
    let f = fixtures();
    let r = discover(
        &[&f.good],
        &[
            ("FIREOPAL_BTL_ALPHA_PRIORITY", "70"),
            ("FIREOPAL_BTL_GAMMA_PRIORITY", "1"),
        ],
        &[("btl_gamma_priority", "90")],
    );
    assert_eq!(
        btl_ranking(&r),
        pairs(&[("self", 100), ("gamma", 90), ("alpha", 70), ("beta", 50)])
    );

    let r = discover(&[&f.good], &[("FIREOPAL_BTL_BETA_PRIORITY", "high")], &[]);
    let text = r
        .errors()
        .first()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(
        text.contains("btl_beta_priority") && text.contains("FIREOPAL_BTL_BETA_PRIORITY"),
        "{text}"
    );
}

#[derive(Default)]
struct Recorder {
    delivered: Vec<(u32, u8, Vec<u8>, Vec<u8>)>,
    completed: Vec<u64>,
}

impl BtlEventSink for Recorder {
    fn deliver(&mut self, peer: u32, tag: u8, header: RSlice<'_, u8>, payload: RSlice<'_, u8>) {
        self.delivered
            .push((peer, tag, header.to_vec(), payload.to_vec()));
    }
    fn send_complete(&mut self, cookie: u64, status: RResult<(), PluginError>) {
        assert!(status.is_ok());
        self.completed.push(cookie);
    }
    fn rdma_complete(&mut self, _cookie: u64, _status: RResult<(), PluginError>) {}
    fn peer_failed(&mut self, _peer: u32, _error: PluginError) {}
}

#[test]
fn a_plugin_built_after_the_host_is_used_through_the_api() {
    let f = fixtures();
    let r = discover(&[&f.good], &[], &[("btl_alpha_queue_depth", "2")]);
    let alpha = r.components().iter().find(|c| c.name() == "alpha").unwrap();
    let mut modules = r.open_btl(alpha).expect("open alpha");
    assert_eq!(modules.len(), 1);
    let mut module = modules.remove(0);
    let attrs = module.attributes().unwrap();
    assert_eq!(attrs.max_sendi_size, 4096);
    let address = module.address().unwrap();
    let peers = [
        PeerAddress {
            rank: 0,
            node_local: true,
            address: RSlice::from_slice(&address),
        },
        PeerAddress {
            rank: 1,
            node_local: true,
            address: RSlice::from_slice(b"loop:1"),
        },
    ];
    let reach = module.add_peers(RSlice::from_slice(&peers)).unwrap();
    assert_eq!(reach[0], Reachability::Reachable);
    assert!(matches!(reach[1], Reachability::Unreachable(_)));

    let h = RSlice::from_slice(b"hdr");
    let sendi = |m: &mut fireopal_abi::btl::BtlModuleBox, p: &'static [u8]| {
        m.sendi(0, 7, h, RSlice::from_slice(p)).unwrap()
    };
    assert_eq!(sendi(&mut module, b"one"), SendiOutcome::Sent);
    assert_eq!(sendi(&mut module, b"two"), SendiOutcome::Sent);
    // Queue depth 2 (set on the command line): all or nothing, so Busy.
    assert_eq!(sendi(&mut module, b"three"), SendiOutcome::Busy);
    assert_eq!(
        module
            .send(0, 8, h, RSlice::from_slice(b"three"), 42)
            .unwrap(),
        Completion::Pending
    );
    let err = module
        .sendi(5, 7, h, RSlice::from_slice(b"x"))
        .into_result()
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::UNREACHABLE);

    let mut rec = Recorder::default();
    let n = module
        .progress(BtlEventSink_TO::from_ptr(&mut rec, TD_Opaque))
        .unwrap();
    assert_eq!(n, 4);
    let payloads: Vec<&[u8]> = rec.delivered.iter().map(|d| d.3.as_slice()).collect();
    assert_eq!(payloads, [&b"one"[..], b"two", b"three"]);
    assert!(rec.delivered.iter().all(|d| d.0 == 0 && d.2 == b"hdr"));
    assert_eq!(rec.completed, [42]);
    // Completion is reported once.
    let n = module
        .progress(BtlEventSink_TO::from_ptr(&mut rec, TD_Opaque))
        .unwrap();
    assert_eq!((n, rec.completed.len()), (0, 1));
}

/// A plugin built against a later release of this interface generation,
/// whose module trait has one more method appended, loads into today's
/// host and works; methods it does not implement answer `Unsupported`.
#[test]
fn a_plugin_built_against_a_later_interface_release_loads_and_works() {
    let f = fixtures();
    let r = discover(&[&f.newer], &[], &[]);
    assert!(r.errors().is_empty(), "{:?}", r.errors());
    let newer = r
        .components()
        .iter()
        .find(|c| c.name() == "newer")
        .expect("newer is listed");
    let mut modules = r
        .open_btl(newer)
        .unwrap_or_else(|e| panic!("open newer: {e:?}: {}", status_of(&r, "newer")));
    let module = &mut modules[0];
    assert_eq!(module.attributes().unwrap().max_sendi_size, 4096);
    let mut byte = 0u8;
    // SAFETY: a local byte, never touched by the module (the call fails).
    let region = unsafe { fireopal_abi::btl::MemRegion::new(&mut byte, 1) };
    let err = module
        .register_segment(0, region)
        .into_result()
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::UNSUPPORTED);
    let err = module.unregister_segment(1).into_result().unwrap_err();
    assert_eq!(err.kind, ErrorKind::UNSUPPORTED);
    // What it always had still works.
    let h = RSlice::from_slice(b"h");
    assert_eq!(
        module
            .sendi(5, 7, h, RSlice::from_slice(b"x"))
            .into_result()
            .map_err(|e| e.kind),
        Err(ErrorKind::UNREACHABLE)
    );
}

#[test]
fn every_broken_plugin_is_reported_and_the_rest_still_work() {
    let f = fixtures();
    let r = discover(&[&f.broken, &f.good], &[], &[]);
    assert!(r.errors().is_empty(), "{:?}", r.errors());
    let not_loaded = |name: &str| match status_of(&r, name) {
        Status::NotLoaded(e) => e.clone(),
        other => panic!("{name}: expected not loaded, got {other}"),
    };
    assert!(matches!(not_loaded("junk"), LoadError::NotALibrary(_)));
    assert_eq!(not_loaded("noroot"), LoadError::NoRootModule);
    match not_loaded("needsdep") {
        LoadError::MissingDependency(d) => assert!(d.contains("libvanished.so"), "{d}"),
        other => panic!("needsdep: {other}"),
    }
    let rebuild = format!(
        "; rebuild the plugin against fireopal-abi {}",
        fireopal_abi::INTERFACE_VERSION
    );
    match not_loaded("skew") {
        e @ LoadError::IncompatibleInterface(_) => {
            let text = e.to_string();
            let differ = "incompatible interface: its fireopal-abi types differ from this host's: ";
            assert!(text.starts_with(differ), "{text}");
            assert!(text.ends_with(&rebuild), "{text}");
            assert!(!text.contains('\n') && !text.contains("Error:"), "{text}");
        }
        other => panic!("skew: {other}"),
    }
    // Built before five methods were appended: refused, with the counts
    // the right way round, and told what to rebuild against.
    match not_loaded("older") {
        e @ LoadError::IncompatibleInterface(_) => {
            let text = e.to_string();
            let counts = text
                .split("field counts differ (this host: ")
                .nth(1)
                .and_then(|rest| rest.split_once(')'))
                .and_then(|(pair, _)| pair.split_once(", the plugin: "))
                .and_then(|(h, p)| Some((h.parse::<u32>().ok()?, p.parse::<u32>().ok()?)));
            let (host, plugin) = counts.unwrap_or_else(|| panic!("no field counts in {text}"));
            assert_eq!(host, plugin + 5, "{text}");
            assert!(text.ends_with(&rebuild), "{text}");
        }
        other => panic!("older: {other}"),
    }
    let old = not_loaded("old");
    assert!(old.to_string().ends_with(&rebuild), "{old}");
    match old {
        LoadError::IncompatibleVersion { plugin, host } => {
            assert_eq!(plugin, "0.0.9");
            assert_eq!(host, fireopal_abi::INTERFACE_VERSION);
        }
        other => panic!("old: {other}"),
    }
    assert!(matches!(
        not_loaded("first"),
        LoadError::IncompatibleInterface(_)
    ));
    assert_eq!(
        not_loaded("renamed"),
        LoadError::NameMismatch {
            file: "renamed".into(),
            inside: "alpha".into()
        }
    );
    match status_of(&r, "boom") {
        Status::Unavailable { reason } => {
            assert!(
                reason.contains("panicked") && reason.contains("exploded on purpose"),
                "{reason}"
            )
        }
        other => panic!("boom: {other}"),
    }
    assert_eq!(
        btl_ranking(&r),
        pairs(&[("self", 100), ("beta", 50), ("alpha", 30), ("gamma", 10)])
    );
}

#[test]
fn later_directories_are_shadowed_by_earlier_ones() {
    let f = fixtures();
    let r = discover(&[&f.good, &f.good.join(".")], &[], &[]);
    // The same directory twice is searched once.
    assert_eq!(
        r.components()
            .iter()
            .filter(|c| c.name() == "alpha")
            .count(),
        1
    );
    let other = fireopal_tests::TempDir::new("shadow").unwrap();
    std::fs::copy(
        f.good.join("libfireopal_btl_alpha.so"),
        other.path().join("libfireopal_btl_alpha.so"),
    )
    .unwrap();
    let r = discover(&[&f.good, other.path()], &[], &[]);
    let alphas: Vec<&Status> = r
        .components()
        .iter()
        .filter(|c| c.name() == "alpha")
        .map(|c| c.status())
        .collect();
    assert!(matches!(alphas[0], Status::Available { .. }));
    assert!(matches!(
        alphas[1],
        Status::NotLoaded(LoadError::Shadowed(_))
    ));
}

fn run_info(path: &[&Path], extra_env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let host = host_binary().unwrap_or_else(|e| panic!("{e}"));
    let joined: Vec<String> = path.iter().map(|p| p.display().to_string()).collect();
    let out = Command::new(host)
        .arg("info")
        .args(args)
        .env("FIREOPAL_PLUGIN_PATH", joined.join(":"))
        .envs(extra_env.iter().copied())
        .output()
        .expect("run fireopal info");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn fireopal_info_built_before_the_plugins_lists_them_with_reasons() {
    let f = fixtures();
    let host = host_binary().unwrap();
    let built = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).unwrap();
    assert!(built(&host) < built(&f.good.join("libfireopal_btl_alpha.so")));

    let (code, out, err) = run_info(&[&f.good, &f.broken], &[], &["--json"]);
    assert_eq!(code, 0, "{err}");
    for needle in [
        r#""name":"alpha","origin":""#,
        r#""status":"available","priority":30"#,
        r#""name":"self","origin":"built-in""#,
        "not a loadable library",
        "exports no root module",
        "missing dependent library",
        "incompatible interface: its fireopal-abi types differ from this host's: ",
        "incompatible interface version: plugin built against fireopal-abi 0.0.9",
        "query failed: panicked: query of boom exploded on purpose",
        r#""name":"btl_alpha_priority","owner":"btl alpha","type":"uint","value":30"#,
        r#""source":"default""#,
    ] {
        assert!(out.contains(needle), "missing {needle:?} in {out}");
    }

    let (code, out, _) = run_info(
        &[&f.good],
        &[("FIREOPAL_BTL_ALPHA_PRIORITY", "3")],
        &["--param", "btl_beta_priority=4"],
    );
    assert_eq!(code, 0);
    assert!(
        out.contains(
            "btl_alpha_priority = \"3\" (uint, default \"30\"; \
             from the environment (FIREOPAL_BTL_ALPHA_PRIORITY=3))"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "btl_beta_priority = \"4\" (uint, default \"50\"; \
             from the command line (--param btl_beta_priority=4))"
        ),
        "{out}"
    );

    let (code, _, err) = run_info(&[&f.good], &[("FIREOPAL_BTL", "alpha,^beta")], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("parameter btl: invalid component list"),
        "{err}"
    );
    let (code, _, err) = run_info(&[&f.good], &[], &["--param", "btl_alpha_priority=-1"]);
    assert_eq!(code, 2);
    assert!(
        err.contains(
            "parameter btl_alpha_priority: invalid value \"-1\" \
             from the command line (--param btl_alpha_priority=-1)"
        ),
        "{err}"
    );
}

#[test]
fn a_no_std_binary_links_fireopal_core() {
    let src = fixture_source("nostd-bin");
    let (dir, _guard) = build_fixture(&src, &[]).unwrap_or_else(|e| panic!("{e}"));
    let out = Command::new(dir.join("fixture-nostd-bin"))
        .output()
        .expect("run the no_std binary");
    assert!(out.status.success());
    assert_eq!(out.stdout, b"ok\n");
}

#[test]
fn memheap_selects_one_component_and_the_module_works() {
    use fireopal_abi::memheap::Segment;
    let f = fixtures();
    let r = discover(&[&f.memheap], &[], &[]);
    assert!(r.errors().is_empty(), "{:?}", r.errors());
    let selected: Vec<&str> = r
        .components()
        .iter()
        .filter(|c| c.framework() == Framework::Memheap && c.is_selected())
        .map(|c| c.name())
        .collect();
    assert_eq!(selected, ["second"]);
    assert_eq!(status_of(&r, "first"), &Status::Available { priority: 20 });

    let r = discover(&[&f.memheap], &[("FIREOPAL_MEMHEAP", "first")], &[]);
    assert_eq!(r.selected_memheap().map(|c| c.name()), Some("first"));
    let r = discover(&[&f.memheap], &[], &[("memheap_first_priority", "99")]);
    assert_eq!(r.selected_memheap().map(|c| c.name()), Some("first"));

    let (component, mut heap) = r.open_memheap().expect("open memheap");
    assert_eq!(component.name(), "first");
    let mut segment = vec![0u8; 1 << 16].into_boxed_slice();
    // SAFETY: `segment` outlives `heap`'s use below and is not touched
    // except through offsets the module hands out.
    let seg = unsafe { Segment::new(segment.as_mut_ptr(), segment.len() as u64) };
    heap.init(seg).unwrap();
    let a = heap.alloc(100, 64).unwrap();
    assert_eq!(a % 64, 0);
    let a_us = a as usize;
    segment[a_us..a_us + 100].copy_from_slice(&[7u8; 100]);
    let b = heap.realloc(a, 4000).unwrap();
    let b_us = b as usize;
    assert!(segment[b_us..b_us + 100].iter().all(|&x| x == 7));
    assert_eq!(
        heap.free(a).into_result().unwrap_err().kind,
        ErrorKind::INVALID_ARGUMENT
    );
    assert_eq!(
        heap.alloc(1 << 20, 8).into_result().unwrap_err().kind,
        ErrorKind::RESOURCE_EXHAUSTED
    );
    heap.free(b).unwrap();
    let stats = heap.stats().unwrap();
    assert_eq!((stats.live_allocations, stats.free_bytes), (0, 1 << 16));
}
