#!/usr/bin/env bash
# Issue 14's check benchmark: what `[check]` costs on top of a run. The same `grove run`
# against the fake model server (every call answered after a fixed latency L; lead 2
# calls, each worker 3, each reviewer 2), 8 subtasks delegated at once under --jobs 4,
# without a check and then with a check of fixed duration (`sleep D`, sandboxed), in one
# invocation. Prints both wall times, the extra in units of checks, what the checks
# would cost run one after another or holding --jobs slots, and PASS/FAIL against the
# target: the extra within 15% of one subtask check plus the result checks (a subtask's
# reviewer must wait for its own check; the other subtask checks overlap other subtasks'
# model calls). Exits non-zero only when a run did not merge every subtask.
#
# Usage: scripts/bench-check.sh [--latency-ms L] [--check-s D] [--jobs J] [--subtasks N]
#                               [--rounds R]   (defaults 300, 2, 4, 8, 1)
set -euo pipefail

cd "$(dirname "$0")/.."
cargo build --release --quiet --example bench_check
exec "${CARGO_TARGET_DIR:-target}/release/examples/bench_check" "$@"
