#!/bin/sh
# Benchmarks grove's git layer against plain git on a generated repository of
# FILES files (default 30000), in a temp dir on disk (BENCH_DIR, default $TMPDIR or /tmp).
# Usage: scripts/bench-git.sh [FILES]
set -eu
cd "$(dirname "$0")/.."
cargo build --quiet --example bench_git
exec target/debug/examples/bench_git "${1:-30000}"
