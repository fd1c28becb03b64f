#!/usr/bin/env python3
"""The semantic check of issue 40: does an RGB picture show what its caption
says? A plain numeric rule, no learned part, so a C++ test can do the same:

1. Background: the nearest palette colour (grammar.PALETTE, Euclidean RGB) of
   every pixel in the outer frame (BORDER of the side on each edge); the most
   common one is the background colour, and the mean of the frame pixels
   that snapped to it is the background's RGB.
2. Object pixels: those farther than FG_DISTANCE from the background's RGB.
3. Which object a pixel belongs to: the expected object whose anchor
   (grammar.ANCHORS: the centre of its position) is nearest; one expected
   object takes all object pixels.
4. Each object: at least MIN_PIXELS of the picture, else it fails both
   tests; its colour is the nearest palette colour of the mean of its pixels;
   its position is the region of its pixels' centroid (x, y in [0, 1], y
   down): "in the center" if max(|x - .5|, |y - .5|) < CENTER, else left or
   right where |x - .5| >= |y - .5|, top or bottom otherwise.

A caption passes when the background and every object's colour and position
match (the issue's semantic test, which the C++ test repeats). Reported
beside it, not part of the pass:
5. Each object's shape: the circle, square and triangle of the object's area
   (make_data draws all three with area pi r^2) centred on its pixels'
   centroid are laid over its pixels; the shape is the one with the highest
   intersection over union, which is also reported as how well the outline
   matches (1: exactly; a round blob scores about 0.9 as a circle, 0.85 as a
   square and 0.7 as a triangle).

Usage:
    python3 tools/demo_model/classify.py PICTURE.png --caption-index I  # from heldout.json
    python3 tools/demo_model/classify.py --validate out/demo_data        # ground truth
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grammar  # noqa: E402

BORDER = 0.04      # frame width, fraction of the side
FG_DISTANCE = 60.0  # RGB distance from the background that makes a pixel an object's
MIN_PIXELS = 0.002  # an object smaller than this fraction of the picture is missing
CENTER = 0.125     # half side of the central square region

_NAMES = list(grammar.PALETTE)
_RGB = np.array([grammar.PALETTE[n] for n in _NAMES], np.float32)


def nearest_color(rgb):
    """Palette names of an [..., 3] array of colours."""
    d = ((np.asarray(rgb, np.float32)[..., None, :] - _RGB) ** 2).sum(-1)
    return np.array(_NAMES)[d.argmin(-1)]


def region(x, y):
    dx, dy = x - 0.5, y - 0.5
    if max(abs(dx), abs(dy)) < CENTER:
        return "in the center"
    if abs(dx) >= abs(dy):
        return "on the left" if dx < 0 else "on the right"
    return "at the top" if dy < 0 else "at the bottom"


def fit_shape(xs, ys, cx, cy, h, w):
    """(shape, IoU) of the grammar's shape that best covers the object pixels
    (xs, ys), each shape of the pixels' area centred on their centroid (cx, cy)."""
    import make_data
    mask = np.zeros((h, w), bool)
    mask[ys, xs] = True
    r = np.sqrt(len(xs) / (np.pi * h * w))  # fraction of the side, as make_data's radius
    x, y = np.meshgrid((np.arange(w) + 0.5) / w - cx, (np.arange(h) + 0.5) / h - cy)
    best = ("", -1.0)
    for shape in grammar.SHAPES:
        inside = make_data.sdf(shape, x, y, r) < 0
        iou = (inside & mask).sum() / max(1, (inside | mask).sum())
        best = max(best, (shape, float(iou)), key=lambda b: b[1])
    return best


