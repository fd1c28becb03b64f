#!/usr/bin/env python3
"""PyTorch + diffusers on the same work as `xdit bench transformer`: one
PixArt-alpha XL/2 forward (28 blocks, hidden 1152, 16 heads) with CFG batch 2
and 120 text tokens (100 valid), random weights, on CPU.

    python3 bench/torch_pixart_step.py --resolution 512 --dtype bf16 [--threads 2]

Prints one JSON object per run: name, resolution, dtype, seconds, torch, diffusers.
"""
import argparse
import json
import time

import diffusers
import torch
from diffusers import PixArtTransformer2DModel

p = argparse.ArgumentParser()
p.add_argument("--resolution", type=int, default=512)
p.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
p.add_argument("--threads", type=int, default=0)
p.add_argument("--warmup", type=int, default=1)
a = p.parse_args()
if a.threads:
    torch.set_num_threads(a.threads)
dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
model = PixArtTransformer2DModel(sample_size=128, num_layers=28, num_attention_heads=16,
                                 attention_head_dim=72, in_channels=4, out_channels=8,
                                 cross_attention_dim=1152, caption_channels=4096).eval().to(dtype)
B, h = 2, a.resolution // 8
x = torch.randn(B, 4, h, h, dtype=dtype)
text = torch.randn(B, 120, 4096, dtype=dtype)
mask = torch.ones(B, 120)
mask[:, 100:] = 0
added = {"resolution": torch.tensor([[a.resolution] * 2] * B, dtype=dtype),
         "aspect_ratio": torch.ones(B, 1, dtype=dtype)}
t = torch.tensor([500, 500])
with torch.no_grad():
    for _ in range(a.warmup):
        model(x, encoder_hidden_states=text, encoder_attention_mask=mask, timestep=t,
              added_cond_kwargs=added, return_dict=False)
    t0 = time.perf_counter()
    model(x, encoder_hidden_states=text, encoder_attention_mask=mask, timestep=t,
          added_cond_kwargs=added, return_dict=False)
    s = time.perf_counter() - t0
print(json.dumps({"name": "pixart_alpha_step_cfg", "resolution": a.resolution, "dtype": a.dtype,
                  "seconds": s, "threads": torch.get_num_threads(), "torch": torch.__version__,
                  "diffusers": diffusers.__version__}))
