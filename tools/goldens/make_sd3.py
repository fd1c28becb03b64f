#!/usr/bin/env python3
"""Tiny Stable Diffusion 3 pipelines with random weights — an SD3-medium-like one
(no qk-norm, no dual attention) and an SD3.5-medium-like one (qk RMSNorm, dual
attention in blocks 0 and 1) — one diffusers forward of each transformer (also
with skip_layers), and whole StableDiffusion3Pipeline runs (CFG, and skip-layer
guidance on the 3.5-like one).

    python3 tools/goldens/make_sd3.py    # from the repository root, after
                                         # make_pixart.py, make_clip.py, make_vae16.py

Both pipelines share tiny CLIP-L- and CLIP-G-like CLIPTextModelWithProjection
encoders made here (hidden 12 and 16, projections of the same widths, so the
pooled vector is 28 wide and the penultimate features 28 wide, zero-padded to
T5's 32), the tokenizers of tests/data/clip (tokenizer_2 pads with "!" as SD3's
does), the tiny T5 of models/pixart-alpha-tiny (text_encoder_3, tokenizer_3)
and the 16-channel VAE of tests/data/vae16. Writes models/sd3{,5}-tiny/
(complete diffusers folders) and
tests/data/goldens/sd3{,5}_forward.safetensors with
  latents [B, 16, H, W], timestep [B] (as the pipeline passes it: t),
  text [B, L, 32], pooled [B, 28], output [B, 16, H, W] and output_skip
  (skip_layers = [1]);
tests/data/goldens/sd3{,5}_pipeline.safetensors with, per case (request in the
metadata): prompt_embeds, pooled_prompt_embeds, negative_prompt_embeds,
negative_pooled_prompt_embeds, initial_latents, latents (final) and image
[1, 3, H, W] in [-1, 1].
"""
import json
import os
import shutil

import diffusers
import torch
import transformers
from diffusers import (AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel,
                       StableDiffusion3Pipeline)
from safetensors.torch import save_file
from transformers import (CLIPTextConfig, CLIPTextModelWithProjection, CLIPTokenizer,
                          T5EncoderModel, T5TokenizerFast)

MODELS = "models"
GOLDENS = "tests/data/goldens"
CLIP = "tests/data/clip"
VERSIONS = {"torch": torch.__version__, "diffusers": diffusers.__version__,
            "transformers": transformers.__version__}
CONFIG = dict(sample_size=16, patch_size=2, in_channels=16, num_layers=3, attention_head_dim=8,
              num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=16,
              pooled_projection_dim=28, out_channels=16, pos_embed_max_size=24)
VARIANTS = {"sd3": dict(), "sd35": dict(dual_attention_layers=(0, 1), qk_norm="rms_norm")}
# (prompt, negative prompt, height, width, steps, guidance, seed, max_sequence_length,
#  skip_guidance_layers, skip_layer_guidance_scale, start, stop)
CASES = {
    "sd3": [("a red fox in the snow", None, 48, 80, 4, 7.0, 0, 16, None, 0, 0, 0),
            ("Two cats, sitting on a mat!", "blurry", 56, 40, 3, 4.5, 7, 24, None, 0, 0, 0)],
    "sd35": [("an astronaut riding a horse", "low quality", 40, 64, 5, 5.0, 3, 16, [1], 2.8,
              0.01, 0.6),
             ("a red fox in the snow", None, 48, 48, 3, 1.0, 1, 16, None, 0, 0, 0)],
}


def clip(hidden, seed, act):
    torch.manual_seed(seed)
    base = json.load(open(f"{CLIP}/text_encoder/config.json"))
    cfg = CLIPTextConfig(vocab_size=base["vocab_size"], hidden_size=hidden,
                         intermediate_size=2 * hidden, num_hidden_layers=3,
                         num_attention_heads=2, max_position_embeddings=77, hidden_act=act,
                         projection_dim=hidden, eos_token_id=base["eos_token_id"],
                         bos_token_id=base["bos_token_id"], pad_token_id=base["pad_token_id"])
    return CLIPTextModelWithProjection(cfg).eval()


def transformer(name, seed):
    torch.manual_seed(seed)
    model = SD3Transformer2DModel(**CONFIG, **VARIANTS[name]).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n == "pos_embed.pos_embed":
                continue  # the sin-cos table diffusers makes (a stored buffer)
            std = p.shape[-1] ** -0.5 if p.ndim >= 2 else 0.3
            p.copy_(torch.randn(p.shape, generator=g) * std)
            if "norm" in n and n.endswith("weight") and p.ndim == 1:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
    return model


