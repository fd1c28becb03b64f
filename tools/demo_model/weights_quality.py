#!/usr/bin/env python3
"""Quality of xdit's quantized weights on real pictures (issues 40 and 45):
draws heldout.json's 24 captions with the demo model with its weights as
computed (bf16, the reference) and kept as int8, fp8 and Q8_0
(`--weights_dtype`), prints a markdown table of the PSNR against the bf16
pictures (mean and worst of the 24) and the semantic score (classify.py),
and writes the first captions' pictures side by side (one row a caption:
bf16 | int8 | fp8 | q8_0).

    python3 tools/demo_model/weights_quality.py --xdit build/xdit --grid docs/images/demo_weights.png
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import classify  # noqa: E402
import inexact_quality  # noqa: E402
import make_data  # noqa: E402

FORMATS = [("bf16 (the reference)", "--dtype bf16"),
           ("int8 (`--weights_dtype int8`)", "--dtype bf16 --weights_dtype int8"),
           ("fp8 e4m3 (`--weights_dtype fp8`)", "--dtype bf16 --weights_dtype fp8"),
           ("Q8_0 (`--weights_dtype q8_0`)", "--dtype bf16 --weights_dtype q8_0")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--xdit", default="build/xdit")
    ap.add_argument("--model", default="models/demo-shapes")
    ap.add_argument("--grid", help="the side-by-side PNG")
    ap.add_argument("--rows", type=int, default=4, help="captions in the side-by-side PNG")
    a = ap.parse_args()
    scenes = json.load(open(make_data.HELDOUT_PATH))["captions"]
    work = tempfile.mkdtemp(prefix="xdit_weights_")
    try:
        pictures = {}
        for name, flags in FORMATS:
            # (draw() runs f32 by default; the later --dtype wins)
            pictures[name] = inexact_quality.draw(a.xdit, a.model, scenes, work, 0, flags)
        ref = pictures[FORMATS[0][0]]
        print("| weights | PSNR vs bf16, mean (dB) | worst (dB) | semantic score |")
        print("|---|---|---|---|")
        for name, _ in FORMATS:
            got = pictures[name]
            p = [inexact_quality.psnr(x, y) for x, y in zip(got, ref)]
            score = sum(classify.check(img, s)["pass"] for img, s in zip(got, scenes))
            finite = [v for v in p if v != float("inf")]
            mean = f"{np.mean(finite):.1f}" if finite else "identical"
            worst = "identical" if min(p) == float("inf") else f"{min(p):.1f}"
            print(f"| {name} | {'-' if got is ref else mean} | {'-' if got is ref else worst} | "
                  f"{score}/{len(scenes)} |")
        if a.grid:
            rows = [np.concatenate([pictures[n][i] for n, _ in FORMATS], 1)
                    for i in range(min(a.rows, len(scenes)))]
            os.makedirs(os.path.dirname(a.grid) or ".", exist_ok=True)
            Image.fromarray(np.concatenate(rows, 0)).save(a.grid, optimize=True)
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
