#!/usr/bin/env python3
"""Draws the demo model's synthetic captioned data set (issue 40).

    python3 tools/demo_model/make_data.py --out out/demo_data --count 20000
    python3 tools/demo_model/make_data.py --heldout-only   # rewrite heldout.json only

Each picture is SIZE x SIZE RGB (256 by default: the transformer's
sample_size 32 with the VAE's factor 8, the smallest size diffusers'
PixArt-alpha resolution bins cover) of one or two shapes on a plain
background, captioned from the grammar in grammar.py. Shapes are drawn with
anti-aliased edges (pixel coverage from a signed distance) and mild jitter:
centre +-0.04 of the side, size +-12 %, shade +-10 % per object and per
background, so the model has to generalise. Half the scenes have two objects.

No training scene holds a held-out (colour, shape, position) triple
(grammar.held_out); heldout.json beside this script lists the 24 test
captions, each with at least one held-out triple, and what classify.py should
find in a picture of it. Writes, under --out:
  images.npy     uint8 [count, SIZE, SIZE, 3]
  captions.json  [{"caption", "background", "objects": [...], "places": [[cx, cy, r], ...]}]
                 in the same order (places: each object's centre and radius as drawn)
  meta.json      the arguments, the distinct captions and the time it took
  samples/       the first --samples pictures as PNG, for a look
Deterministic for a given --seed, --count and --size (numpy and random only).
"""
import argparse
import json
import os
import random
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grammar  # noqa: E402
import classify  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
HELDOUT_PATH = os.path.join(HERE, "heldout.json")
SMALL, LARGE = 0.085, 0.15  # the size's "radius" as a fraction of the side
JITTER_POS, JITTER_SIZE, JITTER_SHADE = 0.04, 0.12, 0.10


def sdf(shape, x, y, r):
    """Signed distance (in the units of x, y) to a shape of radius r centred at
    the origin; all three shapes have about the same area (pi r^2)."""
    if shape == "circle":
        return np.sqrt(x * x + y * y) - r
    if shape == "square":
        a = r * np.sqrt(np.pi) / 2  # half side
        qx, qy = np.abs(x) - a, np.abs(y) - a
        outside = np.sqrt(np.maximum(qx, 0) ** 2 + np.maximum(qy, 0) ** 2)
        return outside + np.minimum(np.maximum(qx, qy), 0)
    if shape == "triangle":
        # Equilateral, apex up, centred on its centroid; the exact distance of
        # Quilez's sdEquilateralTriangle (iquilezles.org, 2D distance functions).
        side = r * np.sqrt(4 * np.pi / np.sqrt(3))
        k = np.sqrt(3.0)
        px = np.abs(x) - side / 2
        py = -y + side / (2 * k)  # flip: the picture's y grows downwards
        flip = px + k * py > 0
        px2 = np.where(flip, (px - k * py) / 2, px)
        py2 = np.where(flip, (-k * px - py) / 2, py)
        px2 = px2 - np.clip(px2, -side, 0)
        return -np.sqrt(px2 * px2 + py2 * py2) * np.sign(py2)
    raise ValueError(shape)


def extent(shape, r):
    """Half-width and (up, down) extents of a shape of radius r, for keeping
    it inside the picture."""
    if shape == "circle":
        return r, r, r
    if shape == "square":
        a = r * np.sqrt(np.pi) / 2
        return a, a, a
    side = r * np.sqrt(4 * np.pi / np.sqrt(3))
    h = side * np.sqrt(3) / 2
    return side / 2, 2 * h / 3, h / 3


def shade(rnd, name):
    f = 1 + rnd.uniform(-JITTER_SHADE, JITTER_SHADE)
    return np.clip(np.array(grammar.PALETTE[name], np.float32) * f, 0, 255)


def place(rnd, obj):
    """Centre and radius (fractions of the side) of one object, jittered and
    kept 0.02 inside the picture."""
    r = (SMALL if obj["size"] == "small" else LARGE) * (1 + rnd.uniform(-JITTER_SIZE, JITTER_SIZE))
    ax, ay = grammar.ANCHORS[obj["position"]]
    hw, up, down = extent(obj["shape"], r)
    cx = np.clip(ax + rnd.uniform(-JITTER_POS, JITTER_POS), hw + 0.02, 0.98 - hw)
    cy = np.clip(ay + rnd.uniform(-JITTER_POS, JITTER_POS), up + 0.02, 0.98 - down)
    return cx, cy, r


def render(scene, size, rnd, places_out=None):
    """The picture of a scene (uint8 [size, size, 3]). Two objects are placed
    again until they are at least 3 pixels apart; each object's (cx, cy, r)
    is appended to places_out when given."""
    c = (np.arange(size, dtype=np.float32) + 0.5) / size
    x, y = np.meshgrid(c, c)
    px = 1.0 / size
    for _ in range(100):
        places = [place(rnd, o) for o in scene["objects"]]
        dists = [sdf(o["shape"], x - cx, y - cy, r) for o, (cx, cy, r) in zip(scene["objects"], places)]
        if len(dists) < 2 or not np.any((dists[0] < 3 * px) & (dists[1] < 3 * px)):
            break
    else:
        raise RuntimeError(f"cannot place {scene}")
    if places_out is not None:
        places_out.extend([float(v) for v in p] for p in places)
    img = np.empty((size, size, 3), np.float32)
    img[:] = shade(rnd, scene["background"])
    for o, d in zip(scene["objects"], dists):
        cover = np.clip(0.5 - d / px, 0, 1)[..., None]  # pixel coverage: anti-aliased edge
        img = img * (1 - cover) + shade(rnd, o["color"]) * cover
    return np.round(img).astype(np.uint8)


