#!/usr/bin/env python3
"""The tiny FLUX.1 [schnell]'s transformer as the community ships FLUX.1
GGUF files (issue 45): Black Forest Labs' names and fused tensors
(`double_blocks.N.img_attn.qkv.weight`, `single_blocks.N.linear1.weight`,
the final modulation as shift | scale), made from models/flux-schnell-tiny
by the inverse of diffusers' `convert_flux_transformer_checkpoint_to_diffusers`
(checked here: diffusers' forward split of every fused tensor, at the tiny
widths, gives the folder's tensors back).

    python3 tools/goldens/make_flux_gguf.py   # from the repository root

Writes tests/data/flux_checkpoint/:
  flux_tiny_bf16.gguf every tensor BF16, as the folder stores it (its values
                      exactly);
  flux_tiny_q8_0.gguf matrices whose rows are whole 32-value blocks in
                      Q8_0 (gguf-py's quantizer), the rest F32, as the
                      community files keep 1-D tensors and odd embedders.
  flux_tiny_q8_0_image.safetensors  FluxPipeline's image (f32, output_type
                      "np") of make_lora.py's request with the transformer's
                      weights gguf-py's dequantization of flux_tiny_q8_0.gguf
                      (diffusers' converter hard-codes FLUX.1's 3072 widths,
                      so the tensors are split back here, as it splits them);
                      "diffusers_image": the same with diffusers' own GGUF
                      dequantization (diffusers.quantizers.gguf.utils, f16
                      arithmetic, then f32 as GGUFQuantizationConfig(
                      compute_dtype=torch.float32) computes).
  flux_tiny_bf16.safetensors  the original layout as a single-file
                      safetensors checkpoint (BF16, "model.diffusion_model."
                      names, as single-file FLUX.1 downloads name them).
"""
import json
import os
import sys

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as T
from gguf import quants
import diffusers
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(__file__))

SRC = "models/flux-schnell-tiny/transformer/diffusion_pytorch_model.safetensors"
OUT = "tests/data/flux_checkpoint"


def original(sd, n_double, n_single):
    o = {}
    pairs = {"time_in.in_layer": "time_text_embed.timestep_embedder.linear_1",
             "time_in.out_layer": "time_text_embed.timestep_embedder.linear_2",
             "vector_in.in_layer": "time_text_embed.text_embedder.linear_1",
             "vector_in.out_layer": "time_text_embed.text_embedder.linear_2",
             "txt_in": "context_embedder", "img_in": "x_embedder",
             "final_layer.linear": "proj_out"}
    for k in ["weight", "bias"]:
        for a, b in pairs.items():
            o[f"{a}.{k}"] = sd[f"{b}.{k}"]
        scale, shift = sd[f"norm_out.linear.{k}"].chunk(2, dim=0)
        o[f"final_layer.adaLN_modulation.1.{k}"] = torch.cat([shift, scale])
        for i in range(n_double):
            p, d = f"double_blocks.{i}.", f"transformer_blocks.{i}."
            for st, mod, q, kk, v, out, ff in [
                    ("img", "norm1", "to_q", "to_k", "to_v", "to_out.0", "ff"),
                    ("txt", "norm1_context", "add_q_proj", "add_k_proj", "add_v_proj",
                     "to_add_out", "ff_context")]:
                o[f"{p}{st}_mod.lin.{k}"] = sd[f"{d}{mod}.linear.{k}"]
                o[f"{p}{st}_attn.qkv.{k}"] = torch.cat(
                    [sd[f"{d}attn.{x}.{k}"] for x in (q, kk, v)])
                o[f"{p}{st}_attn.proj.{k}"] = sd[f"{d}attn.{out}.{k}"]
                o[f"{p}{st}_mlp.0.{k}"] = sd[f"{d}{ff}.net.0.proj.{k}"]
                o[f"{p}{st}_mlp.2.{k}"] = sd[f"{d}{ff}.net.2.{k}"]
        for i in range(n_single):
            p, d = f"single_blocks.{i}.", f"single_transformer_blocks.{i}."
            o[f"{p}modulation.lin.{k}"] = sd[f"{d}norm.linear.{k}"]
            o[f"{p}linear1.{k}"] = torch.cat(
                [sd[f"{d}attn.to_q.{k}"], sd[f"{d}attn.to_k.{k}"], sd[f"{d}attn.to_v.{k}"],
                 sd[f"{d}proj_mlp.{k}"]])
            o[f"{p}linear2.{k}"] = sd[f"{d}proj_out.{k}"]
    for i in range(n_double):
        p, d = f"double_blocks.{i}.", f"transformer_blocks.{i}.attn."
        o[p + "img_attn.norm.query_norm.scale"] = sd[d + "norm_q.weight"]
        o[p + "img_attn.norm.key_norm.scale"] = sd[d + "norm_k.weight"]
        o[p + "txt_attn.norm.query_norm.scale"] = sd[d + "norm_added_q.weight"]
        o[p + "txt_attn.norm.key_norm.scale"] = sd[d + "norm_added_k.weight"]
    for i in range(n_single):
        p, d = f"single_blocks.{i}.", f"single_transformer_blocks.{i}.attn."
        o[p + "norm.query_norm.scale"] = sd[d + "norm_q.weight"]
        o[p + "norm.key_norm.scale"] = sd[d + "norm_k.weight"]
    return o


