//! The helper builds the tests run (`host_binary`, `scripts/install.sh`,
//! the host tests' `built`) are `cargo build --workspace` in the target
//! directory of the test build. They reuse its artifacts only if every
//! crate they compile gets the same features as in `cargo test`, where
//! dev-dependencies take part in feature resolution. A feature that a
//! dev-dependency alone turns on in a shared crate (criterion turns on
//! serde's `alloc`, and serde is a dependency of abi_stable) gives that
//! crate and every crate above it a second build; the plugin crates' files
//! have no hash in their names, so each build then overwrites the other's
//! and every `cargo test` recompiles them. `tests/Cargo.toml` turns such
//! features on for the whole workspace.

use std::collections::BTreeSet;
use std::process::Command;

use fireopal_tests::workspace_root;

/// Each package of the workspace's graph with its features, one per line,
/// as `cargo tree` resolves them with the given kinds of dependency edges.
fn graph(edges: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args(["tree", "--workspace", "--offline", "--prefix", "none"])
        .args(["-e", edges, "-f", "{p} {f}"])
        .arg("--manifest-path")
        .arg(workspace_root().join("Cargo.toml"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo tree: {e}"));
    assert!(
        out.status.success(),
        "cargo tree -e {edges}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_end_matches(" (*)").to_owned())
        .collect()
}

#[test]
fn dev_dependencies_change_the_features_of_no_crate_a_plain_build_compiles() {
    let build = graph("normal,build");
    let test = graph("normal,build,dev");
    let changed: Vec<&String> = build.difference(&test).collect();
    assert!(
        changed.is_empty(),
        "these crates get other features under `cargo test` (see the dev \
         graph with `cargo tree -e normal,build,dev -i <crate> -e features`); \
         turn those features on in tests/Cargo.toml:\n{changed:#?}"
    );
}