def analyse(img, expected):
    """What the picture shows, read with the expected scene's positions:
    {"background": name, "objects": [{"color", "position", "pixels", "shape", "iou"} | None]}."""
    img = np.asarray(img, np.float32)[..., :3]
    h, w, _ = img.shape
    b = max(1, int(round(BORDER * min(h, w))))
    frame = np.concatenate([img[:b].reshape(-1, 3), img[-b:].reshape(-1, 3),
                            img[b:-b, :b].reshape(-1, 3), img[b:-b, -b:].reshape(-1, 3)])
    names = nearest_color(frame)
    values, counts = np.unique(names, return_counts=True)
    bg = str(values[counts.argmax()])
    bg_rgb = frame[names == bg].mean(0)

    fg = np.sqrt(((img - bg_rgb) ** 2).sum(-1)) > FG_DISTANCE
    ys, xs = np.nonzero(fg)
    fx, fy = (xs + 0.5) / w, (ys + 0.5) / h
    anchors = np.array([grammar.ANCHORS[o["position"]] for o in expected["objects"]], np.float32)
    owner = ((fx[:, None] - anchors[:, 0]) ** 2 + (fy[:, None] - anchors[:, 1]) ** 2).argmin(1)
    objects = []
    for k in range(len(expected["objects"])):
        sel = owner == k
        n = int(sel.sum())
        if n < MIN_PIXELS * h * w:
            objects.append(None)
            continue
        mean = img[ys[sel], xs[sel]].mean(0)
        cx, cy = fx[sel].mean(), fy[sel].mean()
        shape, iou = fit_shape(xs[sel], ys[sel], cx, cy, h, w)
        objects.append({"color": str(nearest_color(mean)), "position": region(cx, cy),
                        "pixels": n, "shape": shape, "iou": round(iou, 3)})
    return {"background": bg, "objects": objects}


def check(img, expected):
    """Pass/fail per criterion: {"background": bool, "objects": [{"color": bool,
    "position": bool, "shape": bool}], "pass": bool, "found": analyse(...)};
    "pass" leaves the shape out (see the module's doc)."""
    found = analyse(img, expected)
    result = {"background": found["background"] == expected["background"], "objects": []}
    for want, got in zip(expected["objects"], found["objects"]):
        result["objects"].append({
            "color": got is not None and got["color"] == want["color"],
            "position": got is not None and got["position"] == want["position"],
            "shape": got is not None and got["shape"] == want["shape"]})
    result["pass"] = result["background"] and all(o["color"] and o["position"] for o in result["objects"])
    result["found"] = found
    return result


def shape_summary(checks):
    """"shapes s/n, outline IoU m" over check() results: the objects whose
    shape is the caption's, and the mean IoU of the found objects' outlines."""
    objs = [o for r in checks for o in r["objects"]]
    found = [f for r in checks for f in r["found"]["objects"] if f is not None]
    iou = np.mean([f["iou"] for f in found]) if found else 0.0
    return f"shapes {sum(o['shape'] for o in objs)}/{len(objs)}, outline IoU {iou:.3f}"


def validate(data_dir, limit):
    """The rule on ground-truth pictures: the data set's and the held-out scenes' own."""
    import make_data
    images = np.load(os.path.join(data_dir, "images.npy"), mmap_mode="r")
    records = json.load(open(os.path.join(data_dir, "captions.json")))
    n = min(limit, len(records))
    checks = [check(images[i], records[i]) for i in range(n)]
    failed = [i for i in range(n) if not checks[i]["pass"]]
    two = sum(len(records[i]["objects"]) == 2 for i in range(n))
    print(f"data set: {n - len(failed)}/{n} pass ({two} with two objects); {shape_summary(checks)}")
    for i in failed[:10]:
        print("  FAIL", i, records[i]["caption"], check(images[i], records[i])["found"])
    import random
    rnd = random.Random(1)
    held = json.load(open(make_data.HELDOUT_PATH))["captions"]
    hfail = 0
    for rep in range(10):
        for scene in held:
            img = make_data.render(scene, images.shape[1], rnd)
            if not check(img, scene)["pass"]:
                hfail += 1
                print("  FAIL held-out", scene["caption"], check(img, scene)["found"])
    print(f"held-out scenes drawn 10 times each: {10 * len(held) - hfail}/{10 * len(held)} pass")
    return not failed and not hfail


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("picture", nargs="?")
    ap.add_argument("--caption-index", type=int, help="index into heldout.json's captions")
    ap.add_argument("--validate", metavar="DATA_DIR")
    ap.add_argument("--limit", type=int, default=100000)
    a = ap.parse_args()
    if a.validate:
        sys.exit(0 if validate(a.validate, a.limit) else 1)
    from PIL import Image
    import make_data
    scene = json.load(open(make_data.HELDOUT_PATH))["captions"][a.caption_index]
    r = check(np.asarray(Image.open(a.picture).convert("RGB")), scene)
    print(json.dumps({"caption": scene["caption"], **r}))
    sys.exit(0 if r["pass"] else 1)


if __name__ == "__main__":
    main()
