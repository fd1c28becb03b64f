#!/usr/bin/env bash
# Installs dependencies, builds, and runs the main job: `xdit generate` from
# prompts to PNGs on the demo model that ships in models/demo-shapes (issue
# 40: coloured circles, squares and triangles from captions of one grammar,
# trained on the project's own synthetic pictures; tools/demo_model/).
# With arguments, runs `xdit generate ARGUMENTS` instead (e.g. --model DIR
# --prompt "…" -o out/mine.png for a PixArt, FLUX.1 or SD3 folder of yours).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh xdit
mkdir -p out
if [[ $# -gt 0 ]]; then
  exec ./build/xdit generate "$@"
fi
./build/xdit generate --model models/demo-shapes \
  --prompt "a large red circle on the left on a blue background" \
  --prompt "a small yellow triangle at the top and a large white square at the bottom on a black background" \
  --seed 42 --output out/demo.png
echo "run.sh: wrote out/demo_0.png and out/demo_1.png (256 x 256 pixels): the two captions, drawn"
