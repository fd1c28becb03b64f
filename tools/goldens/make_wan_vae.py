#!/usr/bin/env python3
"""Wan2.1's video VAE decoder (diffusers AutoencoderKLWan.decode): a tiny
random one with Wan's structure at small widths (base 8, dim_mult 1, 2, 2, 2:
8x space and, with temperal_downsample False, True, True, 4x time; one
residual block per level, the mid-block attention), decoding 3 latent frames
of 4 x 6 into 1 + 4·2 = 9 frames of 32 x 48, frame by frame with the causal
cache as diffusers does, and clamped to [-1, 1].

    python3 tools/goldens/make_wan_vae.py      # from the repository root

Writes tests/data/wan/vae/ (config.json, safetensors, f32) and
tests/data/wan/wan_vae_decode.safetensors: z [1, 16, 3, 4, 6] (as decode
takes it, already de-normalised), video [1, 3, 9, 32, 48]; versions in the
metadata.
"""
import os

import diffusers
import torch
from diffusers import AutoencoderKLWan
from safetensors.torch import save_file

OUT = "tests/data/wan"
torch.manual_seed(47)
vae = AutoencoderKLWan(base_dim=8, z_dim=16, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
                       temperal_downsample=[False, True, True]).eval()
with torch.no_grad():  # every weight random, the norms' gammas around 1
    for name, p in vae.named_parameters():
        base = 1.0 if name.endswith("gamma") else 0.0
        scale = 0.1 if base else 0.01 if name.startswith("decoder.conv_out") else 0.15
        p.copy_(base + torch.randn_like(p) * scale)  # (conv_out small: few values clamped)
vae.save_pretrained(os.path.join(OUT, "vae"), safe_serialization=True)

z = torch.randn(1, 16, 3, 4, 6)
with torch.no_grad():
    video = vae.decode(z).sample
save_file({"z": z.contiguous(), "video": video.contiguous()},
          os.path.join(OUT, "wan_vae_decode.safetensors"),
          metadata={"torch": torch.__version__, "diffusers": diffusers.__version__})
print(video.shape, "mean |v|", float(video.abs().mean()), "clamped", float((video.abs() >= 1).float().mean()))
