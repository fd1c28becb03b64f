#!/usr/bin/env python3
"""A tiny 16-latent-channel AutoencoderKL configured as FLUX.1's and SD3's VAE
(no quant_conv / post_quant_conv, a scaling and a shift factor), with random
weights, and diffusers' decode of latents the way those pipelines call it:
vae.decode(latents / scaling_factor + shift_factor).

    python3 tools/goldens/make_vae16.py            # from the repository root

Writes tests/data/vae16/ (config.json, diffusion_pytorch_model.safetensors)
and tests/data/goldens/vae16_decoder.safetensors: latents [2, 16, 5, 7] as the
denoising loop leaves them, image [2, 3, 20, 28].
"""
import os
import shutil

import diffusers
import torch
from diffusers import AutoencoderKL
from safetensors.torch import save_file

OUT = "tests/data/vae16"
torch.manual_seed(0)
vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=16,
                    down_block_types=("DownEncoderBlock2D",) * 3,
                    up_block_types=("UpDecoderBlock2D",) * 3,
                    block_out_channels=(8, 16, 16), layers_per_block=1, norm_num_groups=8,
                    sample_size=64, scaling_factor=0.3611, shift_factor=0.1159,
                    use_quant_conv=False, use_post_quant_conv=False).eval()
g = torch.Generator().manual_seed(16)
with torch.no_grad():
    for name, p in vae.named_parameters():
        if "norm" in name and name.endswith("weight"):
            p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
        else:
            fan_in = p[0].numel() if p.ndim >= 2 else 1
            p.copy_(torch.randn(p.shape, generator=g) * (fan_in ** -0.5 if p.ndim >= 2 else 0.3))
shutil.rmtree(OUT, ignore_errors=True)
vae.save_pretrained(OUT, safe_serialization=True)
latents = torch.randn(2, 16, 5, 7, generator=g)
with torch.no_grad():
    z = latents / vae.config.scaling_factor + vae.config.shift_factor
    image = vae.decode(z, return_dict=False)[0]
save_file({"latents": latents, "image": image.contiguous()},
          "tests/data/goldens/vae16_decoder.safetensors",
          metadata={"torch": torch.__version__, "diffusers": diffusers.__version__,
                    "scaling_factor": str(vae.config.scaling_factor),
                    "shift_factor": str(vae.config.shift_factor)})
print(sorted(os.listdir(OUT)), image.abs().max().item())
