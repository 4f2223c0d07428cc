#!/bin/sh
# Benchmarks copy-on-write worktrees (issue 15) against git worktrees on a generated
# repository of FILES files (default 30000), in a temp dir on disk (BENCH_DIR, default
# $TMPDIR or /tmp).
# Usage: scripts/bench-worktrees.sh [FILES]
set -eu
cd "$(dirname "$0")/.."
cargo build --quiet --example bench_worktrees
exec target/debug/examples/bench_worktrees "${1:-30000}"
