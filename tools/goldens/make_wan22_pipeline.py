#!/usr/bin/env python3
"""A tiny Wan2.2 T2V-A14B-style pipeline (diffusers WanPipeline with two
experts) with random weights, and whole runs of it.

    python3 tools/goldens/make_wan22_pipeline.py   # from the repository root, after
                                                   # make_wan_pipeline.py

The folder is models/wan21-tiny's (tokenizer, UMT5, VAE, UniPC with flow_shift 3)
with two experts: `transformer` (wan21-tiny's) for the timesteps t >= 875
(boundary_ratio 0.875, the A14B folders' value, × 1000) and `transformer_2`, a
second random WanTransformer3DModel of the same config, for the rest. Writes
models/wan22-tiny/ and tests/data/goldens/wan22_pipeline.safetensors with, per
case (request in the metadata): initial_latents, the final latents and the
video [1, 3, F, H, W] in [-1, 1], and the scheduler's timesteps. One case
switches experts mid-run with its own guidance_scale_2, one leaves
guidance_scale_2 to default to guidance_scale, one runs without CFG, and one
has every step at or above the boundary (transformer_2 never runs).
"""
import json
import os
import shutil

import diffusers
import torch
import transformers
from diffusers import WanPipeline, WanTransformer3DModel
from safetensors.torch import save_file

MODELS = "models"
GOLDENS = "tests/data/goldens"
VERSIONS = {"torch": torch.__version__, "diffusers": diffusers.__version__,
            "transformers": transformers.__version__}
BOUNDARY = 0.875
# (prompt, negative prompt, height, width, num_frames, steps, guidance,
#  guidance_2 (None: the default), seed, max_sequence_length)
CASES = [
    ("a red fox in the snow", "blurry", 48, 80, 9, 6, 5.0, 2.5, 0, 16),
    ("Two cats, sitting on a mat!", None, 32, 48, 5, 5, 4.0, None, 7, 12),
    ("an astronaut riding a horse", None, 64, 32, 1, 4, 1.0, None, 3, 12),
    ("a lighthouse at dusk", None, 32, 32, 5, 1, 3.0, 1.5, 5, 12),
]


def second_expert(config):
    torch.manual_seed(2202)
    model = WanTransformer3DModel.from_config(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    return model


def main():
    base = WanPipeline.from_pretrained(os.path.join(MODELS, "wan21-tiny"))
    pipe = WanPipeline(tokenizer=base.tokenizer, text_encoder=base.text_encoder, vae=base.vae,
                       scheduler=base.scheduler, transformer=base.transformer,
                       transformer_2=second_expert(base.transformer.config),
                       boundary_ratio=BOUNDARY)
    folder = os.path.join(MODELS, "wan22-tiny")
    shutil.rmtree(folder, ignore_errors=True)
    pipe.save_pretrained(folder, safe_serialization=True)
    src = os.path.join(MODELS, "wan21-tiny", "tokenizer")
    for f in os.listdir(src):  # the SentencePiece model beside tokenizer.json
        shutil.copy(os.path.join(src, f), os.path.join(folder, "tokenizer", f))
    vae = pipe.vae
    mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
    inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
    tensors, meta = {}, dict(VERSIONS)
    for k, (prompt, neg, h, w, frames, steps, g, g2, seed, msl) in enumerate(CASES):
        lf = (frames - 1) // 4 + 1
        with torch.no_grad():
            init = torch.randn(1, 16, lf, h // 8, w // 8,
                               generator=torch.Generator().manual_seed(seed))
            final = pipe(prompt=prompt, negative_prompt=neg, height=h, width=w,
                         num_frames=frames, num_inference_steps=steps, guidance_scale=g,
                         guidance_scale_2=g2, max_sequence_length=msl,
                         generator=torch.Generator().manual_seed(seed),
                         output_type="latent").frames
            video = vae.decode(final / inv_std + mean, return_dict=False)[0]
        ts = pipe.scheduler.timesteps.to(torch.float32)
        tensors.update({f"case{k}.initial_latents": init, f"case{k}.latents": final.contiguous(),
                        f"case{k}.video": video.contiguous(), f"case{k}.timesteps": ts})
        meta[f"case{k}"] = json.dumps(dict(
            prompt=prompt, negative_prompt=neg, height=h, width=w, num_frames=frames,
            steps=steps, guidance_scale=g, guidance_scale_2=g2, seed=seed,
            max_sequence_length=msl))
        print(k, [int(t) for t in ts], tuple(video.shape), float(video.abs().mean()))
    meta["cases"] = str(len(CASES))
    meta["boundary_ratio"] = str(BOUNDARY)
    save_file(tensors, os.path.join(GOLDENS, "wan22_pipeline.safetensors"), metadata=meta)


if __name__ == "__main__":
    main()
