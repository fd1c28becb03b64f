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
import importlib.metadata
import json
import os

import diffusers
import gguf
import numpy as np
import torch
from diffusers import GGUFQuantizationConfig, ZImagePipeline, ZImageTransformer2DModel
from diffusers.loaders.single_file_utils import convert_z_image_transformer_checkpoint_to_diffusers
from gguf import GGMLQuantizationType as T
from gguf import quants
from safetensors.torch import load_file, save_file

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


def write(path, tensors):
    w = gguf.GGUFWriter(path, "lumina2")
    for name, t in sorted(tensors.items()):
        x = t.float().numpy()
        if x.ndim == 2 and x.shape[1] % 32 == 0:
            w.add_tensor(name, quants.quantize(x, T.Q8_0), raw_dtype=T.Q8_0)
        else:
            w.add_tensor(name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    sd = load_file(SRC)
    o = original(sd)
    back = convert_z_image_transformer_checkpoint_to_diffusers({k: v.clone() for k, v in o.items()})
    assert sorted(back) == sorted(sd), set(back) ^ set(sd)
    assert all(torch.equal(back[k], sd[k]) for k in sd), "the converter gives the folder back"
    os.makedirs(OUT, exist_ok=True)
    q8_0 = os.path.join(OUT, "zimage_tiny_q8_0.gguf")
    write(q8_0, o)
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in o.items()},
              os.path.join(OUT, "zimage_tiny_bf16.safetensors"))
    quantized = sum(1 for t in gguf.GGUFReader(q8_0).tensors if t.tensor_type == T.Q8_0)
    print(len(o), "original tensors,", quantized, "in Q8_0")
    transformer = ZImageTransformer2DModel.from_single_file(
        q8_0, config=FOLDER, subfolder="transformer", torch_dtype=torch.float32,
        quantization_config=GGUFQuantizationConfig(compute_dtype=torch.float32))
    pipe = ZImagePipeline.from_pretrained(FOLDER, transformer=transformer,
                                          torch_dtype=torch.float32)
    images, meta = {}, {"gguf": importlib.metadata.version("gguf"),
                        "diffusers": diffusers.__version__, "torch": torch.__version__}
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
