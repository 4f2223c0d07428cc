#!/usr/bin/env bash
# Prints what the built view costs per command against the sandbox before it: the
# bench_sandbox example built at BASE (default: the last commit before the view) and at
# this checkout, run alternately ROUNDS times with CALLS calls each, so that both see the
# same machine. For each build: the median over rounds of its per-round medians of a plain
# call and of a sandboxed one, the sandbox's overhead, and the ratio of this build's
# sandboxed call to the base's. It is not a pass/fail test.
#
# Usage: scripts/bench-view.sh [--debug] [CALLS] [COMMAND]   (defaults 100, `true`)
#        --debug measures debug builds (quicker to build)
#        BASE=<commit> ROUNDS=<n> change the baseline and the rounds (defaults b46b26b, 5)
set -euo pipefail

cd "$(dirname "$0")/.."
profile=release
if [ "${1:-}" = "--debug" ]; then
    profile=debug
    shift
fi
flag=()
[ "$profile" = release ] && flag=(--release)
calls=${1:-100}
command=${2:-true}
base=${BASE:-b46b26b}
rounds=${ROUNDS:-5}
base_tree=target/bench-view/base
if [ ! -d "$base_tree" ]; then
    git worktree add --detach "$base_tree" "$base" >/dev/null 2>&1
fi
git -C "$base_tree" checkout -q --detach "$base"
echo "building the bench at $base and here ($profile)..." >&2
CARGO_TARGET_DIR="$PWD/target/bench-view/target" cargo build "${flag[@]}" --quiet \
    --manifest-path "$base_tree/Cargo.toml" --example bench_sandbox
cargo build "${flag[@]}" --quiet --example bench_sandbox
builds=("target/bench-view/target/$profile/examples/bench_sandbox"
    "target/$profile/examples/bench_sandbox")
names=("base ($base)" "view (here)")

# One line per round and build: `<build> <plain ms> <sandboxed ms>`.
samples=$(mktemp)
trap 'rm -f "$samples"' EXIT
for round in $(seq "$rounds"); do
    for i in 0 1; do
        out=$("${builds[$i]}" "$calls" "$command")
        plain=$(awk '/^  plain /{print $3}' <<<"$out")
        sandboxed=$(awk '/^  sandboxed +median/{print $3}' <<<"$out")
        echo "$i $plain $sandboxed" >>"$samples"
        echo "round $round: ${names[$i]}: plain $plain ms, sandboxed $sandboxed ms" >&2
    done
done

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "per command: \`$command\`, $calls calls per round, $rounds rounds, medians of the rounds' medians"
for i in 0 1; do
    plain=$(awk -v b="$i" '$1==b{print $2}' "$samples" | median)
    sandboxed=$(awk -v b="$i" '$1==b{print $3}' "$samples" | median)
    printf '  %-16s plain %7.2f ms   sandboxed %7.2f ms   overhead %6.2f ms\n' \
        "${names[$i]}" "$plain" "$sandboxed" "$(awk -v s="$sandboxed" -v p="$plain" 'BEGIN{print s-p}')"
done
base_s=$(awk '$1==0{print $3}' "$samples" | median)
view_s=$(awk '$1==1{print $3}' "$samples" | median)
awk -v v="$view_s" -v b="$base_s" \
    'BEGIN{printf "  the view costs %.2f ms more per command: %.2fx the base sandbox\n", v-b, v/b}'
