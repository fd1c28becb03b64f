#!/usr/bin/env python3
"""Wan2.2's video VAE decoder (diffusers AutoencoderKLWan with is_residual and
patch_size 2, the TI2V-5B VAE: 48 latent channels, 16x space, 4x time): a tiny
random one with that structure at small widths (base 4, decoder_base_dim 6,
dim_mult 1, 2, 4, 4, one residual block per level, z_dim 48), decoding 3
latent frames of 3 x 5 into 1 + 4·2 = 9 frames of 48 x 80 — frame by frame with
the causal cache, the up blocks' DupUp3D shortcuts (the first chunk keeps
their last time copy), conv_out's 12 channels unpatchified into 3 channels of
2 x 2 pixels, clamped to [-1, 1].

    python3 tools/goldens/make_wan22_vae.py     # from the repository root

Writes tests/data/wan22/vae/ (config.json, safetensors, f32; latents_mean and
latents_std random) and tests/data/wan22/wan22_vae_decode.safetensors: z [1, 48,
3, 3, 5] (as decode takes it), video [1, 3, 9, 48, 80]; a second clip of one
latent frame with two items: z1 [2, 48, 1, 2, 3], video1 [2, 3, 1, 32, 48];
versions in the metadata.
"""
import os

import diffusers
import torch
from diffusers import AutoencoderKLWan
from safetensors.torch import save_file

OUT = "tests/data/wan22"
torch.manual_seed(2205)
Z = 48
vae = AutoencoderKLWan(base_dim=4, decoder_base_dim=6, z_dim=Z, dim_mult=[1, 2, 4, 4],
                       num_res_blocks=1, temperal_downsample=[False, True, True],
                       is_residual=True, in_channels=12, out_channels=12, patch_size=2,
                       scale_factor_spatial=16, scale_factor_temporal=4,
                       latents_mean=[round(float(x), 4) for x in torch.randn(Z) * 0.5],
                       latents_std=[round(float(x), 4) for x in torch.rand(Z) * 2 + 0.5]).eval()
with torch.no_grad():  # every weight random, the norms' gammas around 1
    for name, p in vae.named_parameters():
        base = 1.0 if name.endswith("gamma") else 0.0
        scale = 0.1 if base else 0.01 if name.startswith("decoder.conv_out") else 0.15
        p.copy_(base + torch.randn_like(p) * scale)  # (conv_out small: few values clamped)
vae.save_pretrained(os.path.join(OUT, "vae"), safe_serialization=True)

z = torch.randn(1, Z, 3, 3, 5)
z1 = torch.randn(2, Z, 1, 2, 3)
with torch.no_grad():
    video = vae.decode(z).sample
    video1 = vae.decode(z1).sample
save_file({"z": z.contiguous(), "video": video.contiguous(), "z1": z1.contiguous(),
           "video1": video1.contiguous()},
          os.path.join(OUT, "wan22_vae_decode.safetensors"),
          metadata={"torch": torch.__version__, "diffusers": diffusers.__version__})
for v in (video, video1):
    print(tuple(v.shape), "mean |v|", float(v.abs().mean()), "clamped",
          float((v.abs() >= 1).float().mean()))
