#!/usr/bin/env python3
"""FLUX.1 original-layout names (issue 45): where diffusers'
`convert_flux_transformer_checkpoint_to_diffusers` takes each diffusers
weight from in a checkpoint of Black Forest Labs' layout (the layout of the
community GGUF and single-file safetensors files), at FLUX.1's real widths.

    python3 tools/goldens/make_flux_checkpoint.py   # from the repository root

The converter hard-codes FLUX.1's widths (3072, MLP 12288), so the
checkpoint it is fed has the real row counts with one column, two double
and two single blocks and a guidance embedder; every value says which
original tensor and row it is. Writes tests/data/flux_checkpoint/rows.json:
{diffusers name: [original name, first row, rows, halves swapped, the
original's rows]}.
"""
import json
import os

import diffusers
import torch
from diffusers.loaders.single_file_utils import convert_flux_transformer_checkpoint_to_diffusers

OUT = "tests/data/flux_checkpoint"
D, MLP, HEAD = 3072, 12288, 128


def shapes():
    s = {}
    for g, rows in [("time_in", D), ("vector_in", D), ("guidance_in", D)]:
        for layer in ["in_layer", "out_layer"]:
            s[f"{g}.{layer}.weight"] = rows
            s[f"{g}.{layer}.bias"] = rows
    for n in ["txt_in", "img_in"]:
        s[f"{n}.weight"] = D
        s[f"{n}.bias"] = D
    for i in range(2):
        p = f"double_blocks.{i}."
        for st in ["img", "txt"]:
            for name, rows in [("_mod.lin", 6 * D), ("_attn.qkv", 3 * D), ("_attn.proj", D),
                               ("_mlp.0", 4 * D), ("_mlp.2", D)]:
                s[p + st + name + ".weight"] = rows
                s[p + st + name + ".bias"] = rows
            s[p + st + "_attn.norm.query_norm.scale"] = HEAD
            s[p + st + "_attn.norm.key_norm.scale"] = HEAD
        p = f"single_blocks.{i}."
        for name, rows in [("modulation.lin", 3 * D), ("linear1", 3 * D + MLP), ("linear2", D)]:
            s[p + name + ".weight"] = rows
            s[p + name + ".bias"] = rows
        s[p + "norm.query_norm.scale"] = HEAD
        s[p + "norm.key_norm.scale"] = HEAD
    s["final_layer.linear.weight"] = 64
    s["final_layer.linear.bias"] = 64
    s["final_layer.adaLN_modulation.1.weight"] = 2 * D
    s["final_layer.adaLN_modulation.1.bias"] = 2 * D
    return s


def main():
    os.makedirs(OUT, exist_ok=True)
    names = sorted(shapes())
    ckpt = {}
    for t, name in enumerate(names):
        rows = torch.arange(shapes()[name], dtype=torch.float64) + t * 1e6
        ckpt["model.diffusion_model." + name] = rows if "weight" not in name else rows[:, None]
    converted = convert_flux_transformer_checkpoint_to_diffusers(dict(ckpt))
    out = {}
    for key, v in converted.items():
        v = v.reshape(-1)
        ids = torch.div(v, 1e6, rounding_mode="floor")
        assert bool((ids == ids[0]).all()), key
        src = names[int(ids[0])]
        rows = (v - ids[0] * 1e6).long()
        n = rows.numel()
        if bool((rows == torch.arange(n) + rows[0]).all()):
            out[key] = [src, int(rows[0]), n, False, shapes()[src]]
        else:  # the final modulation's halves, exchanged
            half = n // 2
            want = torch.cat([torch.arange(half, n), torch.arange(0, half)]) + 0
            assert bool((rows == want + 0).all()), key
            out[key] = [src, 0, n, True, shapes()[src]]
    with open(os.path.join(OUT, "rows.json"), "w") as f:
        json.dump({"diffusers": diffusers.__version__, "torch": torch.__version__,
                   "inner_dim": D, "mlp_hidden": MLP, "rows": out}, f, indent=0, sort_keys=True)
    print(len(out), "diffusers weights mapped")


if __name__ == "__main__":
    main()
