#!/usr/bin/env bash
# Prints the kernel sandbox's overhead per `bash` call: the same command run CALLS times
# through the plain executor and through the sandboxed one (confined between `fork` and
# `exec`), interleaved in one process, with both medians, the difference and the ratio,
# and PASS/FAIL against the target (under 5 ms). It is not a pass/fail test.
#
# Usage: scripts/bench-sandbox.sh [--debug] [CALLS] [COMMAND]   (defaults 200, `true`)
#        --debug measures the debug build (quicker to build)
set -euo pipefail

cd "$(dirname "$0")/.."
profile=release
if [ "${1:-}" = "--debug" ]; then
    profile=debug
    shift
fi
if [ "$profile" = release ]; then
    cargo build --release --quiet --example bench_sandbox
else
    cargo build --quiet --example bench_sandbox
fi
exec "target/$profile/examples/bench_sandbox" "$@"
