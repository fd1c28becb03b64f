#!/usr/bin/env python3
"""Draws heldout.json's 24 captions with diffusers' PixArtAlphaPipeline from a
model folder and scores them with classify.py (the semantic test of issue 40,
run in Python; the C++ test runs xdit generate instead).

    python3 tools/demo_model/evaluate.py models/demo-shapes --grid out/demo_eval.png
    python3 tools/demo_model/evaluate.py out/demo_train/vae --reconstruct out/demo_data

The second form checks the VAE alone: data-set pictures through encoder and
decoder, scored by classify.py against their own captions (the most the
whole model can reach) with the mean absolute error in 0..255.

Caption i is drawn with seed i, 20 steps, guidance 4.5 (xdit generate's
defaults), clean_caption=False (xdit lower-cases and strips only).
"""
import argparse
import json
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see train.py

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import classify  # noqa: E402
import make_data  # noqa: E402


def reconstruct(vae_dir, data_dir, count, grid):
    from diffusers import AutoencoderKL
    from PIL import Image
    vae = AutoencoderKL.from_pretrained(vae_dir).eval()
    images = np.load(os.path.join(data_dir, "images.npy"), mmap_mode="r")
    records = json.load(open(os.path.join(data_dir, "captions.json")))
    n = min(count, len(records))
    # The last pictures: a VAE trained on crops of the first ones may not have seen them.
    idx = list(range(len(records) - n, len(records)))
    passed, err, shown, checks = 0, 0.0, [], []
    with torch.no_grad():
        for i in range(0, n, 16):
            x = np.stack([images[j] for j in idx[i:i + 16]])
            t = torch.from_numpy(x).permute(0, 3, 1, 2).float() / 127.5 - 1
            y = vae.decode(vae.encode(t).latent_dist.mode()).sample
            y = ((y.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).numpy()
            err += np.abs(y.astype(np.float32) - x).mean() * len(x)
            for k, j in enumerate(idx[i:i + 16]):
                checks.append(classify.check(y[k], records[j]))
                passed += checks[-1]["pass"]
            if len(shown) < 6:
                shown += [np.concatenate([x[k], y[k]], 0) for k in range(min(6 - len(shown), len(x)))]
    print(f"VAE reconstructions: {passed}/{n} pass classify.py ({classify.shape_summary(checks)}), "
          f"mean abs error {err / n:.2f} / 255")
    if grid:
        Image.fromarray(np.concatenate(shown, 1)).save(grid)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--guidance", type=float, default=4.5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=24)
    ap.add_argument("--grid", help="write the pictures side by side to this PNG")
    ap.add_argument("--reconstruct", metavar="DATA_DIR",
                    help="MODEL is a VAE folder: score its reconstructions of DATA_DIR's pictures")
    ap.add_argument("--count", type=int, default=256)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.reconstruct:
        return reconstruct(a.model, a.reconstruct, a.count, a.grid)
    from diffusers import PixArtAlphaPipeline
    from PIL import Image
    pipe = PixArtAlphaPipeline.from_pretrained(a.model, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    scenes = json.load(open(make_data.HELDOUT_PATH))["captions"][:a.limit]
    passed, pictures, checks = 0, [], []
    for i, scene in enumerate(scenes):
        img = pipe(scene["caption"], num_inference_steps=a.steps, guidance_scale=a.guidance,
                   generator=torch.Generator().manual_seed(i), clean_caption=False).images[0]
        arr = np.asarray(img.convert("RGB"))
        r = classify.check(arr, scene)
        passed += r["pass"]
        checks.append(r)
        pictures.append(arr)
        print(f"{'PASS' if r['pass'] else 'FAIL'} {i:2d} {scene['caption']} -> {r['found']}", flush=True)
    print(f"{passed}/{len(scenes)} held-out captions drawn as they say; {classify.shape_summary(checks)}")
    if a.grid:
        cols = 6
        while len(pictures) % cols:
            pictures.append(np.zeros_like(pictures[0]))
        rows = [np.concatenate(pictures[r:r + cols], 1) for r in range(0, len(pictures), cols)]
        Image.fromarray(np.concatenate(rows, 0)).save(a.grid)


if __name__ == "__main__":
    main()
