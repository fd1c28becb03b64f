"""The `text` stage of train.py: the T5 encoder learns to bind each colour
word to its role before the transformer sees it.

Trained jointly from random weights through the diffusion loss alone, the T5
learned slowly which colour is the background's and which object stands
where: the full runs' failures were mostly an object and its background with
their colours swapped (see README.md). Here the encoder is first trained on a
plain regression with no noise in it: from the caption, a readout predicts the
picture's colours on a GRID x GRID layout (the picture averaged over cells of
256 / GRID pixels). The readout is one cross-attention from a learned query
per cell to the T5's outputs plus a per-cell MLP, so it cannot combine tokens
itself: for a cell on the left to come out yellow, the T5 token it attends to
must already say "the object on the left is yellow". That is the reading the
PixArt transformer's cross-attention needs. Each cell also holds how much of
it each kind of shape covers (make_data.shape_coverage): without them the
encoder told shapes apart only faintly, and the transformer trained on it
drew the same round blob for "circle", "square" and "triangle" (its x0
predictions for the three differed by 0.005 in latent units). The readout
is then thrown away; the encoder goes on training jointly with the
transformer.

Validated on the held-out scenes (make_data.heldout_scenes, drawn REPEATS
times with their jitter): the predicted layout, scaled up to the picture's
size, goes through classify.py as a generated picture would.
"""
import json
import math
import os
import random
import time

import numpy as np
import torch

import classify
import grammar
import make_data

GRID = 16
REPEATS = 5
CHANNELS = 6  # RGB and the coverage of circle, square, triangle, all in [-1, 1]
SHAPE_SCALE = 4  # shape_coverage's resolution per cell side (coverage averaged over it)


class LayoutReadout(torch.nn.Module):
    """GRID x GRID cells of CHANNELS from T5 outputs: learned cell queries,
    one cross-attention, a per-cell MLP."""

    def __init__(self, dim, heads):
        super().__init__()
        self.query = torch.nn.Parameter(torch.randn(GRID * GRID, dim) * 0.5)
        self.attn = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 2 * dim), torch.nn.GELU(),
                                       torch.nn.Linear(2 * dim, CHANNELS))

    def forward(self, text, mask):
        q = self.query.expand(text.shape[0], -1, -1)
        h, _ = self.attn(q, text, text, key_padding_mask=mask == 0, need_weights=False)
        return self.mlp(h)  # [batch, GRID * GRID, CHANNELS] in [-1, 1] units


def cell_means(images):
    """uint8 [n, S, S, 3] -> float [n, GRID * GRID, 3] in [-1, 1]."""
    n, s = images.shape[0], images.shape[1]
    c = s // GRID
    x = images.reshape(n, GRID, c, GRID, c, 3).astype(np.float32).mean((2, 4))
    return torch.from_numpy(x.reshape(n, GRID * GRID, 3) / 127.5 - 1)


def shape_cells(scenes, places):
    """Each scene's shape coverage per cell: float [n, GRID * GRID, 3] in [-1, 1]."""
    s = GRID * SHAPE_SCALE
    cov = np.stack([make_data.shape_coverage(sc, p, s) for sc, p in zip(scenes, places)])
    cov = cov.reshape(len(cov), GRID, SHAPE_SCALE, GRID, SHAPE_SCALE, 3).mean((2, 4))
    return torch.from_numpy(cov.reshape(len(cov), GRID * GRID, 3) * 2 - 1)


