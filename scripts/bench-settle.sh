#!/usr/bin/env bash
# Issue 44's figures: a scripted 6-subtask run with one early rejection, the lead hearing
# every result at once (as before) against hearing each as it settles (after), alternated
# in the same build; and the tokens of a follow-up that starts from the rejected work
# (`start_from`) against one from scratch. Prints each round, the medians and the ratios.
# Not a pass/fail test: it exits non-zero only when a run did not go as scripted.
#
# Usage: scripts/bench-settle.sh [--latency-ms L] [--slow-turns K] [--files F] [--rounds R]
#          (defaults 200, 8, 12, 3)
set -euo pipefail

cd "$(dirname "$0")/.."
cargo build --release --quiet --example bench_settle
exec "${CARGO_TARGET_DIR:-target}/release/examples/bench_settle" "$@"
