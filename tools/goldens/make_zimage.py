#!/usr/bin/env python3
"""Z-Image's transformer (diffusers ZImageTransformer2DModel): a tiny random
one with its structure — a noise refiner (modulated) over the image tokens
and their learned pad tokens, a context refiner over the caption tokens and
theirs, then the joint layers over [image, caption] with 3-axis RoPE (ids:
caption (1 + i, 0, 0), image (cap_len + 1, row, col), pads (0, 0, 0)) — and
its output for calls of two items whose captions differ in length (the
shorter masked in the joint batch), at an image size whose token count is a
multiple of 32 and one that is not.

    python3 tools/goldens/make_zimage.py   # from the repository root

Writes tests/data/zimage/transformer/ (config.json, safetensors, f32) and
tests/data/zimage/zimage_forward.safetensors: per case k, latents{k}
[2, 16, 1, h, w], t{k} [2] (as the model takes it: (1000 − t) / 1000),
cap{k}_0 [L0, 32], cap{k}_1 [L1, 32] and out{k} [2, 16, 1, h, w].
"""
import os

import diffusers
import torch
from diffusers import ZImageTransformer2DModel
from safetensors.torch import save_file

OUT = "tests/data/zimage"
torch.manual_seed(2207)
model = ZImageTransformer2DModel(all_patch_size=(2,), all_f_patch_size=(1,), in_channels=16,
                                 dim=48, n_layers=2, n_refiner_layers=1, n_heads=2,
                                 n_kv_heads=2, norm_eps=1e-5, qk_norm=True, cap_feat_dim=32,
                                 rope_theta=256.0, t_scale=1000.0, axes_dims=[8, 8, 8],
                                 axes_lens=[256, 64, 64]).eval()
with torch.no_grad():
    for name, p in model.named_parameters():
        if "norm" in name:
            p.copy_(1.0 + 0.1 * torch.randn_like(p))
        else:
            p.copy_(0.15 * torch.randn_like(p))
model.save_pretrained(os.path.join(OUT, "transformer"), safe_serialization=True)

tensors = {}
# (latent h, w, caption lengths): 8 x 12 latents = 4 x 6 = 24 tokens (padded
# to 32); 16 x 16 = 64 tokens (no pad); captions of 5 / 37 and 32 / 9 tokens.
CASES = [(8, 12, (5, 37), (0.25, 0.25)), (16, 16, (32, 9), (0.9, 0.4))]
for k, (h, w, lens, ts) in enumerate(CASES):
    latents = torch.randn(2, 16, 1, h, w)
    caps = [torch.randn(n, 32) for n in lens]
    t = torch.tensor(ts)
    with torch.no_grad():
        out = model(list(latents.unbind(0)), t, caps, return_dict=False)[0]
    tensors[f"latents{k}"] = latents
    tensors[f"t{k}"] = t
    for i, c in enumerate(caps):
        tensors[f"cap{k}_{i}"] = c
    tensors[f"out{k}"] = torch.stack(out).contiguous()
    print(k, tuple(tensors[f"out{k}"].shape), float(tensors[f"out{k}"].abs().mean()))
save_file(tensors, os.path.join(OUT, "zimage_forward.safetensors"),
          metadata={"torch": torch.__version__, "diffusers": diffusers.__version__})
