#!/usr/bin/env bash
# The whole test suite: formatting, lints, every crate's tests (including
# the out-of-tree plugin fixtures, which the tests build themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