def original_inverse(orig, like, inner, mlp):
    """diffusers' names again: every folder weight cut from its original
    tensor's rows as the converter cuts them (qkv in thirds, linear1 as
    inner, inner, inner, mlp; the final modulation's halves exchanged)."""
    back = {}
    for name, t in like.items():
        for src, rows in sources(name, inner, mlp):
            v = orig[src]
            if rows == "swap":
                a, b = v.chunk(2, dim=0)
                v = torch.cat([b, a])
            elif rows is not None:
                v = v[rows[0]:rows[0] + rows[1]]
            back[name] = v.reshape(t.shape).float()
    return back


def sources(name, inner, mlp):
    """The original tensor (and rows) of a diffusers FLUX.1 weight."""
    import re
    kind = name.rsplit(".", 1)[1]
    glob = {"time_text_embed.timestep_embedder.linear_1": "time_in.in_layer",
            "time_text_embed.timestep_embedder.linear_2": "time_in.out_layer",
            "time_text_embed.text_embedder.linear_1": "vector_in.in_layer",
            "time_text_embed.text_embedder.linear_2": "vector_in.out_layer",
            "context_embedder": "txt_in", "x_embedder": "img_in", "proj_out": "final_layer.linear"}
    module = name.rsplit(".", 1)[0]
    if module in glob:
        return [(f"{glob[module]}.{kind}", None)]
    if module == "norm_out.linear":
        return [(f"final_layer.adaLN_modulation.1.{kind}", "swap")]
    m = re.match(r"(transformer_blocks|single_transformer_blocks)\.(\d+)\.(.+)$", module)
    block, i, rest = m.group(1), m.group(2), m.group(3)
    if block == "transformer_blocks":
        p = f"double_blocks.{i}."
        table = {"norm1.linear": ("img_mod.lin", None), "norm1_context.linear": ("txt_mod.lin", None),
                 "attn.to_q": ("img_attn.qkv", 0), "attn.to_k": ("img_attn.qkv", 1),
                 "attn.to_v": ("img_attn.qkv", 2), "attn.add_q_proj": ("txt_attn.qkv", 0),
                 "attn.add_k_proj": ("txt_attn.qkv", 1), "attn.add_v_proj": ("txt_attn.qkv", 2),
                 "attn.to_out.0": ("img_attn.proj", None), "attn.to_add_out": ("txt_attn.proj", None),
                 "ff.net.0.proj": ("img_mlp.0", None), "ff.net.2": ("img_mlp.2", None),
                 "ff_context.net.0.proj": ("txt_mlp.0", None), "ff_context.net.2": ("txt_mlp.2", None)}
        norms = {"attn.norm_q": "img_attn.norm.query_norm.scale",
                 "attn.norm_k": "img_attn.norm.key_norm.scale",
                 "attn.norm_added_q": "txt_attn.norm.query_norm.scale",
                 "attn.norm_added_k": "txt_attn.norm.key_norm.scale"}
    else:
        p = f"single_blocks.{i}."
        table = {"norm.linear": ("modulation.lin", None), "attn.to_q": ("linear1", 0),
                 "attn.to_k": ("linear1", 1), "attn.to_v": ("linear1", 2),
                 "proj_mlp": ("linear1", 3), "proj_out": ("linear2", None)}
        norms = {"attn.norm_q": "norm.query_norm.scale", "attn.norm_k": "norm.key_norm.scale"}
    if rest in norms:
        return [(p + norms[rest], None)]
    tail, part = table[rest]
    rows = None if part is None else (inner * part, mlp if part == 3 else inner)
    return [(f"{p}{tail}.{kind}", rows)]


