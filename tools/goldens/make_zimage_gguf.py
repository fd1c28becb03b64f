#!/usr/bin/env python3
"""The tiny Z-Image's transformer as the community ships Z-Image single files
(GGUF conversions, single-file safetensors): the original layout's names
(`layers.N.attention.qkv.weight` fused, `attention.out`, `q_norm` / `k_norm`,
`x_embedder.`, `final_layer.`, and `norm_final.weight`, which diffusers
drops), made from models/zimage-tiny by the inverse of diffusers'
`convert_z_image_transformer_checkpoint_to_diffusers` (checked here: the
converter gives the folder's tensors back, bit for bit).

    python3 tools/goldens/make_zimage_gguf.py   # from the repository root,
                                                # after make_zimage_pipeline.py

Writes tests/data/zimage_checkpoint/:
  zimage_tiny_q8_0.gguf matrices whose rows are whole 32-value blocks in
                        Q8_0 (gguf-py's quantizer), the rest F32 (the
                        folder's values), as the community files keep 1-D
                        tensors and odd widths;
  zimage_tiny_bf16.safetensors  the original layout as a single-file
                        safetensors checkpoint, BF16 (the folder's values
                        rounded), no name prefix;
  zimage_tiny_q8_0_image.safetensors  "image": ZImagePipeline's image (f32,
                        output_type "np") of make_zimage_pipeline.py's first
                        request (no CFG) and "cfg_image" of its second (CFG,
                        a shorter negative prompt), the transformer
                        ZImageTransformer2DModel.from_single_file of the
                        Q8_0 GGUF with GGUFQuantizationConfig(compute_dtype=
                        float32) — diffusers' own GGUF reading and
                        dequantization.
"""
import json
import os
import sys

import numpy as np
import torch
from diffusers import ZImagePipeline, ZImageTransformer2DModel
from diffusers.loaders.single_file_utils import convert_z_image_transformer_checkpoint_to_diffusers
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(__file__))
from gguf_single_file import from_single_file, versions, write_q8_0_gguf  # noqa: E402

FOLDER = "models/zimage-tiny"
SRC = os.path.join(FOLDER, "transformer", "diffusion_pytorch_model.safetensors")
OUT = "tests/data/zimage_checkpoint"
# make_zimage_pipeline.py's CASES[0] and CASES[1]
REQUESTS = {"image": ("a red fox in the snow", None, 64, 48, 4, 0.0, 0, 24),
            "cfg_image": ("Two cats, sitting on a mat under the warm afternoon sun!", "blurry",
                          32, 64, 3, 2.5, 7, 40)}


def original(sd):
    """The original layout of a diffusers Z-Image state dict."""
    o = {}
    for name, t in sd.items():
        if ".attention.to_k." in name or ".attention.to_v." in name:
            continue
        if ".attention.to_q.weight" in name:
            p = name.replace(".attention.to_q.weight", ".attention.")
            o[p + "qkv.weight"] = torch.cat([sd[p + "to_q.weight"], sd[p + "to_k.weight"],
                                             sd[p + "to_v.weight"]])
            continue
        new = (name.replace("all_final_layer.2-1.", "final_layer.")
               .replace("all_x_embedder.2-1.", "x_embedder.")
               .replace(".attention.to_out.0.", ".attention.out.")
               .replace(".attention.norm_k.", ".attention.k_norm.")
               .replace(".attention.norm_q.", ".attention.q_norm."))
        o[new] = t
    # In the original checkpoints, unused by diffusers (its converter drops it).
    o["norm_final.weight"] = torch.ones(sd["x_pad_token"].shape[1])
    return o


def main():
    sd = load_file(SRC)
    o = original(sd)
    back = convert_z_image_transformer_checkpoint_to_diffusers({k: v.clone() for k, v in o.items()})
    assert sorted(back) == sorted(sd), set(back) ^ set(sd)
    assert all(torch.equal(back[k], sd[k]) for k in sd), "the converter gives the folder back"
    os.makedirs(OUT, exist_ok=True)
    q8_0 = os.path.join(OUT, "zimage_tiny_q8_0.gguf")
    quantized = write_q8_0_gguf(q8_0, "lumina2", o)
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in o.items()},
              os.path.join(OUT, "zimage_tiny_bf16.safetensors"))
    print(len(o), "original tensors,", quantized, "in Q8_0")
    transformer = from_single_file(ZImageTransformer2DModel, q8_0, FOLDER)
    pipe = ZImagePipeline.from_pretrained(FOLDER, transformer=transformer,
                                          torch_dtype=torch.float32)
    images, meta = {}, versions()
    for key, (prompt, neg, h, w, steps, g, seed, msl) in REQUESTS.items():
        with torch.no_grad():
            images[key] = torch.from_numpy(pipe(
                prompt=prompt, negative_prompt=neg, height=h, width=w, num_inference_steps=steps,
                guidance_scale=g, max_sequence_length=msl,
                generator=torch.Generator().manual_seed(seed), output_type="np").images)
        meta[key] = json.dumps(dict(prompt=prompt, negative_prompt=neg, height=h, width=w,
                                    steps=steps, guidance_scale=g, seed=seed,
                                    max_sequence_length=msl))
        print(key, tuple(images[key].shape), float(images[key].mean()))
    save_file({k: v.contiguous() for k, v in images.items()},
              os.path.join(OUT, "zimage_tiny_q8_0_image.safetensors"), metadata=meta)
    print("numpy", np.__version__)


if __name__ == "__main__":
    main()
