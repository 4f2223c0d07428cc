#!/usr/bin/env bash
# How many of src/'s files one `delegate` call passes through, measured, not read off the
# code: bench_parallel's in-process `grove run` (fake model server, latency 30 ms) is
# built with LLVM's source coverage, run once with 1 subtask and once with 1 then 3, and
# a file counts when any of its functions ran more often in the 3-subtask run than in the
# 1-subtask one (so once per delegate call or more). Prints that count, the count of
# files with any code run, and the files with how many such functions each.
#
# REV (default: the work tree) is checked out in a worktree of its own under
# $TMPDIR; each build has its own target dir there (an instrumented build is a full
# one: minutes). Needs `rustup component add llvm-tools` (llvm-profdata and llvm-cov of
# the toolchain's own LLVM; a distribution's older ones cannot read the profiles).
#
# Usage: scripts/delegate-files.sh [REV]
set -euo pipefail
cd "$(dirname "$0")/.."

sysroot=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
tools="$sysroot/lib/rustlib/$host/bin"
if [ ! -x "$tools/llvm-profdata" ]; then
  echo "delegate-files: llvm-profdata missing; run: rustup component add llvm-tools" >&2
  exit 2
fi

work="${TMPDIR:-/tmp}/grove-delegate-files"
mkdir -p "$work"
src_root="$PWD"
if [ $# -ge 1 ]; then
  src_root="$work/tree-$1"
  [ -d "$src_root" ] || git worktree add --quiet --detach "$src_root" "$1"
fi

export CARGO_TARGET_DIR="$work/target-$(basename "$src_root")"
export RUSTFLAGS="-C instrument-coverage"
# Instrumented build scripts write a profile where they run, the checkout: kept in $work.
(cd "$src_root" && LLVM_PROFILE_FILE="$work/build-%p-%m.profraw" \
  cargo build --quiet --example bench_parallel)
bench="$CARGO_TARGET_DIR/debug/examples/bench_parallel"

for n in 1 3; do
  rm -f "$work"/run-"$n"-*.profraw
  LLVM_PROFILE_FILE="$work/run-$n-%p.profraw" "$bench" --latency-ms 30 --rounds 1 \
    --subtasks "$n" --jobs "$n" >"$work/run-$n.log" 2>&1 ||
    { echo "delegate-files: the $n-subtask run failed; see $work/run-$n.log" >&2; exit 1; }
  "$tools/llvm-profdata" merge -sparse "$work"/run-"$n"-*.profraw -o "$work/run-$n.profdata"
  "$tools/llvm-cov" export "$bench" -instr-profile="$work/run-$n.profdata" \
    -skip-expansions >"$work/run-$n.json"
done

exec python3 - "$work/run-1.json" "$work/run-3.json" "$src_root/src/" <<'PYTHON'
import collections
import json
import sys


def counts(path):
    data = json.load(open(path))
    return {(f["filenames"][0], f["name"]): f["count"] for f in data["data"][0]["functions"]}


one, three, root = counts(sys.argv[1]), counts(sys.argv[2]), sys.argv[3]
ran, per_delegate = set(), collections.Counter()
for (file, name), count in three.items():
    if not file.startswith(root):
        continue
    before = one.get((file, name), 0)
    if before > 0:
        ran.add(file)
    # The 3-subtask profile holds a 1-subtask run too: more than twice is more per call.
    if count > 2 * before:
        per_delegate[file[len(root):]] += 1
print(f"src files with code run in a 1-subtask run: {len(ran)}")
print(f"src files with code run once per delegate call or more: {len(per_delegate)}")
for file, functions in sorted(per_delegate.items()):
    print(f"  {file} ({functions} functions)")
PYTHON
