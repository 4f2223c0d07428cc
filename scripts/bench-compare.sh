#!/usr/bin/env bash
# Compares the parallelism benchmark (scripts/bench-parallel.sh) of the work tree against
# that of BASE (a revision) in alternated blocks, and prints each block's median
# wall / critical ratio, its median CPU time per run and how many runs met the target,
# then the medians over all blocks and their ratio (work tree / BASE).
#
# Why blocks, both orders: on an ext4 without a journal (this project's machines) a run
# pays for the inodes freed on its disk in the minutes before it, by itself, by the runs
# before it or by anything else; one sequence of runs says as much about the disk's
# history as about grove. Blocks alternate BASE, work tree, work tree, BASE, ... so that
# each side runs after the other as often as after itself.
#
# BASE is built in a temporary git worktree into target/compare-base (kept, so the next
# comparison builds incrementally); the work tree into target/. Exits non-zero only when
# a build or a bench run fails.
#
# Usage: scripts/bench-compare.sh BASE [--pairs P] [--rounds R] [-- BENCH-ARGS...]
#          (defaults 2 pairs of blocks, 20 rounds a block; bench args default to
#          --subtasks 32 --jobs 32 --target 1.10)
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '17,19p' "$0" >&2; exit 2; }
(($#)) || usage
base_rev=$1
shift
pairs=2
rounds=20
bench_args=(--subtasks 32 --jobs 32 --target 1.10)
while (($#)); do
  case "$1" in
    --pairs) pairs=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --) shift; bench_args=("$@"); break ;;
    *) usage ;;
  esac
done
target=1.15
for ((i = 0; i < ${#bench_args[@]}; i++)); do
  [[ ${bench_args[i]} == --target ]] && target=${bench_args[i + 1]}
done

work=$(mktemp -d)
tree="$work/base-src"
cleanup() {
  git worktree remove --force "$tree" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

git worktree add --quiet --detach "$tree" "$base_rev"
base_target="$PWD/target/compare-base"
(cd "$tree" && CARGO_TARGET_DIR="$base_target" cargo build --release --quiet --example bench_parallel)
cp "$base_target/release/examples/bench_parallel" "$work/base"
cargo build --release --quiet --example bench_parallel
cp "${CARGO_TARGET_DIR:-target}/release/examples/bench_parallel" "$work/tree"

median() { sort -n "$1" | awk '{ r[NR] = $1 } END { printf "%.3f", r[int((NR + 1) / 2)] }'; }

# One block: prints "<side> <median ratio> <median cpu> <runs within target>/<runs>" and
# appends the block's ratios to $work/<side>.ratios.
block() {
  local side=$1 out="$work/out"
  "$work/$side" "${bench_args[@]}" --rounds "$rounds" >"$out"
  local line
  line=$(grep -E '^[0-9]+ runs at [0-9]+ subtasks, wall / critical sorted:' "$out") || {
    echo "no figures in the $side block's output:" >&2
    tail -20 "$out" >&2
    exit 1
  }
  local cpu
  sed -E 's/.*sorted: ([0-9. ]+);.*/\1/' <<<"$line" | tr ' ' '\n' | grep . >"$work/block"
  cat "$work/block" >>"$work/$side.ratios"
  cpu=$(sed -E 's/.*median ([0-9.]+ s).*/\1/' <<<"$line")
  printf '%-10s median %s  cpu median %s  within %s: %s/%s\n' "$side" "$(median "$work/block")" \
    "$cpu" "$target" "$(awk -v target="$target" '$1 <= target' "$work/block" | wc -l)" \
    "$(wc -l <"$work/block")"
}

echo "bench_parallel ${bench_args[*]}, $rounds rounds a block; BASE = $base_rev" \
  "($(git rev-parse --short "$base_rev")), tree = the work tree"
for ((pair = 0; pair < pairs; pair++)); do
  if ((pair % 2 == 0)); then order=(base tree); else order=(tree base); fi
  for side in "${order[@]}"; do
    block "$side"
  done
done
base_median=$(median "$work/base.ratios")
tree_median=$(median "$work/tree.ratios")
echo "all blocks: BASE median $base_median, tree median $tree_median," \
  "tree / BASE $(awk -v a="$tree_median" -v b="$base_median" 'BEGIN { printf "%.3f", a / b }')"
