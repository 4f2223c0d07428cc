#!/usr/bin/env bash
# Issue 32's figures: bytes sent for a remote worker's start (thin bundle vs full) and
# the latency one tool call adds over the launcher vs the same call here, medians, each
# next to its baseline from the same run. Not a pass/fail test.
#
# Usage: scripts/bench-remote.sh [--files F] [--calls N] [--launch CMD]
#   (defaults 5000 files, 200 calls per tool, `env GROVE_REMOTE_HOME=<tmp>` as the
#   launcher; pass e.g. --launch 'ssh -F cfg host' to measure a real ssh hop)
set -euo pipefail

cd "$(dirname "$0")/.."
cargo build --release --quiet --bin grove --example bench_remote
exec target/release/examples/bench_remote "$@"
