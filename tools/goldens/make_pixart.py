#!/usr/bin/env python3
"""Makes the PixArt goldens: tiny random-weight PixArt-alpha and PixArt-Sigma style
models saved as diffusers folders, with inputs and outputs of diffusers itself.

    python3 tools/goldens/make_pixart.py tests/data

Needs torch, diffusers, safetensors (see tools/goldens/requirements.txt). Writes
  <out>/pixart_alpha_tiny/   diffusers folder (model_index.json, transformer/, scheduler/)
  <out>/pixart_sigma_tiny/
  <out>/goldens/pixart_{alpha,sigma}_forward.safetensors  one transformer forward
  <out>/goldens/pixart_{alpha,sigma}_loop.safetensors     full CFG loop via the pipeline
Each golden's metadata records the torch and diffusers versions that made it.
"""
import json
import os
import sys

import diffusers
import torch
from diffusers import DPMSolverMultistepScheduler, PixArtTransformer2DModel
from safetensors.torch import save_file

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/data"
VERSIONS = {"torch": torch.__version__, "diffusers": diffusers.__version__}

# Scheduler configs as the PixArt-alpha and PixArt-Sigma hub folders ship them.
ALPHA_SCHEDULER = dict(algorithm_type="dpmsolver++", beta_end=0.02, beta_schedule="linear",
                       beta_start=0.0001, dynamic_thresholding_ratio=0.995, lower_order_final=True,
                       num_train_timesteps=1000, prediction_type="epsilon", sample_max_value=1.0,
                       solver_order=2, solver_type="midpoint", steps_offset=0, thresholding=False,
                       trained_betas=None, use_karras_sigmas=False)
SIGMA_SCHEDULER = dict(ALPHA_SCHEDULER, euler_at_final=False, final_sigmas_type="zero",
                       lambda_min_clipped=-float("inf"), timestep_spacing="linspace",
                       use_lu_lambdas=False, variance_type=None)

MODELS = {
    # alpha: sample_size 128 turns on the resolution / aspect-ratio micro-conditions
    # (as PixArt-alpha 1024) and the default interpolation scale 2.
    "alpha": dict(config=dict(sample_size=128, num_layers=2, num_attention_heads=3,
                              attention_head_dim=8, in_channels=4, out_channels=8,
                              cross_attention_dim=24, caption_channels=32, patch_size=2,
                              norm_elementwise_affine=False, norm_eps=1e-6),
                  scheduler=ALPHA_SCHEDULER, pipeline="PixArtAlphaPipeline",
                  latent_hw=(6, 10), text_len=7, steps=5, guidance=4.5),
    # sigma: no micro-conditions, explicit interpolation scale, 3 blocks.
    "sigma": dict(config=dict(sample_size=32, num_layers=3, num_attention_heads=2,
                              attention_head_dim=12, in_channels=4, out_channels=8,
                              cross_attention_dim=24, caption_channels=20, patch_size=2,
                              norm_elementwise_affine=False, norm_eps=1e-6,
                              interpolation_scale=0.5, use_additional_conditions=False),
                  scheduler=SIGMA_SCHEDULER, pipeline="PixArtSigmaPipeline",
                  latent_hw=(10, 6), text_len=9, steps=6, guidance=3.0),
}


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            fan_in = p.shape[1] if p.ndim >= 2 else p.shape[0]
            std = 1.0 / fan_in ** 0.5 if p.ndim >= 2 else 0.3
            if p.ndim == 4:  # patch-embedding conv
                std = 1.0 / (p.shape[1] * p.shape[2] * p.shape[3]) ** 0.5
            p.copy_(torch.randn(p.shape, generator=g) * std)


def text_inputs(g, batch, length, channels):
    embeds = torch.randn(batch, length, channels, generator=g)
    mask = torch.ones(batch, length, dtype=torch.int64)
    for b in range(batch):  # padded captions: the last tokens masked out, differently per row
        mask[b, length - 2 - b:] = 0
    return embeds, mask


def save(path, tensors, extra=None):
    meta = dict(VERSIONS, **(extra or {}))
    save_file({k: v.contiguous().float() for k, v in tensors.items()}, path,
              metadata={k: str(v) for k, v in meta.items()})


