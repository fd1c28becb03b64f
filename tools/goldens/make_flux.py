#!/usr/bin/env python3
"""Tiny FLUX.1 pipelines (schnell-like: no guidance embedding, shift 1; dev-like:
guidance embedding, dynamic shifting) with random transformer weights, one
diffusers forward of each transformer on the inputs FluxPipeline gives it
(packed latents, T5-width text, the pooled CLIP vector, timestep / 1000,
guidance, the text / image position ids), and whole FluxPipeline runs.

    python3 tools/goldens/make_flux.py    # from the repository root, after
                                          # make_pixart.py, make_clip.py, make_vae16.py

The pipelines reuse the tiny CLIP-L of tests/data/clip (tokenizer,
text_encoder), the tiny T5 of models/pixart-alpha-tiny (tokenizer_2,
text_encoder_2) and the 16-channel VAE of tests/data/vae16. Writes
models/flux-{schnell,dev}-tiny/ (complete diffusers folders, the transformer
in bf16 as FLUX.1 ships) and
tests/data/goldens/flux_{schnell,dev}_forward.safetensors with
  latents [B, 16, H, W] (unpacked, as the denoising loop holds them),
  text [B, L, joint_attention_dim], pooled [B, pooled_projection_dim],
  timestep [B] (t / 1000, what the pipeline passes), guidance [B] (dev),
  output [B, 16, H, W] (the packed model output, unpacked the way the
  pipeline's _unpack_latents does);
tests/data/goldens/flux_{schnell,dev}_pipeline.safetensors with, per case
  (prompt, size, steps, seed, max_sequence_length, guidance / true CFG in the
  metadata): prompt_embeds, pooled_prompt_embeds (and the negative ones with
  true CFG), initial latents [1, 16, h, w],
  final latents [1, 16, h, w] and image [1, 3, H, W] (in [-1, 1], before
  postprocessing).
"""
import os
import shutil

import json

import diffusers
import torch
import transformers
from diffusers import (AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxPipeline,
                       FluxTransformer2DModel)
from safetensors.torch import save_file
from transformers import CLIPTextModel, CLIPTokenizer, T5EncoderModel, T5TokenizerFast

MODELS = "models"
GOLDENS = "tests/data/goldens"
VERSIONS = {"torch": torch.__version__, "diffusers": diffusers.__version__,
            "transformers": transformers.__version__}
SCHEDULERS = {  # as FLUX.1-schnell and FLUX.1-dev ship them
    "schnell": dict(base_image_seq_len=256, base_shift=0.5, max_image_seq_len=4096,
                    max_shift=1.15, num_train_timesteps=1000, shift=1.0,
                    use_dynamic_shifting=False),
    "dev": dict(base_image_seq_len=256, base_shift=0.5, max_image_seq_len=4096, max_shift=1.15,
                num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True),
}
# (prompt, negative prompt, height, width, steps, guidance, true CFG, seed, max_sequence_length)
CASES = {
    "schnell": [("a red fox in the snow", None, 48, 80, 4, 0.0, 1.0, 0, 32),
                ("Two cats, sitting on a mat!", None, 56, 40, 2, 0.0, 1.0, 7, 24)],
    "dev": [("a red fox in the snow", None, 48, 80, 3, 3.5, 1.0, 0, 32),
            ("an astronaut riding a horse", "blurry, low quality", 40, 64, 3, 3.5, 2.5, 3, 32)],
}
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
    # Stored in bf16 like the real checkpoints; everything runs in f32 on the
    # same (bf16-exact) values.
    model.to(torch.bfloat16).float()

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
    return model


def ship_slow_tokenizer_files(folder):
    """FLUX.1's repositories ship CLIP's vocab.json + merges.txt and T5's spiece.model
    (what xdit reads); transformers 5 saves only tokenizer.json, so copy them in."""
    for src, dst in (("tests/data/clip/tokenizer", "tokenizer"),
                     (f"{MODELS}/pixart-alpha-tiny/tokenizer", "tokenizer_2")):
        for f in os.listdir(src):
            shutil.copy(os.path.join(src, f), os.path.join(folder, dst, f))


def pipeline(name, transformer):
    pipe = FluxPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULERS[name]),
        vae=AutoencoderKL.from_pretrained("tests/data/vae16"),
        text_encoder=CLIPTextModel.from_pretrained("tests/data/clip/text_encoder"),
        tokenizer=CLIPTokenizer.from_pretrained("tests/data/clip/tokenizer"),
        text_encoder_2=T5EncoderModel.from_pretrained(f"{MODELS}/pixart-alpha-tiny/text_encoder"),
        tokenizer_2=T5TokenizerFast.from_pretrained(f"{MODELS}/pixart-alpha-tiny/tokenizer"),
        transformer=transformer)
    folder = os.path.join(MODELS, f"flux-{name}-tiny")
    shutil.rmtree(folder, ignore_errors=True)
    pipe.transformer.to(torch.bfloat16)
    pipe.save_pretrained(folder, safe_serialization=True)
    ship_slow_tokenizer_files(folder)
    pipe.transformer.float()
    tensors, meta = {}, dict(VERSIONS)
    for k, (prompt, neg, h, w, steps, guidance, true_cfg, seed, msl) in enumerate(CASES[name]):
        with torch.no_grad():
            pe, pooled, _ = pipe.encode_prompt(prompt=prompt, prompt_2=None,
                                               max_sequence_length=msl)
            g = torch.Generator().manual_seed(seed)
            lh, lw = 2 * (h // (pipe.vae_scale_factor * 2)), 2 * (w // (pipe.vae_scale_factor * 2))
            init = torch.randn(1, 16, lh, lw, generator=g)
            kw = dict(prompt=prompt, height=h, width=w, num_inference_steps=steps,
                      max_sequence_length=msl, guidance_scale=guidance)
            if neg is not None:
                kw.update(negative_prompt=neg, true_cfg_scale=true_cfg)
            packed = pipe(**kw, generator=torch.Generator().manual_seed(seed),
                          output_type="latent").images
            final = unpack(packed, lh, lw)
            z = final / pipe.vae.config.scaling_factor + pipe.vae.config.shift_factor
            image = pipe.vae.decode(z, return_dict=False)[0]
            if neg is not None:
                ne, npooled, _ = pipe.encode_prompt(prompt=neg, prompt_2=None,
                                                    max_sequence_length=msl)
                tensors.update({f"case{k}.negative_prompt_embeds": ne,
                                f"case{k}.negative_pooled_prompt_embeds": npooled})
        tensors.update({f"case{k}.prompt_embeds": pe, f"case{k}.pooled_prompt_embeds": pooled,
                        f"case{k}.initial_latents": init, f"case{k}.latents": final.contiguous(),
                        f"case{k}.image": image.contiguous()})
        meta[f"case{k}"] = json.dumps(dict(prompt=prompt, negative_prompt=neg, height=h, width=w,
                                           steps=steps, guidance_scale=guidance,
                                           true_cfg_scale=true_cfg, seed=seed,
                                           max_sequence_length=msl))
    meta["cases"] = str(len(CASES[name]))
    save_file(tensors, os.path.join(GOLDENS, f"flux_{name}_pipeline.safetensors"), metadata=meta)


shutil.rmtree("tests/data/flux-tiny", ignore_errors=True)
pipeline("schnell", make("schnell", False, 11))
pipeline("dev", make("dev", True, 12))
