#!/usr/bin/env python3
"""Wan2.1's transformer (diffusers WanTransformer3DModel): a tiny random one
with awkward sizes (2 heads of 12: rotary axes 4 / 4 / 4 over frames, rows,
columns; ffn 40; 3 blocks), run once on random latents of 3 frames of 6 x 10
with two timesteps and text whose second item ends in zero rows (WanPipeline
zero-pads the UMT5 states past the prompt's length).

    python3 tools/goldens/make_wan.py      # from the repository root

Writes tests/data/wan/transformer/ (config.json, safetensors: the model as
save_pretrained writes it, f32) and tests/data/wan/wan_forward.safetensors:
latents [2, 16, 3, 6, 10], timesteps [2] (f32 of the integer timesteps),
text [2, 11, 32], out [2, 16, 3, 6, 10]; versions in the metadata.
"""
import os

import diffusers
import torch
from diffusers import WanTransformer3DModel
from safetensors.torch import save_file

OUT = "tests/data/wan"
torch.manual_seed(46)
model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12,
                              in_channels=16, out_channels=16, text_dim=32, freq_dim=256,
                              ffn_dim=40, num_layers=3, cross_attn_norm=True,
                              qk_norm="rms_norm_across_heads", eps=1e-6).eval()
with torch.no_grad():  # every weight random (norms and tables too), so each one shows
    for name, p in model.named_parameters():
        base = 1.0 if name.endswith(("norm_q.weight", "norm_k.weight", "norm2.weight")) else 0.0
        p.copy_(base + torch.randn_like(p) * 0.2)
model.save_pretrained(os.path.join(OUT, "transformer"), safe_serialization=True)

latents = torch.randn(2, 16, 3, 6, 10)
timesteps = torch.tensor([999, 437])
text = torch.randn(2, 11, 32)
text[1, 7:] = 0
with torch.no_grad():
    out = model(latents, timesteps, text, return_dict=False)[0]
save_file({"latents": latents, "timesteps": timesteps.float(), "text": text.contiguous(),
           "out": out.contiguous()}, os.path.join(OUT, "wan_forward.safetensors"),
          metadata={"torch": torch.__version__, "diffusers": diffusers.__version__})
print(out.shape, float(out.abs().mean()))