def shape_coverage(scene, places, size):
    """Where each kind of shape is: float32 [size, size, 3], the pixels'
    coverage by a circle, a square and a triangle (grammar.SHAPES' order) of
    the scene placed at `places` (render's places_out). The training reads it
    at the text stage's and the latents' resolution."""
    c = (np.arange(size, dtype=np.float32) + 0.5) / size
    x, y = np.meshgrid(c, c)
    out = np.zeros((size, size, len(grammar.SHAPES)), np.float32)
    for o, (cx, cy, r) in zip(scene["objects"], places):
        d = sdf(o["shape"], x - cx, y - cy, r)
        k = grammar.SHAPES.index(o["shape"])
        out[..., k] = np.maximum(out[..., k], np.clip(0.5 - d * size, 0, 1))
    return out


def heldout_scenes():
    """The 24 test scenes, one per held-out triple: 8 of them (chosen among
    the triples not "in the center") with a second, ordinary object."""
    rnd = random.Random(40)
    pairable = [i for i, t in enumerate(grammar.HELD_OUT) if t[2] in grammar.PAIR_POSITIONS]
    two = set(rnd.sample(pairable, 8))
    scenes = []
    for i, (color, shape, position) in enumerate(grammar.HELD_OUT):
        bg = rnd.choice([c for c in grammar.COLORS if c != color])
        objs = [{"size": rnd.choice(grammar.SIZES), "color": color, "shape": shape,
                 "position": position}]
        if i in two:
            other = rnd.choice([p for p in grammar.PAIR_POSITIONS if p != position])
            objs.append(grammar.random_object(rnd, other, (bg,)))
            if rnd.random() < 0.5:
                objs.reverse()
        scenes.append({"background": bg, "objects": objs})
    return scenes


def write_heldout():
    scenes = heldout_scenes()
    out = {
        "rule": "no training scene holds a held-out (colour, shape, position) triple: colour "
                "index c and shape index s hold out position index (c + 2 s) mod 5 (grammar.py "
                "held_out); each caption here holds at least one such triple",
        "held_out_triples": [list(t) for t in grammar.HELD_OUT],
        "captions": [dict(caption=grammar.caption(s), **s) for s in scenes],
        # classify.py's rule as data, so that the C++ semantic test reads the
        # same palette, anchors and thresholds (tests/e2e/test_demo_model.cpp)
        "classifier": {
            "palette": {name: list(rgb) for name, rgb in grammar.PALETTE.items()},
            "anchors": {name: list(xy) for name, xy in grammar.ANCHORS.items()},
            "border": classify.BORDER, "fg_distance": classify.FG_DISTANCE,
            "min_pixels": classify.MIN_PIXELS, "center": classify.CENTER,
        },
    }
    with open(HELDOUT_PATH, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="out/demo_data")
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--two-object-fraction", type=float, default=0.5)
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--heldout-only", action="store_true")
    a = ap.parse_args()

    held = write_heldout()
    if a.heldout_only:
        return
    heldout_captions = {c["caption"] for c in held["captions"]}
    t0 = time.time()
    os.makedirs(os.path.join(a.out, "samples"), exist_ok=True)
    rnd = random.Random(a.seed)
    images = np.lib.format.open_memmap(os.path.join(a.out, "images.npy"), mode="w+",
                                       dtype=np.uint8, shape=(a.count, a.size, a.size, 3))
    records = []
    for i in range(a.count):
        scene = grammar.random_scene(rnd, rnd.random() < a.two_object_fraction)
        cap = grammar.caption(scene)
        assert cap not in heldout_captions
        places = []
        images[i] = render(scene, a.size, rnd, places)
        records.append(dict(caption=cap, **scene, places=[[round(v, 6) for v in p] for p in places]))
        if i < a.samples:
            from PIL import Image
            Image.fromarray(images[i]).save(os.path.join(a.out, "samples", f"{i:04d}.png"))
    images.flush()
    with open(os.path.join(a.out, "captions.json"), "w") as f:
        json.dump(records, f)
    distinct = len({r["caption"] for r in records})
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump({"count": a.count, "seed": a.seed, "size": a.size, "distinct_captions": distinct,
                   "two_object_fraction": a.two_object_fraction,
                   "seconds": round(time.time() - t0)}, f)
    print(f"{a.count} pictures ({distinct} distinct captions) of {a.size} px in {a.out}; "
          f"held-out list in {HELDOUT_PATH}")


if __name__ == "__main__":
    main()
