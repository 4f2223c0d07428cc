#!/usr/bin/env bash
# Issue 46's estimate against the actual cost: what grove estimates a run will cost from
# its plan (as `grove run --dry-run` does: the plan's subtasks, the repository's size, the
# models' list prices) next to what the same run then cost, counted turn by turn.
#
#   - the demo: `grove demo --json` carries the estimate of its plan (its script's 3
#     subtasks) and its cost (the scripted model priced as claude-sonnet-5-5; its replay
#     bills a request's bytes / 4 as input tokens);
#   - an 8-subtask scenario (examples/estimate_vs_actual.rs): one dry run, then one real
#     run of the same scripted task against the fake model server, which bills every
#     request's bytes / 4 as input, 150 output tokens a turn, no prompt cache.
#
# Prints each estimate's range, the actual cost and the actual's ratio to both ends. A
# figure, not a test: it exits non-zero only when a run did not go as scripted.
#
# Usage: scripts/estimate-vs-actual.sh [--subtasks N] [--model NAME]  (for the scenario;
#        defaults 8, claude-sonnet-5-5)
set -euo pipefail

cd "$(dirname "$0")/.."
cargo build --quiet --bin grove --example estimate_vs_actual
bin="${CARGO_TARGET_DIR:-target}/debug"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$bin/grove" demo --keep-dir "$work/demo" --json >"$work/demo.json" 2>"$work/demo.err" || {
  cat "$work/demo.err" >&2
  echo "estimate-vs-actual: the demo did not go as scripted" >&2
  exit 1
}
python3 - "$work/demo.json" <<'PYTHON'
import json, sys
report = json.load(open(sys.argv[1]))
estimate, actual = report["estimate"], report["cost"]["total_usd"]
low, high = estimate["low_usd"], estimate["high_usd"]
where = "within the range" if low <= actual <= high else ("BELOW the range" if actual < low else "ABOVE the range")
usd = lambda v: f"${v:.2f}" if v >= 1 or round(v * 100) == v * 100 else f"${v:.4f}"
print(f"demo ({estimate['subtasks'][0]} subtasks, scripted model priced as claude-sonnet-5-5): "
      f"estimate {usd(low)}–{usd(high)}, actual {usd(actual)}; "
      f"actual/low {actual / low:.2f}, actual/high {actual / high:.2f}, {where}")
PYTHON
"$bin/examples/estimate_vs_actual" "$@"