def make(name, spec, seed):
    folder = os.path.join(OUT, f"pixart_{name}_tiny")
    model = PixArtTransformer2DModel(**spec["config"]).eval()
    randomize(model, seed)
    model.save_pretrained(os.path.join(folder, "transformer"))
    sched = DPMSolverMultistepScheduler(**spec["scheduler"])
    sched.save_pretrained(os.path.join(folder, "scheduler"))
    with open(os.path.join(folder, "model_index.json"), "w") as f:
        json.dump({"_class_name": spec["pipeline"], "_diffusers_version": diffusers.__version__,
                   "transformer": ["diffusers", "PixArtTransformer2DModel"],
                   "scheduler": ["diffusers", "DPMSolverMultistepScheduler"],
                   "text_encoder": [None, None], "tokenizer": [None, None],
                   "vae": [None, None]}, f, indent=2)

    cfg = model.config
    h, w = spec["latent_hw"]
    g = torch.Generator().manual_seed(seed + 1)
    os.makedirs(os.path.join(OUT, "goldens"), exist_ok=True)

    # One forward, batch 2, different timesteps, padded text.
    x = torch.randn(2, cfg.in_channels, h, w, generator=g)
    t = torch.tensor([999, 421], dtype=torch.int64)
    enc, mask = text_inputs(g, 2, spec["text_len"], cfg.caption_channels)
    added = {"resolution": None, "aspect_ratio": None}
    inputs = dict(hidden_states=x, timestep=t.float(), encoder_hidden_states=enc,
                  encoder_attention_mask=mask.float())
    if model.use_additional_conditions:
        added = {"resolution": torch.tensor([[h * 8.0, w * 8.0], [h * 8.0, w * 8.0]]),
                 "aspect_ratio": torch.tensor([[h / w], [h / w]])}
        inputs.update(resolution=added["resolution"], aspect_ratio=added["aspect_ratio"])
    with torch.no_grad():
        out = model(x, encoder_hidden_states=enc, encoder_attention_mask=mask, timestep=t,
                    added_cond_kwargs=added, return_dict=False)[0]
    save(os.path.join(OUT, "goldens", f"pixart_{name}_forward.safetensors"),
         dict(inputs, output=out))

    # The full pipeline loop with CFG from embeddings to latents.
    pipe_cls = getattr(diffusers, spec["pipeline"])
    pipe = pipe_cls(tokenizer=None, text_encoder=None, vae=None, transformer=model,
                    scheduler=DPMSolverMultistepScheduler.from_pretrained(
                        os.path.join(folder, "scheduler")))
    pe, pm = text_inputs(g, 1, spec["text_len"], cfg.caption_channels)
    ne, nm = text_inputs(g, 1, spec["text_len"], cfg.caption_channels)
    nm[:] = 0
    nm[0, :3] = 1
    latents = torch.randn(1, cfg.in_channels, h, w, generator=g)
    with torch.no_grad():
        result = pipe(negative_prompt=None, prompt_embeds=pe, prompt_attention_mask=pm, negative_prompt_embeds=ne,
                      negative_prompt_attention_mask=nm, latents=latents.clone(),
                      height=h * 8, width=w * 8, num_inference_steps=spec["steps"],
                      guidance_scale=spec["guidance"], output_type="latent",
                      use_resolution_binning=False, return_dict=False)[0]
    save(os.path.join(OUT, "goldens", f"pixart_{name}_loop.safetensors"),
         dict(prompt_embeds=pe, prompt_attention_mask=pm.float(), negative_prompt_embeds=ne,
              negative_prompt_attention_mask=nm.float(), latents=latents, output=result),
         dict(steps=spec["steps"], guidance_scale=spec["guidance"], height=h * 8, width=w * 8))
    print(name, "forward", tuple(out.shape), "loop", tuple(result.shape),
          "timesteps", pipe.scheduler.timesteps.tolist())


if __name__ == "__main__":
    torch.manual_seed(0)
    make("alpha", MODELS["alpha"], 1234)
    make("sigma", MODELS["sigma"], 5678)
