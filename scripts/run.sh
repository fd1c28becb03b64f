#!/usr/bin/env bash
# Installs dependencies, builds, and runs the main job: PixArt denoising from
# prompt embeddings to latents on the tiny PixArt-α model shipped in
# tests/data (random weights: the latents are not a picture, they show the
# pipeline end to end). Extra arguments are passed to `xdit generate`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
mkdir -p out
./build/xdit generate --model models/pixart-alpha-tiny \
  --prompt_embeds tests/data/goldens/pixart_alpha_loop.safetensors \
  --height 48 --width 80 --num_inference_steps 5 --guidance_scale 4.5 --seed 42 \
  --output_type latent --output out/latents.safetensors "$@"
