#!/usr/bin/env python3
"""The tiny SD3.5's transformer as the community ships SD3 / SD3.5 GGUF and
single-file checkpoints (issue 45): Stability AI's original MMDiT names
(`joint_blocks.N.x_block.attn.qkv.weight`, `final_layer.adaLN_modulation.1`
as shift | scale, ...), made from models/sd35-tiny (dual attention, qk
RMSNorm) by the inverse of diffusers'
`convert_sd3_transformer_checkpoint_to_diffusers`, checked here: diffusers'
converter of the file's tensors gives the folder's tensors back, bit for bit.

    python3 tools/goldens/make_sd3_gguf.py   # from the repository root

Writes tests/data/sd3_checkpoint/:
  sd35_tiny_f32.safetensors  the original layout as a single-file
                      safetensors ("model.diffusion_model." names), F32 as
                      the folder stores it;
  sd35_tiny_q8_0.gguf matrices whose rows are whole 32-value blocks in Q8_0
                      (gguf-py's quantizer), other matrices F16, vectors,
                      the patch convolution and the position table F32;
  sd35_tiny_q8_0_images.safetensors  StableDiffusion3Pipeline's images
                      (f32, output_type "np") of make_lora.py's sd35
                      request with the transformer loaded by diffusers from
                      the GGUF (`from_single_file`, GGUFQuantizationConfig,
                      compute f32): "image"; and with make_lora.py's LoRA
                      sd35_a at scale 1 on it (peft beside the GGUF layers):
                      "lora_a".
"""
import json
import os
import sys

import diffusers
import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as T
from gguf import quants
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(__file__))

MODEL = "models/sd35-tiny"
SRC = MODEL + "/transformer/diffusion_pytorch_model.safetensors"
OUT = "tests/data/sd3_checkpoint"
LORA = "tests/data/lora/sd35_a.safetensors"


def swap(t):
    a, b = t.chunk(2, dim=0)
    return torch.cat([b, a])


def original(sd):
    """diffusers' SD3 names -> the original layout (the converter's inverse)."""
    n = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("transformer_blocks."))
    o = {"pos_embed": sd["pos_embed.pos_embed"]}
    glob = {"x_embedder.proj": "pos_embed.proj", "t_embedder.mlp.0": "time_text_embed.timestep_embedder.linear_1",
            "t_embedder.mlp.2": "time_text_embed.timestep_embedder.linear_2",
            "y_embedder.mlp.0": "time_text_embed.text_embedder.linear_1",
            "y_embedder.mlp.2": "time_text_embed.text_embedder.linear_2",
            "context_embedder": "context_embedder", "final_layer.linear": "proj_out"}
    for kind in ("weight", "bias"):
        for a, b in glob.items():
            o[f"{a}.{kind}"] = sd[f"{b}.{kind}"]
        o[f"final_layer.adaLN_modulation.1.{kind}"] = swap(sd[f"norm_out.linear.{kind}"])
        for i in range(n):
            p, d = f"joint_blocks.{i}.", f"transformer_blocks.{i}."
            last = i == n - 1
            o[f"{p}x_block.attn.qkv.{kind}"] = torch.cat([sd[f"{d}attn.to_{x}.{kind}"] for x in "qkv"])
            o[f"{p}context_block.attn.qkv.{kind}"] = torch.cat(
                [sd[f"{d}attn.add_{x}_proj.{kind}"] for x in "qkv"])
            o[f"{p}x_block.attn.proj.{kind}"] = sd[f"{d}attn.to_out.0.{kind}"]
            o[f"{p}x_block.adaLN_modulation.1.{kind}"] = sd[f"{d}norm1.linear.{kind}"]
            ctx = sd[f"{d}norm1_context.linear.{kind}"]
            o[f"{p}context_block.adaLN_modulation.1.{kind}"] = swap(ctx) if last else ctx
            o[f"{p}x_block.mlp.fc1.{kind}"] = sd[f"{d}ff.net.0.proj.{kind}"]
            o[f"{p}x_block.mlp.fc2.{kind}"] = sd[f"{d}ff.net.2.{kind}"]
            if not last:
                o[f"{p}context_block.attn.proj.{kind}"] = sd[f"{d}attn.to_add_out.{kind}"]
                o[f"{p}context_block.mlp.fc1.{kind}"] = sd[f"{d}ff_context.net.0.proj.{kind}"]
                o[f"{p}context_block.mlp.fc2.{kind}"] = sd[f"{d}ff_context.net.2.{kind}"]
            if f"{d}attn2.to_q.{kind}" in sd:
                o[f"{p}x_block.attn2.qkv.{kind}"] = torch.cat(
                    [sd[f"{d}attn2.to_{x}.{kind}"] for x in "qkv"])
                o[f"{p}x_block.attn2.proj.{kind}"] = sd[f"{d}attn2.to_out.0.{kind}"]
    for i in range(n):
        p, d = f"joint_blocks.{i}.", f"transformer_blocks.{i}."
        for ours, theirs in (("attn.norm_q", "x_block.attn.ln_q"), ("attn.norm_k", "x_block.attn.ln_k"),
                             ("attn.norm_added_q", "context_block.attn.ln_q"),
                             ("attn.norm_added_k", "context_block.attn.ln_k"),
                             ("attn2.norm_q", "x_block.attn2.ln_q"),
                             ("attn2.norm_k", "x_block.attn2.ln_k")):
            if f"{d}{ours}.weight" in sd:
                o[f"{p}{theirs}.weight"] = sd[f"{d}{ours}.weight"]
    return o


