#!/usr/bin/env python3
"""A tiny Wan2.2 TI2V-5B-style text-to-video pipeline (diffusers WanPipeline
with expand_timesteps and the residual 48-channel VAE) with random weights,
and whole runs of it.

    python3 tools/goldens/make_wan22_ti2v_pipeline.py   # from the repository root,
                                                        # after make_wan22_vae.py and
                                                        # make_wan_pipeline.py

The folder takes models/wan21-tiny's tokenizer and UMT5, the VAE of
tests/data/wan22/vae (16x space, 4x time, 48 channels) and a random
WanTransformer3DModel of 48 channels in and out (the tiny Wan's other sizes),
with UniPC at flow_shift 5 (the TI2V-5B folder's) and expand_timesteps: the
transformer takes one timestep per token (all equal without an image).
Writes models/wan22-ti2v-tiny/ and tests/data/goldens/wan22_ti2v_pipeline.safetensors
with, per case (request in the metadata): initial_latents [1, 48, F', H/16, W/16],
the final latents and the video [1, 3, F, H, W] in [-1, 1]. One case's height
is not a multiple of 32 (16 x the patch), which diffusers floors with a warning.
"""
import json
import os
import shutil

import diffusers
import torch
import transformers
from diffusers import (AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline,
                       WanTransformer3DModel)
from safetensors.torch import save_file

MODELS = "models"
GOLDENS = "tests/data/goldens"
VERSIONS = {"torch": torch.__version__, "diffusers": diffusers.__version__,
            "transformers": transformers.__version__}
# (prompt, negative prompt, height, width, num_frames, steps, guidance, seed, max_sequence_length)
CASES = [
    ("a red fox in the snow", "blurry", 64, 96, 9, 4, 5.0, 0, 16),
    ("Two cats, sitting on a mat!", None, 48, 64, 5, 3, 4.0, 7, 12),  # 48 -> 32
    ("an astronaut riding a horse", None, 32, 32, 1, 3, 1.0, 3, 12),
]


def transformer(config):
    torch.manual_seed(2206)
    cfg = dict(config)
    cfg.update(in_channels=48, out_channels=48)
    cfg = {k: v for k, v in cfg.items() if not k.startswith("_")}
    model = WanTransformer3DModel(**cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    return model


def main():
    base = WanPipeline.from_pretrained(os.path.join(MODELS, "wan21-tiny"))
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                        num_train_timesteps=1000, flow_shift=5.0)
    pipe = WanPipeline(tokenizer=base.tokenizer, text_encoder=base.text_encoder,
                       vae=AutoencoderKLWan.from_pretrained("tests/data/wan22/vae"),
                       scheduler=scheduler, transformer=transformer(base.transformer.config),
                       expand_timesteps=True)
    folder = os.path.join(MODELS, "wan22-ti2v-tiny")
    shutil.rmtree(folder, ignore_errors=True)
    pipe.save_pretrained(folder, safe_serialization=True)
    src = os.path.join(MODELS, "wan21-tiny", "tokenizer")
    for f in os.listdir(src):  # the SentencePiece model beside tokenizer.json
        shutil.copy(os.path.join(src, f), os.path.join(folder, "tokenizer", f))
    vae = pipe.vae
    mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
    inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
    tensors, meta = {}, dict(VERSIONS)
    for k, (prompt, neg, h, w, frames, steps, g, seed, msl) in enumerate(CASES):
        lf = (frames - 1) // 4 + 1
        rh, rw = h // 32 * 32, w // 32 * 32
        with torch.no_grad():
            init = torch.randn(1, 48, lf, rh // 16, rw // 16,
                               generator=torch.Generator().manual_seed(seed))
            final = pipe(prompt=prompt, negative_prompt=neg, height=h, width=w,
                         num_frames=frames, num_inference_steps=steps, guidance_scale=g,
                         max_sequence_length=msl, generator=torch.Generator().manual_seed(seed),
                         output_type="latent").frames
            video = vae.decode(final / inv_std + mean, return_dict=False)[0]
        tensors.update({f"case{k}.initial_latents": init, f"case{k}.latents": final.contiguous(),
                        f"case{k}.video": video.contiguous()})
        meta[f"case{k}"] = json.dumps(dict(
            prompt=prompt, negative_prompt=neg, height=h, width=w, num_frames=frames,
            steps=steps, guidance_scale=g, seed=seed, max_sequence_length=msl))
        print(k, tuple(final.shape), tuple(video.shape), float(video.abs().mean()))
    meta["cases"] = str(len(CASES))
    save_file(tensors, os.path.join(GOLDENS, "wan22_ti2v_pipeline.safetensors"), metadata=meta)


if __name__ == "__main__":
    main()
