#!/bin/sh
# Benchmarks grove's worktrees on a generated repository of FILES files (default 30000)
# with 8 workers, in a temp dir on disk (BENCH_DIR, default $TMPDIR or /tmp): the
# copy-on-write overlay trees (base tree once, 8 overlays mounted with unshare -Urm +
# mount) and the git fallback (grove's git worktrees), each figure against 8 sequential
# `git worktree add` + `git worktree remove` measured in the same run.
# Usage: scripts/bench-worktrees.sh [FILES]
set -eu
cd "$(dirname "$0")/.."
cargo build --quiet --example bench_worktrees
exec "${CARGO_TARGET_DIR:-target}/debug/examples/bench_worktrees" "${1:-30000}"
