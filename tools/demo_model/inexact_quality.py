#!/usr/bin/env python3
"""Quality of xdit's inexact parallel methods on real pictures (issue 40):
draws heldout.json's 24 captions with the demo model serially (f32, the
reference) and under each method on 2 ranks, and prints a markdown table of
the PSNR against the serial picture (mean and worst of the 24) and the
semantic score (classify.py). Exact layouts are listed as controls.

    python3 tools/demo_model/inexact_quality.py --xdit build/xdit [--model models/demo-shapes]

Needs numpy and Pillow, and mpirun (OpenMPI) on PATH.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import classify  # noqa: E402
import make_data  # noqa: E402

METHODS = [  # (name, ranks, flags)
    ("Ulysses 2 (exact, control)", 2, "--ulysses_degree 2"),
    ("PipeFusion 2, full warm-up (exact, control)", 2,
     "--pipefusion_parallel_degree 2 --warmup_steps 20"),
] + [
    (f"PipeFusion 2, warm-up {w}, {m} patches", 2,
     f"--pipefusion_parallel_degree 2 --warmup_steps {w} --num_pipeline_patch {m}")
    for m in (2, 4) for w in (1, 2, 4)
] + [
    ("DistriFusion 2 (displaced, warm-up 1)", 2, "--patch_parallel_degree 2 --warmup_steps 1"),
    ("DistriFusion 4 (displaced, warm-up 1)", 4, "--patch_parallel_degree 4 --warmup_steps 1"),
    ("naive patch 2", 2, "--patch_parallel_degree 2 --patch_mode naive"),
    ("naive patch 4", 4, "--patch_parallel_degree 4 --patch_mode naive"),
]


def draw(xdit, model, scenes, out_dir, ranks, flags):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1" if ranks else os.environ.get("OMP_NUM_THREADS", "2"),
               XDIT_QUIET="1")
    cmd = []
    if ranks:
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", "--bind-to", "none",
               "--mca", "btl_vader_single_copy_mechanism", "none"]
    cmd += [xdit, "generate", "--model", model, "--seed", "0", "--dtype", "f32",
            "-o", os.path.join(out_dir, "out.png")]
    for s in scenes:
        cmd += ["--prompt", s["caption"]]
    cmd += flags.split()
    subprocess.run(cmd, env=env, check=True)
    return [np.asarray(Image.open(os.path.join(out_dir, f"out_{i}.png")).convert("RGB"))
            for i in range(len(scenes))]


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--xdit", default="build/xdit")
    ap.add_argument("--model", default="models/demo-shapes")
    a = ap.parse_args()
    scenes = json.load(open(make_data.HELDOUT_PATH))["captions"]
    work = tempfile.mkdtemp(prefix="xdit_inexact_")
    try:
        ref = draw(a.xdit, a.model, scenes, work, 0, "")
        ref_score = sum(classify.check(img, s)["pass"] for img, s in zip(ref, scenes))
        print(f"| method | ranks | PSNR vs serial, mean (dB) | worst (dB) | semantic score |")
        print(f"|---|---|---|---|---|")
        print(f"| serial f32 (the reference) | 1 | - | - | {ref_score}/{len(scenes)} |")
        for name, ranks, flags in METHODS:
            got = draw(a.xdit, a.model, scenes, work, ranks, flags)
            p = [psnr(x, y) for x, y in zip(got, ref)]
            score = sum(classify.check(img, s)["pass"] for img, s in zip(got, scenes))
            fmt = lambda v: "identical" if v == float("inf") else f"{v:.1f}"  # noqa: E731
            finite = [v for v in p if v != float("inf")]
            mean = fmt(float(np.mean(finite))) if finite else "identical"
            print(f"| {name} (`{flags}`) | {ranks} | {mean} | {fmt(min(p))} | "
                  f"{score}/{len(scenes)} |", flush=True)
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
