#!/usr/bin/env bash
# The kill/resume matrix of issue 31: for each phase of a run (lead planning, workers
# working, a subtask's check, review, merge, result check, fixer, apply) grove is stopped
# by SIGKILL, SIGTERM and SIGINT N times, resumed, and the outcome checked (the right
# result applied exactly once, nothing left behind, the exit codes of the contract).
# Prints a table: phase x signal -> runs, passed, failed, the first failure's reason.
# It is not a pass/fail test (examples/fault_matrix.rs says what each phase holds).
#
# Usage: scripts/fault-matrix.sh [--release] [--times N] [--phases lead,workers,...]
#                                [--signals KILL,TERM,INT]      (default: debug build, 2)
set -euo pipefail

cd "$(dirname "$0")/.."
profile=debug
if [ "${1:-}" = "--release" ]; then
    profile=release
    shift
fi
if [ "$profile" = release ]; then
    cargo build --release --quiet --bin grove --example fault_matrix
else
    cargo build --quiet --bin grove --example fault_matrix
fi
exec "target/$profile/examples/fault_matrix" --grove "target/$profile/grove" "$@"
