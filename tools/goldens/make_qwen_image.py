#!/usr/bin/env python3
"""Qwen-Image's transformer (diffusers QwenImageTransformer2DModel): a tiny
random one (2 double-stream blocks, 2 heads of 16, RoPE axes 4/6/6, text
width 32 as the tiny Qwen2.5-VL of make_qwen_encoder.py) and its output for
two-item calls whose text is padded and masked differently per item, at a
token grid of even sides and one of odd sides (the centred RoPE's two cases).

    python3 tools/goldens/make_qwen_image.py   # from the repository root

Writes tests/data/qwen_image/transformer/ (config.json, safetensors, f32) and
tests/data/qwen_image/qwen_image_forward.safetensors: per case k, latents{k}
[2, 16, h, w] (unpacked), t{k} [2] (as the model takes it: t / 1000), text{k}
[2, L, 32], mask{k} [2, L] and out{k} [2, 16, h, w] (unpacked).
"""
import os

import diffusers
import torch
from diffusers import QwenImagePipeline, QwenImageTransformer2DModel
from safetensors.torch import save_file

OUT = "tests/data/qwen_image"
torch.manual_seed(2208)
model = QwenImageTransformer2DModel(patch_size=2, in_channels=64, out_channels=16, num_layers=2,
                                    attention_head_dim=16, num_attention_heads=2,
                                    joint_attention_dim=32, axes_dims_rope=(4, 6, 6)).eval()
with torch.no_grad():
    for name, p in model.named_parameters():
        if "norm" in name and p.dim() == 1:
            p.copy_(1.0 + 0.1 * torch.randn_like(p))
        else:
            p.copy_(0.2 * torch.randn_like(p))
model.save_pretrained(os.path.join(OUT, "transformer"), safe_serialization=True)

tensors = {}
# (latent h, w, text length, item 1's real tokens, timesteps)
CASES = [(8, 12, 9, 5, (0.875, 0.875)), (10, 6, 7, 7, (0.3, 0.6))]
for k, (h, w, L, real1, ts) in enumerate(CASES):
    latents = torch.randn(2, 16, h, w)
    text = torch.randn(2, L, 32)
    mask = torch.ones(2, L, dtype=torch.long)
    mask[1, real1:] = 0
    t = torch.tensor(ts)
    packed = QwenImagePipeline._pack_latents(latents, 2, 16, h, w)
    with torch.no_grad():
        out = model(hidden_states=packed, encoder_hidden_states=text,
                    encoder_hidden_states_mask=mask, timestep=t,
                    img_shapes=[[(1, h // 2, w // 2)]] * 2, return_dict=False)[0]
    # _unpack_latents takes pixel sizes: latent sides x the VAE factor (8)
    unpacked = QwenImagePipeline._unpack_latents(out, h * 8, w * 8, 8)[:, :, 0]
    tensors.update({f"latents{k}": latents, f"t{k}": t, f"text{k}": text,
                    f"mask{k}": mask.float(), f"out{k}": unpacked.contiguous()})
    print(k, tuple(unpacked.shape), float(unpacked.abs().mean()))
save_file(tensors, os.path.join(OUT, "qwen_image_forward.safetensors"),
          metadata={"torch": torch.__version__, "diffusers": diffusers.__version__})
