#!/usr/bin/env bash
# Prints what a worker's one-line append to a big tracked file costs grove's memory: the
# peak resident memory of a whole run (delegate, checkpoint, review diff, merge, apply)
# over the memory before it, and its ratio to the file's size (issue 31's target: about
# the file, not three times it). It is not a pass/fail test.
#
# Usage: scripts/bench-big-file.sh [--debug] [--mb N] [--mode auto|overlay|git]
#        (defaults 200 MiB, auto); --debug measures the debug build (quicker to build)
set -euo pipefail

cd "$(dirname "$0")/.."
profile=release
if [ "${1:-}" = "--debug" ]; then
    profile=debug
    shift
fi
if [ "$profile" = release ]; then
    cargo build --release --quiet --example bench_big_file
else
    cargo build --quiet --example bench_big_file
fi
exec "target/$profile/examples/bench_big_file" "$@"
