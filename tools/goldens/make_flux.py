#!/usr/bin/env python3
"""Tiny FLUX.1 transformers (schnell-like: no guidance embedding; dev-like:
guidance embedding) with random weights, and one diffusers forward of each on
the inputs FluxPipeline gives it: packed latents, T5-width text, the pooled
CLIP vector, timestep / 1000, guidance, and the text / image position ids.

    python3 tools/goldens/make_flux.py            # from the repository root

Writes tests/data/flux-tiny/{schnell,dev}/transformer/ (config.json,
diffusion_pytorch_model.safetensors in bf16, as FLUX.1 ships) and
tests/data/goldens/flux_{schnell,dev}_forward.safetensors with
  latents [B, 16, H, W] (unpacked, as the denoising loop holds them),
  text [B, L, joint_attention_dim], pooled [B, pooled_projection_dim],
  timestep [B] (t / 1000, what the pipeline passes), guidance [B] (dev),
  output [B, 16, H, W] (the packed model output, unpacked the way the
  pipeline's _unpack_latents does).
"""
import os
import shutil

import diffusers
import torch
from diffusers import FluxTransformer2DModel
from safetensors.torch import save_file

ROOT = "tests/data/flux-tiny"
GOLDENS = "tests/data/goldens"
VERSIONS = {"torch": torch.__version__, "diffusers": diffusers.__version__}
CONFIG = dict(patch_size=1, in_channels=64, num_layers=2, num_single_layers=3,
              attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
              pooled_projection_dim=48, axes_dims_rope=(4, 6, 6))


def pack(x):  # FluxPipeline._pack_latents
    b, c, h, w = x.shape
    x = x.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // 2) * (w // 2), c * 4)


def unpack(x, h, w):  # FluxPipeline._unpack_latents, on the latent grid
    b, n, c = x.shape
    x = x.view(b, h // 2, w // 2, c // 4, 2, 2).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, c // 4, h, w)


def image_ids(h, w):  # FluxPipeline._prepare_latent_image_ids on the packed grid
    ids = torch.zeros(h // 2, w // 2, 3)
    ids[..., 1] = ids[..., 1] + torch.arange(h // 2)[:, None]
    ids[..., 2] = ids[..., 2] + torch.arange(w // 2)[None, :]
    return ids.reshape(-1, 3)


def make(name, guidance, seed):
    torch.manual_seed(seed)
    model = FluxTransformer2DModel(**CONFIG, guidance_embeds=guidance).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            # Random everywhere (diffusers zero-initialises nothing here, but
            # make every gate and modulation non-trivial on purpose).
            std = p.shape[-1] ** -0.5 if p.ndim == 2 else 0.3
            p.copy_(torch.randn(p.shape, generator=g) * std)
            if "norm" in n and n.endswith("weight") and p.ndim == 1:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
    # Stored in bf16 like the real checkpoints; the forward runs in f32 on
    # the same (bf16-exact) values.
    folder = os.path.join(ROOT, name, "transformer")
    shutil.rmtree(folder, ignore_errors=True)
    model.to(torch.bfloat16).save_pretrained(folder, safe_serialization=True)
    model.float()

    B, H, W, L = 2, 6, 10, 7
    latents = torch.randn(B, 16, H, W, generator=g)
    text = torch.randn(B, L, CONFIG["joint_attention_dim"], generator=g)
    pooled = torch.randn(B, CONFIG["pooled_projection_dim"], generator=g)
    timestep = torch.tensor([0.75, 0.3125])  # t / 1000 as FluxPipeline passes it
    gd = torch.tensor([3.5, 2.0])
    with torch.no_grad():
        out = model(hidden_states=pack(latents), encoder_hidden_states=text,
                    pooled_projections=pooled, timestep=timestep,
                    guidance=gd if guidance else None, img_ids=image_ids(H, W),
                    txt_ids=torch.zeros(L, 3), return_dict=False)[0]
    tensors = {"latents": latents, "text": text, "pooled": pooled, "timestep": timestep,
               "output": unpack(out, H, W).contiguous()}
    if guidance:
        tensors["guidance"] = gd
    save_file(tensors, os.path.join(GOLDENS, f"flux_{name}_forward.safetensors"),
              metadata=dict(VERSIONS, guidance_embeds=str(guidance)))
    print(name, out.shape, out.abs().max().item())


make("schnell", False, 11)
make("dev", True, 12)