def write(path, tensors, quantize):
    w = gguf.GGUFWriter(path, "flux")
    for name, t in sorted(tensors.items()):
        x = t.float().numpy()
        if quantize and x.ndim == 2 and x.shape[1] % 32 == 0:
            w.add_tensor(name, quants.quantize(x, T.Q8_0), raw_dtype=T.Q8_0)
        elif quantize:
            w.add_tensor(name, x)
        else:  # the folder's bf16 values, bit for bit
            w.add_tensor(name, quants.quantize(x, T.BF16), raw_dtype=T.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    sd = load_file(SRC)
    n_double = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("transformer_blocks."))
    n_single = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("single_transformer_blocks."))
    o = original(sd, n_double, n_single)
    # The inverse checked: diffusers' row split of each fused tensor gives the folder's back.
    inner = sd["x_embedder.weight"].shape[0]
    mlp = sd["single_transformer_blocks.0.proj_mlp.weight"].shape[0]
    q, k, v, m = torch.split(o["single_blocks.0.linear1.weight"], (inner, inner, inner, mlp))
    assert torch.equal(k, sd["single_transformer_blocks.0.attn.to_k.weight"])
    assert torch.equal(m, sd["single_transformer_blocks.0.proj_mlp.weight"])
    used = sum(t.numel() for t in o.values())
    assert used == sum(t.numel() for t in sd.values()), (used, "every folder value placed once")
    os.makedirs(OUT, exist_ok=True)
    write(os.path.join(OUT, "flux_tiny_bf16.gguf"), o, False)
    write(os.path.join(OUT, "flux_tiny_q8_0.gguf"), o, True)
    print(len(o), "original tensors;", np.__version__)
    # The golden image: the Q8_0 file's values, dequantized by gguf-py, in the pipeline.
    reader = gguf.GGUFReader(os.path.join(OUT, "flux_tiny_q8_0.gguf"))
    deq = {t.name: torch.from_numpy(np.array(quants.dequantize(t.data, t.tensor_type),
                                             dtype=np.float32)).reshape(
                                                 [int(x) for x in reversed(t.shape)])
           for t in reader.tensors}
    from diffusers.quantizers.gguf.utils import GGUFParameter, dequantize_gguf_tensor
    by_diffusers = {}
    for t in reader.tensors:
        shape = [int(x) for x in reversed(t.shape)]
        if t.tensor_type == T.Q8_0:
            p = GGUFParameter(torch.from_numpy(np.array(t.data)), quant_type=t.tensor_type)
            by_diffusers[t.name] = dequantize_gguf_tensor(p).float().reshape(shape)
        else:
            by_diffusers[t.name] = deq[t.name]
    from make_lora import FAMILIES, load  # the tiny FLUX.1's request
    pipe = load("flux")
    image = FAMILIES["flux"]["image"]
    kw = {k: v for k, v in image.items() if k != "seed"}
    images = {}
    for key, weights in [("image", deq), ("diffusers_image", by_diffusers)]:
        pipe.transformer.load_state_dict(original_inverse(weights, sd, inner, mlp), strict=True)
        with torch.no_grad():
            images[key] = torch.from_numpy(
                pipe(**kw, generator=torch.Generator().manual_seed(image["seed"]),
                     output_type="np").images).contiguous()
    save_file({"model.diffusion_model." + k: v.contiguous() for k, v in o.items()},
              os.path.join(OUT, "flux_tiny_bf16.safetensors"))
    save_file(images,
              os.path.join(OUT, "flux_tiny_q8_0_image.safetensors"),
              metadata={"request": json.dumps(image), "gguf": "0.19.0",
                        "diffusers": diffusers.__version__, "torch": torch.__version__})


if __name__ == "__main__":
    main()
