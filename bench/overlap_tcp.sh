#!/usr/bin/env bash
# Whether communication moves during compute (issue 42, part 5): PipeFusion
# on 2 ranks over TCP (mpirun --mca btl tcp,self, where a message over the
# 64 KB eager limit moves by rendezvous), the tiny PixArt-Σ at 1024 x 1024
# px (2 patches: 393 KB of hidden states per patch message), 6 steps, traced;
# prints stage 0's and stage 1's time waiting for a patch, their patch
# compute, and the run's wall time, per round.
#
#   bench/overlap_tcp.sh [XDIT_BINARY ...]   # default build/xdit; several: compared round by round
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=("$root/build/xdit")
rounds="${ROUNDS:-3}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 XDIT_QUIET=1
for round in $(seq "$rounds"); do
  for bin in "${bins[@]}"; do
    t0=$EPOCHREALTIME
    mpirun -np 2 --oversubscribe --bind-to none --mca btl tcp,self "$bin" generate \
      --model "$root/models/pixart-sigma-tiny" --prompt "a fox" --height 1024 --width 1024 \
      --no_resolution_binning --num_inference_steps 6 --pipefusion_parallel_degree 2 \
      --num_pipeline_patch 2 --trace "$tmp/t.json" -o "$tmp/x.png"
    t1=$EPOCHREALTIME
    python3 - "$tmp/t.json" "$bin" "$round" "$t0" "$t1" <<'PY'
import collections, json, sys
j = json.load(open(sys.argv[1]))
wait, comp = collections.defaultdict(float), collections.defaultdict(float)
for e in j["traceEvents"]:
    if e["name"].startswith("wait patch"):
        wait[e["pid"]] += e["dur"] / 1e3
    elif e["cat"] == "compute" and e["name"].startswith("patch"):
        comp[e["pid"]] += e["dur"] / 1e3
print(f"round {sys.argv[3]} {sys.argv[2]}: stage 0 waits {wait[0]:.1f} ms, stage 1 waits "
      f"{wait[1]:.1f} ms; patch compute {comp[0]:.0f} / {comp[1]:.0f} ms; wall {float(sys.argv[5]) - float(sys.argv[4]):.2f} s")
PY
  done
done
