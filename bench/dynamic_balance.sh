#!/usr/bin/env bash
# --patch_weights dynamic against the static even split (issue 42, part 4):
# 2 ranks of patch parallelism (every step synchronous: exact), the tiny
# PixArt-Σ at 1024 x 1024 px, 10 steps, rank 1 slowed 3x from step 3
# (XDIT_SLOW_* knob); prints each step's time (the slower rank's "step"
# span in the trace, which includes its waits) for both runs.
#
#   bench/dynamic_balance.sh [XDIT_BINARY]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-$root/build/xdit}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 XDIT_QUIET=1
for w in even dynamic; do
  extra=()
  [ "$w" = dynamic ] && extra=(--patch_weights dynamic)
  mpirun -np 2 --oversubscribe --bind-to none -x XDIT_SLOW_RANK=1 -x XDIT_SLOW_FACTOR=3 \
    -x XDIT_SLOW_FROM=3 "$bin" generate --model "$root/models/pixart-sigma-tiny" --prompt "a fox" \
    --height 1024 --width 1024 --no_resolution_binning --num_inference_steps 10 \
    --patch_parallel_degree 2 --sync_mode full_sync "${extra[@]}" --trace "$tmp/$w.json" \
    -o "$tmp/x.png"
done
python3 - "$tmp/even.json" "$tmp/dynamic.json" <<'PY'
import collections, json, sys
def steps(path):
    t = collections.defaultdict(float)
    for e in json.load(open(path))["traceEvents"]:
        if e["cat"] == "compute" and e["name"].startswith("step "):
            i = int(e["name"].split()[1])
            t[i] = max(t[i], e["dur"] / 1e3)
    return [t[i] for i in sorted(t)]
even, dyn = steps(sys.argv[1]), steps(sys.argv[2])
print("| step | even split, ms | dynamic, ms |")
print("|---|---|---|")
for i, (a, b) in enumerate(zip(even, dyn)):
    print(f"| {i} | {a:.0f} | {b:.0f} |")
print(f"| total | {sum(even):.0f} | {sum(dyn):.0f} |")
PY
