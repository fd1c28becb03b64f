#!/usr/bin/env bash
# Speed and memory of two xdit builds, alternated in one run on one machine:
# `xdit bench transformer --resolutions 512` (full-size PixArt-α, random
# weights, bf16 and f32, best of 3 timed steps) and the peak RSS of a
# one-shot `xdit generate` at 1024 px on the tiny PixArt-Σ (GNU time's
# maximum resident set), each build `ROUNDS` times (default 2).
#
#   tools/compare_builds/speed.sh OLD_XDIT NEW_XDIT
set -euo pipefail
old=$1
new=$2
rounds=${ROUNDS:-2}
root="$(cd "$(dirname "$0")/../.." && pwd)"
out=$(mktemp -d)
export XDIT_QUIET=1
lscpu | grep -m1 'Model name'
for i in $(seq "$rounds"); do
  for b in old new; do
    bin=$old
    [ $b = new ] && bin=$new
    echo "== round $i, $b build: bench transformer --resolutions 512"
    "$bin" bench transformer --resolutions 512 --repeat 3 2>&1 | grep -v '^\s*$'
    /usr/bin/time -f "%M" -o "$out/rss" "$bin" generate --model "$root/models/pixart-sigma-tiny" \
      --prompt "a red fox" --height 1024 --width 1024 --num_inference_steps 2 \
      -o "$out/fox.png" >/dev/null 2>&1
    echo "== round $i, $b build: generate 1024 px peak RSS $(($(cat "$out/rss") / 1024)) MiB"
  done
done
