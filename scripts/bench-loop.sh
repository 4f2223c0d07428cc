#!/usr/bin/env bash
# Prints the agent loop's own CPU cost per model turn against the fake model server
# (zero latency), next to a bare-client baseline, for Anthropic and OpenAI streaming.
# Compare its output before and after a change to the loop; it is not a pass/fail test.
#
# Usage: scripts/bench-loop.sh [--turns N]   (default 500; the cost grows with the square of N)
set -euo pipefail

cd "$(dirname "$0")/.."
cargo build --release --quiet --example bench_loop
exec target/release/examples/bench_loop "$@"
