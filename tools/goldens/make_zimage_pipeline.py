#!/usr/bin/env python3
"""A tiny Z-Image pipeline (diffusers ZImagePipeline) with random weights, and
whole runs of it.

    python3 tools/goldens/make_zimage_pipeline.py   # from the repository root,
                                                    # after make_qwen_encoder.py,
                                                    # make_zimage.py and make_flux.py

The folder takes tests/data/zimage/transformer (make_zimage.py: a tiny random
ZImageTransformer2DModel of text width 32), tests/data/qwen/qwen3 (a tiny
random Qwen3Model of hidden size 32) with the tiny Qwen2 tokenizer given the
part of Qwen3's chat template ZImagePipeline uses (make_qwen_encoder.py), the
16-channel AutoencoderKL of models/flux-schnell-tiny (scaling and shift
factors; 4x) and Z-Image-Turbo's scheduler (Flow-Match Euler, shift 3, no
dynamic shifting). Writes models/zimage-tiny/ and
tests/data/goldens/zimage_pipeline.safetensors with, per case (the request in
the metadata; "prompt" a string or a list), initial_latents [B, 16, H/4, W/4],
the final latents and the image [B, 3, H, W] in [-1, 1]. The cases: no CFG
(guidance 0, Turbo's way), CFG with a negative prompt whose text is shorter
than the prompt's, CFG with two prompts of different lengths and the default
negative prompt "", and CFG with cfg_truncation 0.2 (the last two of four
steps without CFG) and cfg_normalization 1.05 (ZImagePipeline's options;
off in the other cases, as by default).
"""
import json
import os
import shutil

import diffusers
import torch
import transformers
from diffusers import (AutoencoderKL, FlowMatchEulerDiscreteScheduler, ZImagePipeline,
                       ZImageTransformer2DModel)
from safetensors.torch import save_file
from transformers import AutoTokenizer, Qwen3Model

MODELS = "models"
GOLDENS = "tests/data/goldens"
VERSIONS = {"torch": torch.__version__, "diffusers": diffusers.__version__,
            "transformers": transformers.__version__}
# The part of Qwen3's chat template one user message with a generation prompt
# uses (thinking on: no think block), as make_qwen_encoder.py gives it.
CHAT_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content"
    " + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking is"
    " false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}")
# (prompt(s), negative prompt, height, width, steps, guidance, seed, max_sequence_length)
CASES = [
    ("a red fox in the snow", None, 64, 48, 4, 0.0, 0, 24),
    ("Two cats, sitting on a mat under the warm afternoon sun!", "blurry", 32, 64, 3, 2.5, 7, 40),
    (["an astronaut riding a horse on the moon", "a cat"], None, 48, 48, 3, 1.5, 3, 24),
    ("a lighthouse at dusk", "fog", 32, 32, 4, 3.0, 9, 24),  # + cfg_truncation, cfg_normalization
]
# Per case: ZImagePipeline's cfg_truncation and cfg_normalization (defaults 1.0, False).
LIMITS = {3: (0.2, 1.05)}  # t_norm 0, .1, .25, .5: the last two steps without CFG


def main():
    tokenizer = AutoTokenizer.from_pretrained("tests/data/qwen/tokenizer")
    tokenizer.chat_template = CHAT_TEMPLATE
    pipe = ZImagePipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0,
                                                  use_dynamic_shifting=False),
        vae=AutoencoderKL.from_pretrained(os.path.join(MODELS, "flux-schnell-tiny", "vae")),
        text_encoder=Qwen3Model.from_pretrained("tests/data/qwen/qwen3"),
        tokenizer=tokenizer,
        transformer=ZImageTransformer2DModel.from_pretrained("tests/data/zimage/transformer"))
    folder = os.path.join(MODELS, "zimage-tiny")
    shutil.rmtree(folder, ignore_errors=True)
    pipe.save_pretrained(folder, safe_serialization=True)
    vae = pipe.vae
    vsf = pipe.vae_scale_factor
    tensors, meta = {}, dict(VERSIONS)
    for k, (prompt, neg, h, w, steps, g, seed, msl) in enumerate(CASES):
        n = len(prompt) if isinstance(prompt, list) else 1
        trunc, norm = LIMITS.get(k, (1.0, False))
        with torch.no_grad():
            init = torch.randn(n, 16, h // vsf, w // vsf,
                               generator=torch.Generator().manual_seed(seed))
            # (a copy: _encode_prompt writes the templated texts into a list it is given)
            final = pipe(prompt=list(prompt) if isinstance(prompt, list) else prompt,
                         negative_prompt=neg, height=h, width=w,
                         num_inference_steps=steps, guidance_scale=g, max_sequence_length=msl,
                         cfg_truncation=trunc, cfg_normalization=norm,
                         generator=torch.Generator().manual_seed(seed),
                         output_type="latent").images
            z = final / vae.config.scaling_factor + vae.config.shift_factor
            image = vae.decode(z, return_dict=False)[0]
        tensors.update({f"case{k}.initial_latents": init, f"case{k}.latents": final.contiguous(),
                        f"case{k}.image": image.contiguous()})
        meta[f"case{k}"] = json.dumps(dict(
            prompt=prompt, negative_prompt=neg, height=h, width=w, steps=steps,
            guidance_scale=g, seed=seed, max_sequence_length=msl, cfg_truncation=trunc,
            cfg_normalization=float(norm)))
        print(k, tuple(final.shape), tuple(image.shape), float(image.abs().mean()))
    meta["cases"] = str(len(CASES))
    save_file(tensors, os.path.join(GOLDENS, "zimage_pipeline.safetensors"), metadata=meta)


if __name__ == "__main__":
    main()
