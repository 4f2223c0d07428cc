#!/usr/bin/env bash
# Issue 4's parallelism benchmark: `grove run` against the fake model server, every call
# answered after a fixed latency L, with 1, 4 and 8 subtasks delegated at once (worker 3
# calls, reviewer 1, lead 2). Prints each run's wall time next to its critical path
# (longest chain of calls x L) and its serial time (all calls x L), and at 8 subtasks
# (run R times; the median run counts) PASS/FAIL against the targets: wall within 15% of the critical path, and the lead's
# context growing by less than 2 KB per delegation. Exits non-zero only when a run did
# not merge every subtask (a broken run is not measured); it is not a pass/fail test.
#
# Every run works in one repository, each from the result the one before applied; the
# first is a cold start (no base tree yet), printed but not held to the targets. With
# --files F the repository also holds F generated files (issue 15: --files 30000, and
# --subtasks 32 --jobs 32 --target 1.10 on the small one); --mode picks the worktrees.
#
# Usage: scripts/bench-parallel.sh [--latency-ms L] [--jobs J] [--provider anthropic|openai]
#          [--rounds R] [--subtasks N] [--files F] [--mode auto|overlay|git] [--target T]
#          [--cold] [--both] [--setup CMD|default] (defaults 300, 8, anthropic, 3, 8, 0,
#          auto, 1.15, warm, no setup; --cold: every run a fresh clone with an empty grove
#          cache, its critical path holding git's own checkout of the base; --both: the warm
#          series then the cold one, a SUMMARY line each; --setup: a [worktree] setup
#          command, its time once in the critical path, `default` an npm-ci stand-in
#          writing 4 MB). The median run also prints one worker's disk (du), what the run
#          left on disk, and its milestones (base checkout, trees ready, first calls).
set -euo pipefail

cd "$(dirname "$0")/.."
cargo build --release --quiet --example bench_parallel
exec target/release/examples/bench_parallel "$@"
