#!/usr/bin/env python3
"""A tiny Qwen-Image pipeline (diffusers QwenImagePipeline) with random
weights, and whole runs of it.

    python3 tools/goldens/make_qwen_image_pipeline.py   # from the repository root,
                                                         # after make_qwen_encoder.py
                                                         # and make_qwen_image.py

The folder takes tests/data/qwen_image/transformer (make_qwen_image.py),
tests/data/qwen/qwen2_5_vl (a tiny random Qwen2_5_VLForConditionalGeneration
of hidden size 32) with the tiny Qwen2 tokenizer (make_qwen_encoder.py), a
tiny random AutoencoderKLQwenImage (Wan2.1's causal VAE: base 8, levels
1/2/2, 4x) and Qwen-Image's scheduler config (Flow-Match Euler, dynamic
shift over 256..8192 tokens from 0.5 to 0.9, shift_terminal 0.02). Writes
models/qwen-image-tiny/ and tests/data/goldens/qwen_image_pipeline.safetensors
with, per case (the request in the metadata), the final latents unpacked
[1, 16, h, w] and the image [1, 3, H, W] in [-1, 1]. The cases: no negative
prompt (no CFG at the default true_cfg_scale 4), true CFG with a negative
prompt shorter than the prompt at 2.5 (the guided noise rescaled per token),
and the default true_cfg_scale with a height floored from 44 to 40 (multiples of
the VAE factor x 2: 8 here).
"""
import json
import os
import shutil

import diffusers
import torch
import transformers
from diffusers import (AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler,
                       QwenImagePipeline, QwenImageTransformer2DModel)
from safetensors.torch import save_file
from transformers import AutoTokenizer, Qwen2_5_VLForConditionalGeneration

MODELS = "models"
GOLDENS = "tests/data/goldens"
VERSIONS = {"torch": torch.__version__, "diffusers": diffusers.__version__,
            "transformers": transformers.__version__}
# (prompt, negative prompt, height, width, steps, true_cfg_scale (None: default), seed, max_sequence_length)
CASES = [
    ("a red fox in the snow", None, 64, 48, 3, None, 0, 32),
    ("Two cats, sitting on a mat under the warm afternoon sun!", "blurry", 48, 64, 3, 2.5, 7, 24),
    ("an astronaut riding a horse", "bad", 44, 32, 2, None, 3, 512),
]


def vae():
    torch.manual_seed(2209)
    v = AutoencoderKLQwenImage(base_dim=8, z_dim=16, dim_mult=[1, 2, 2], num_res_blocks=1,
                               temperal_downsample=[False, True],
                               latents_mean=torch.randn(16).mul(0.3).tolist(),
                               latents_std=torch.rand(16).add(0.5).tolist()).eval()
    with torch.no_grad():
        for name, p in v.named_parameters():
            if p.dim() == 1 and "gamma" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    return v


def main():
    pipe = QwenImagePipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(
            num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=True, base_shift=0.5,
            max_shift=0.9, base_image_seq_len=256, max_image_seq_len=8192, shift_terminal=0.02,
            time_shift_type="exponential"),
        vae=vae(),
        text_encoder=Qwen2_5_VLForConditionalGeneration.from_pretrained("tests/data/qwen/qwen2_5_vl"),
        tokenizer=AutoTokenizer.from_pretrained("tests/data/qwen/tokenizer"),
        transformer=QwenImageTransformer2DModel.from_pretrained("tests/data/qwen_image/transformer"))
    folder = os.path.join(MODELS, "qwen-image-tiny")
    shutil.rmtree(folder, ignore_errors=True)
    pipe.save_pretrained(folder, safe_serialization=True)
    v = pipe.vae
    vsf = pipe.vae_scale_factor
    mean = torch.tensor(v.config.latents_mean).view(1, 16, 1, 1, 1)
    inv_std = 1.0 / torch.tensor(v.config.latents_std).view(1, 16, 1, 1, 1)
    tensors, meta = {}, dict(VERSIONS)
    for k, (prompt, neg, h, w, steps, tcfg, seed, msl) in enumerate(CASES):
        kwargs = {} if tcfg is None else {"true_cfg_scale": tcfg}
        with torch.no_grad():
            packed = pipe(prompt=prompt, negative_prompt=neg, height=h, width=w,
                          num_inference_steps=steps, max_sequence_length=msl,
                          generator=torch.Generator().manual_seed(seed), output_type="latent",
                          **kwargs).images
            rh, rw = h // (vsf * 2) * vsf * 2, w // (vsf * 2) * vsf * 2
            latents = QwenImagePipeline._unpack_latents(packed, rh, rw, vsf)  # [1, 16, 1, h, w]
            image = v.decode(latents / inv_std + mean, return_dict=False)[0][:, :, 0]
        tensors.update({f"case{k}.latents": latents[:, :, 0].contiguous(),
                        f"case{k}.image": image.contiguous()})
        meta[f"case{k}"] = json.dumps(dict(
            prompt=prompt, negative_prompt=neg, height=h, width=w, steps=steps,
            true_cfg_scale=tcfg, guidance_scale=1.0, seed=seed, max_sequence_length=msl))
        print(k, tuple(latents.shape), tuple(image.shape), float(image.abs().mean()))
    meta["cases"] = str(len(CASES))
    save_file(tensors, os.path.join(GOLDENS, "qwen_image_pipeline.safetensors"), metadata=meta)


if __name__ == "__main__":
    main()
