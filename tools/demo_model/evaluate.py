#!/usr/bin/env python3
"""Draws heldout.json's 24 captions with diffusers' PixArtAlphaPipeline from a
model folder and scores them with classify.py (the semantic test of issue 40,
run in Python; the C++ test runs xdit generate instead).

    python3 tools/demo_model/evaluate.py models/demo-shapes --grid out/demo_eval.png

Caption i is drawn with seed i, 20 steps, guidance 4.5 (xdit generate's
defaults), clean_caption=False (xdit lower-cases and strips only).
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import classify  # noqa: E402
import make_data  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--guidance", type=float, default=4.5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=24)
    ap.add_argument("--grid", help="write the pictures side by side to this PNG")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from diffusers import PixArtAlphaPipeline
    from PIL import Image
    pipe = PixArtAlphaPipeline.from_pretrained(a.model, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    scenes = json.load(open(make_data.HELDOUT_PATH))["captions"][:a.limit]
    passed, pictures = 0, []
    for i, scene in enumerate(scenes):
        img = pipe(scene["caption"], num_inference_steps=a.steps, guidance_scale=a.guidance,
                   generator=torch.Generator().manual_seed(i), clean_caption=False).images[0]
        arr = np.asarray(img.convert("RGB"))
        r = classify.check(arr, scene)
        passed += r["pass"]
        pictures.append(arr)
        print(f"{'PASS' if r['pass'] else 'FAIL'} {i:2d} {scene['caption']} -> {r['found']}", flush=True)
    print(f"{passed}/{len(scenes)} held-out captions drawn as they say")
    if a.grid:
        cols = 6
        while len(pictures) % cols:
            pictures.append(np.zeros_like(pictures[0]))
        rows = [np.concatenate(pictures[r:r + cols], 1) for r in range(0, len(pictures), cols)]
        Image.fromarray(np.concatenate(rows, 0)).save(a.grid)


if __name__ == "__main__":
    main()