def forward(name, model):
    g = torch.Generator().manual_seed(5)
    B, H, W, L = 2, 10, 14, 9
    latents = torch.randn(B, 16, H, W, generator=g)
    text = torch.randn(B, L, CONFIG["joint_attention_dim"], generator=g)
    pooled = torch.randn(B, CONFIG["pooled_projection_dim"], generator=g)
    timestep = torch.tensor([750.0, 312.5])
    with torch.no_grad():
        kw = dict(hidden_states=latents, encoder_hidden_states=text, pooled_projections=pooled,
                  timestep=timestep, return_dict=False)
        out = model(**kw)[0]
        skip = model(**kw, skip_layers=[1])[0]
    save_file({"latents": latents, "text": text, "pooled": pooled, "timestep": timestep,
               "output": out.contiguous(), "output_skip": skip.contiguous()},
              os.path.join(GOLDENS, f"{name}_forward.safetensors"), metadata=dict(VERSIONS))
    print(name, out.shape, out.abs().max().item())


def pipeline(name, model, encoders):
    pipe = StableDiffusion3Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        vae=AutoencoderKL.from_pretrained("tests/data/vae16"),
        text_encoder=encoders[0], tokenizer=CLIPTokenizer.from_pretrained(f"{CLIP}/tokenizer"),
        text_encoder_2=encoders[1],
        tokenizer_2=CLIPTokenizer.from_pretrained(f"{CLIP}/tokenizer_2"),
        text_encoder_3=T5EncoderModel.from_pretrained(f"{MODELS}/pixart-alpha-tiny/text_encoder"),
        tokenizer_3=T5TokenizerFast.from_pretrained(f"{MODELS}/pixart-alpha-tiny/tokenizer"),
        transformer=model)
    folder = os.path.join(MODELS, f"{name}-tiny")
    shutil.rmtree(folder, ignore_errors=True)
    pipe.save_pretrained(folder, safe_serialization=True)
    # The slow-tokenizer files SD3's repositories ship (transformers 5 saves
    # only tokenizer.json).
    for src, dst in ((f"{CLIP}/tokenizer", "tokenizer"), (f"{CLIP}/tokenizer_2", "tokenizer_2"),
                     (f"{MODELS}/pixart-alpha-tiny/tokenizer", "tokenizer_3")):
        for f in os.listdir(src):
            shutil.copy(os.path.join(src, f), os.path.join(folder, dst, f))
    tensors, meta = {}, dict(VERSIONS)
    for k, (prompt, neg, h, w, steps, guidance, seed, msl, slg, slg_scale, start,
            stop) in enumerate(CASES[name]):
        with torch.no_grad():
            cfg = guidance > 1
            pe, ne, pp, npp = pipe.encode_prompt(
                prompt=prompt, prompt_2=None, prompt_3=None, do_classifier_free_guidance=cfg,
                negative_prompt=neg, max_sequence_length=msl)
            lh, lw = h // pipe.vae_scale_factor, w // pipe.vae_scale_factor
            init = torch.randn(1, 16, lh, lw, generator=torch.Generator().manual_seed(seed))
            kw = dict(prompt=prompt, negative_prompt=neg, height=h, width=w,
                      num_inference_steps=steps, guidance_scale=guidance,
                      max_sequence_length=msl)
            if slg is not None:
                kw.update(skip_guidance_layers=slg, skip_layer_guidance_scale=slg_scale,
                          skip_layer_guidance_start=start, skip_layer_guidance_stop=stop)
            final = pipe(**kw, generator=torch.Generator().manual_seed(seed),
                         output_type="latent").images
            z = final / pipe.vae.config.scaling_factor + pipe.vae.config.shift_factor
            image = pipe.vae.decode(z, return_dict=False)[0]
        tensors.update({f"case{k}.prompt_embeds": pe, f"case{k}.pooled_prompt_embeds": pp,
                        f"case{k}.initial_latents": init, f"case{k}.latents": final.contiguous(),
                        f"case{k}.image": image.contiguous()})
        if cfg:
            tensors.update({f"case{k}.negative_prompt_embeds": ne,
                            f"case{k}.negative_pooled_prompt_embeds": npp})
        meta[f"case{k}"] = json.dumps(dict(
            prompt=prompt, negative_prompt=neg, height=h, width=w, steps=steps,
            guidance_scale=guidance, seed=seed, max_sequence_length=msl,
            skip_guidance_layers=slg, skip_layer_guidance_scale=slg_scale,
            skip_layer_guidance_start=start, skip_layer_guidance_stop=stop))
    meta["cases"] = str(len(CASES[name]))
    save_file(tensors, os.path.join(GOLDENS, f"{name}_pipeline.safetensors"), metadata=meta)


encoders = (clip(12, 21, "quick_gelu"), clip(16, 22, "gelu"))
for i, name in enumerate(("sd3", "sd35")):
    m = transformer(name, 31 + i)
    forward(name, m)
    pipeline(name, m, encoders)
