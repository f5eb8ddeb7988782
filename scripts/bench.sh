#!/usr/bin/env bash
# The main job: build everything (host and transport plugins), then run the
# OSU-style ping-pong between two local processes over the best transport
# the framework picks. Extra arguments go to `fireopal bench pingpong`
# (for instance `--btl tcp` or `--json`).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --workspace
exec ./target/release/fireopal run --bind-to core -n 2 -- ./target/release/fireopal bench pingpong "$@"
