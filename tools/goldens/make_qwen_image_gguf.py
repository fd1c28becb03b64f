#!/usr/bin/env python3
"""The tiny Qwen-Image's transformer as a GGUF file, as the community ships
Qwen-Image GGUF conversions: diffusers' own names (diffusers reads such
files with an identity mapping: `single_file_model.py`'s
QwenImageTransformer2DModel entry), matrices whose rows are whole 32-value
blocks in Q8_0 (gguf-py's quantizer), the rest F32.

    python3 tools/goldens/make_qwen_image_gguf.py   # from the repository root,
                                                    # after make_qwen_image_pipeline.py

Writes tests/data/qwen_image_checkpoint/:
  qwen_image_tiny_q8_0.gguf
  qwen_image_tiny_q8_0_image.safetensors  "image": QwenImagePipeline's image
                        (f32, output_type "np") of make_qwen_image_pipeline.py's
                        first request (no negative prompt: no CFG) and
                        "cfg_image" of its second (true CFG 2.5), the
                        transformer QwenImageTransformer2DModel.from_single_file
                        of the GGUF with GGUFQuantizationConfig(compute_dtype=
                        float32): diffusers' own GGUF reading and dequantization.
"""
import json
import os
import sys

import torch
from diffusers import QwenImagePipeline, QwenImageTransformer2DModel
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(__file__))
from gguf_single_file import from_single_file, versions, write_q8_0_gguf  # noqa: E402

FOLDER = "models/qwen-image-tiny"
SRC = os.path.join(FOLDER, "transformer", "diffusion_pytorch_model.safetensors")
OUT = "tests/data/qwen_image_checkpoint"
# make_qwen_image_pipeline.py's CASES[0] and CASES[1]
REQUESTS = {"image": ("a red fox in the snow", None, 64, 48, 3, None, 0, 32),
            "cfg_image": ("Two cats, sitting on a mat under the warm afternoon sun!", "blurry",
                          48, 64, 3, 2.5, 7, 24)}


def main():
    sd = load_file(SRC)
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "qwen_image_tiny_q8_0.gguf")
    quantized = write_q8_0_gguf(path, "qwen_image", sd)
    print(len(sd), "tensors,", quantized, "in Q8_0")
    transformer = from_single_file(QwenImageTransformer2DModel, path, FOLDER)
    pipe = QwenImagePipeline.from_pretrained(FOLDER, transformer=transformer,
                                             torch_dtype=torch.float32)
    images, meta = {}, versions()
    for key, (prompt, neg, h, w_, steps, tcfg, seed, msl) in REQUESTS.items():
        kwargs = {} if tcfg is None else {"true_cfg_scale": tcfg}
        with torch.no_grad():
            images[key] = torch.from_numpy(pipe(
                prompt=prompt, negative_prompt=neg, height=h, width=w_, num_inference_steps=steps,
                max_sequence_length=msl, generator=torch.Generator().manual_seed(seed),
                output_type="np", **kwargs).images)
        meta[key] = json.dumps(dict(prompt=prompt, negative_prompt=neg, height=h, width=w_,
                                    steps=steps, true_cfg_scale=tcfg, seed=seed,
                                    max_sequence_length=msl))
        print(key, tuple(images[key].shape), float(images[key].mean()))
    save_file({k: v.contiguous() for k, v in images.items()},
              os.path.join(OUT, "qwen_image_tiny_q8_0_image.safetensors"), metadata=meta)


if __name__ == "__main__":
    main()