def layout_picture(cells, size):
    """[GRID * GRID, CHANNELS] in [-1, 1] -> uint8 [size, size, 3] of the RGB
    channels, each cell a block."""
    img = ((cells[:, :3].clamp(-1, 1) + 1) * 127.5).round().byte().view(GRID, GRID, 3).numpy()
    return np.repeat(np.repeat(img, size // GRID, 0), size // GRID, 1)


def heldout_pictures(size):
    """The held-out scenes drawn REPEATS times: (scenes, pictures, places)."""
    rnd = random.Random(7)
    scenes = [s for s in make_data.heldout_scenes() for _ in range(REPEATS)]
    places = [[] for _ in scenes]
    images = np.stack([make_data.render(s, size, rnd, p) for s, p in zip(scenes, places)])
    return scenes, images, places


def shapes_read(cells, scene, places):
    """How many of a scene's objects the predicted shape channels name right:
    the channel with the most predicted coverage over the object's own cells."""
    own = shape_cells([scene], [places])[0] > -1  # [GRID * GRID, 3]: the true shapes' cells
    right = 0
    for o in scene["objects"]:
        k = grammar.SHAPES.index(o["shape"])
        right += int((cells[own[:, k], 3:] + 1).sum(0).argmax()) == k
    return right


def layout_pass(t5, readout, tokenize, scenes, places, size):
    """How many scenes the predicted layouts draw (classify.py's rule), as
    "passed/count (background b, objects' colours c, positions p, shapes s)"."""
    ids, mask = tokenize([grammar.caption(s) for s in scenes])
    with torch.no_grad():
        cells = readout(t5(input_ids=ids, attention_mask=mask)[0], mask)
    checks = [classify.check(layout_picture(c, size), s) for c, s in zip(cells, scenes)]
    objs = [o for r in checks for o in r["objects"]]
    shapes = sum(shapes_read(c, s, p) for c, s, p in zip(cells, scenes, places))
    return (f"{sum(r['pass'] for r in checks)}/{len(checks)} (background "
            f"{sum(r['background'] for r in checks)}, objects' colours "
            f"{sum(o['color'] for o in objs)}/{len(objs)}, positions "
            f"{sum(o['position'] for o in objs)}, shapes {shapes})")


def train_text(a, make_t5, tokenizer, tokenize, log_stage):
    """Trains the T5 with the layout readout; saves it under --work/text_encoder_init."""
    images = np.load(os.path.join(a.data, "images.npy"), mmap_mode="r")
    records = json.load(open(os.path.join(a.data, "captions.json")))
    n, size = images.shape[0], images.shape[1]
    t0, c0 = time.time(), time.process_time()
    if "places" not in records[0]:
        raise SystemExit(f"{a.data}/captions.json has no places: draw the data again with make_data.py")
    targets = torch.cat([torch.cat([cell_means(images[i:i + 500]),
                                    shape_cells(records[i:i + 500], [r["places"] for r in records[i:i + 500]])],
                                   -1) for i in range(0, n, 500)])
    ids, mask = tokenize(tokenizer, [r["caption"] for r in records[:n]])
    held_scenes, held_images, held_places = heldout_pictures(size)
    held_mse_target = torch.cat([cell_means(held_images), shape_cells(held_scenes, held_places)], -1)
    torch.manual_seed(a.seed)
    t5 = make_t5(a, len(tokenizer)).train()
    readout = LayoutReadout(a.t5_dim, a.t5_dim // 32)
    params = list(t5.parameters()) + list(readout.parameters())
    opt = torch.optim.AdamW(params, lr=a.text_lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(a.seed)
    avg = None

    def tok(captions):
        return tokenize(tokenizer, captions)

    held_ids, held_mask = tok([grammar.caption(s) for s in held_scenes])
    for step in range(1, a.text_steps + 1):
        idx = torch.randint(0, n, (a.text_batch,), generator=gen)
        pred = readout(t5(input_ids=ids[idx], attention_mask=mask[idx])[0], mask[idx])
        loss = torch.nn.functional.mse_loss(pred, targets[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        warm = min(1.0, step / 100)
        cos = 0.5 * (1 + math.cos(math.pi * step / a.text_steps))
        for g in opt.param_groups:
            g["lr"] = a.text_lr * warm * (0.05 + 0.95 * cos)
        opt.step()
        avg = loss.item() if avg is None else 0.98 * avg + 0.02 * loss.item()
        if step % (a.log_every * 4) == 0 or step == a.text_steps:
            t5.eval()
            with torch.no_grad():
                hp = readout(t5(input_ids=held_ids, attention_mask=held_mask)[0], held_mask)
                held_mse = torch.nn.functional.mse_loss(hp, held_mse_target).item()
            passed = layout_pass(t5, readout, tok, held_scenes, held_places, size)
            t5.train()
            print(f"text step {step}/{a.text_steps} loss {avg:.4f} held-out mse {held_mse:.4f} "
                  f"layouts pass {passed}, {time.time() - t0:.0f} s", flush=True)
    t5.eval()
    t5.save_pretrained(os.path.join(a.work, "text_encoder_init"), safe_serialization=True)
    train_pass = layout_pass(t5, readout, tok, records[:120], [r["places"] for r in records[:120]], size)
    log_stage(a.work, "text", steps=a.text_steps, batch=a.text_batch, grid=GRID,
              seconds=round(time.time() - t0),
              cpu_seconds_per_thread=round((time.process_time() - c0) / a.threads),
              final_loss=round(avg, 5), heldout_layout_mse=round(held_mse, 5),
              heldout_layouts_pass=passed, training_layouts_pass=train_pass)

