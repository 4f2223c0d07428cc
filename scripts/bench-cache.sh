#!/usr/bin/env bash
# Issue 46's cache benchmark: one scripted `grove run` of N subtasks (default 8) against
# the fake model server with Anthropic's prompt cache played on a clock the bench
# advances (the lead's wait for its subtasks, default 7 minutes, costs no real time),
# made twice in one invocation: before (main's behaviour: no sibling hold, the 5-minute
# TTL everywhere) and after (the sibling hold, the 1-hour TTL for the lead). Prints per
# role and in total the input tokens, the cache-read share of them and the cost at the
# built-in price of claude-sonnet-4-5, and a SUMMARY line: the share before -> after
# (goal >= 0.80) and the dollars saved. It is not a pass/fail test.
#
# Usage: scripts/bench-cache.sh [--subtasks N] [--latency-ms L] [--lead-wait-s S]
set -euo pipefail

cd "$(dirname "$0")/.."
cargo build --release --quiet --example bench_cache
exec "${CARGO_TARGET_DIR:-target}/release/examples/bench_cache" "$@"