def write_gguf(path, tensors):
    w = gguf.GGUFWriter(path, "sd3")
    for name, t in sorted(tensors.items()):
        x = t.float().numpy()
        if x.ndim == 2 and x.shape[1] % 32 == 0:
            w.add_tensor(name, quants.quantize(x, T.Q8_0), raw_dtype=T.Q8_0)
        elif x.ndim == 2:
            w.add_tensor(name, x.astype(np.float16))
        else:
            w.add_tensor(name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    from diffusers.loaders.single_file_utils import convert_sd3_transformer_checkpoint_to_diffusers
    sd = load_file(SRC)
    o = original(sd)
    assert sum(t.numel() for t in o.values()) == sum(t.numel() for t in sd.values()), \
        "every folder value placed once"
    # diffusers' own converter gives the folder back from the original layout.
    back = convert_sd3_transformer_checkpoint_to_diffusers(
        {"model.diffusion_model." + k: v.clone() for k, v in o.items()})
    assert sorted(back) == sorted(sd), set(back) ^ set(sd)
    for k in sd:
        assert torch.equal(back[k], sd[k]), k
    os.makedirs(OUT, exist_ok=True)
    save_file({"model.diffusion_model." + k: v.contiguous() for k, v in o.items()},
              os.path.join(OUT, "sd35_tiny_f32.safetensors"))
    gguf_path = os.path.join(OUT, "sd35_tiny_q8_0.gguf")
    write_gguf(gguf_path, o)
    print(len(o), "original tensors")
    from diffusers import GGUFQuantizationConfig, SD3Transformer2DModel, StableDiffusion3Pipeline
    from make_lora import FAMILIES
    image = FAMILIES["sd35"]["image"]
    kw = {k: v for k, v in image.items() if k != "seed"}
    images = {}
    for key, lora in (("image", None), ("lora_a", LORA)):
        transformer = SD3Transformer2DModel.from_single_file(
            gguf_path, config=MODEL, subfolder="transformer",
            quantization_config=GGUFQuantizationConfig(compute_dtype=torch.float32),
            torch_dtype=torch.float32)
        pipe = StableDiffusion3Pipeline.from_pretrained(MODEL, transformer=transformer,
                                                        torch_dtype=torch.float32)
        if lora:
            pipe.load_lora_weights(lora, adapter_name="a")
            pipe.set_adapters(["a"], [1.0])
        with torch.no_grad():
            images[key] = torch.from_numpy(
                pipe(**kw, generator=torch.Generator().manual_seed(image["seed"]),
                     output_type="np").images).contiguous()
    save_file(images, os.path.join(OUT, "sd35_tiny_q8_0_images.safetensors"),
              metadata={"request": json.dumps(image), "lora_a_scale": "1.0",
                        "gguf": gguf.__version__ if hasattr(gguf, "__version__") else "0.19.0",
                        "diffusers": diffusers.__version__, "torch": torch.__version__})


if __name__ == "__main__":
    main()
