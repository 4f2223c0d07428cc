#!/usr/bin/env bash
# Issue 47's figure: one subtask tried N ways at once (best of N, default 3) against the
# same subtask tried once, in the same build and invocation, rounds alternated, against
# the fake model server with a fixed latency per call, its prompt cache and grove's
# sibling hold on. Prints each round's wall time, the medians and their ratio (goal: near
# 1, the attempts cost their tokens and not their time), and each role's tokens both ways
# with the ratio of the totals. Not a pass/fail test: it exits non-zero only when a run
# did not go as scripted.
#
# Usage: scripts/bench-attempts.sh [--attempts N] [--latency-ms L] [--turns K] [--rounds R]
#          (defaults 3, 300, 6, 3)
set -euo pipefail

cd "$(dirname "$0")/.."
cargo build --release --quiet --example bench_attempts
exec "${CARGO_TARGET_DIR:-target}/release/examples/bench_attempts" "$@"
