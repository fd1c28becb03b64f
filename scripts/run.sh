#!/usr/bin/env bash
# Installs dependencies, builds, and runs the main job: `xdit generate` from a
# prompt to a PNG on the tiny PixArt-α model that ships in models/ (random
# weights: the picture is noise; it shows the whole pipeline end to end).
# Extra arguments are passed to `xdit generate` (e.g. --model DIR for a real one).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
mkdir -p out
./build/xdit generate --model models/pixart-alpha-tiny \
  --prompt "a red fox in the snow" --num_inference_steps 20 --guidance_scale 4.5 --seed 42 \
  --output out/fox.png "$@"
