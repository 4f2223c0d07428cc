#!/usr/bin/env bash
# Prints the kernel sandbox's overhead per `bash` call: the same command run CALLS times
# through the plain executor, the sandbox without namespaces (`no-loopback`) and the
# whole sandbox (confined between `fork` and `exec`, with its mount and network
# namespaces), interleaved in one process, with the medians, the differences and the
# ratios, and PASS/FAIL against the target (under 5 ms). It is not a pass/fail test.
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
