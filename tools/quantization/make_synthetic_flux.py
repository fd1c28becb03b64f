#!/usr/bin/env python3
"""A synthetic full-size FLUX.1-dev for memory figures (issue 45): the real
shapes with random values, since the real files cannot be downloaded here.

    python3 tools/quantization/make_synthetic_flux.py OUT [--types q8_0,q4_k]

Writes
  OUT/folder/          a FLUX.1-dev diffusers folder without the
                       transformer's weights (its config only): CLIP-L,
                       T5-XXL (24 layers, d_model 4096) and the FLUX VAE at
                       their real sizes, random bf16 weights (torch's
                       initialisation for CLIP and the VAE; N(0, 0.02²) for
                       T5, written tensor by tensor in shards); the tiny
                       folder's tokenizers and scheduler.
  OUT/flux1-dev-synthetic-<TYPE>.gguf  the transformer in Black Forest Labs'
                       layout (19 double, 38 single blocks at width 3072),
                       as the community files store it: matrices in TYPE
                       (Q8_0: random int8 values with f16 scales 1/127 ·
                       0.02·3; Q4_K: random blocks with finite f16 scales;
                       matrices whose rows are not whole blocks in F16),
                       vectors in F32; written tensor by tensor.
Run xdit on them: xdit generate --model OUT/folder --transformer OUT/....gguf
"""
import argparse
import json
import os
import shutil

import numpy as np

D, MLP, DOUBLE, SINGLE = 3072, 12288, 19, 38


def original_shapes():
    s = {"img_in.weight": (D, 64), "img_in.bias": (D,), "txt_in.weight": (D, 4096),
         "txt_in.bias": (D,), "final_layer.linear.weight": (64, D),
         "final_layer.linear.bias": (64,), "final_layer.adaLN_modulation.1.weight": (2 * D, D),
         "final_layer.adaLN_modulation.1.bias": (2 * D,)}
    for p, i in [("time_in", 256), ("vector_in", 768), ("guidance_in", 256)]:
        s[f"{p}.in_layer.weight"], s[f"{p}.in_layer.bias"] = (D, i), (D,)
        s[f"{p}.out_layer.weight"], s[f"{p}.out_layer.bias"] = (D, D), (D,)
    for b in range(DOUBLE):
        p = f"double_blocks.{b}."
        for st in ("img", "txt"):
            s[p + f"{st}_mod.lin.weight"], s[p + f"{st}_mod.lin.bias"] = (6 * D, D), (6 * D,)
            s[p + f"{st}_attn.qkv.weight"], s[p + f"{st}_attn.qkv.bias"] = (3 * D, D), (3 * D,)
            s[p + f"{st}_attn.proj.weight"], s[p + f"{st}_attn.proj.bias"] = (D, D), (D,)
            s[p + f"{st}_mlp.0.weight"], s[p + f"{st}_mlp.0.bias"] = (MLP, D), (MLP,)
            s[p + f"{st}_mlp.2.weight"], s[p + f"{st}_mlp.2.bias"] = (D, MLP), (D,)
            s[p + f"{st}_attn.norm.query_norm.scale"] = (128,)
            s[p + f"{st}_attn.norm.key_norm.scale"] = (128,)
    for b in range(SINGLE):
        p = f"single_blocks.{b}."
        s[p + "modulation.lin.weight"], s[p + "modulation.lin.bias"] = (3 * D, D), (3 * D,)
        s[p + "linear1.weight"], s[p + "linear1.bias"] = (3 * D + MLP, D), (3 * D + MLP,)
        s[p + "linear2.weight"], s[p + "linear2.bias"] = (D, D + MLP), (D,)
        s[p + "norm.query_norm.scale"] = (128,)
        s[p + "norm.key_norm.scale"] = (128,)
    return s


def random_blocks(rng, rows, cols, kind):
    """Random bytes of `rows` rows of whole blocks with finite f16 scales."""
    import gguf
    T = gguf.GGMLQuantizationType
    t = {"q8_0": T.Q8_0, "q4_k": T.Q4_K}[kind]
    per, size = gguf.GGML_QUANT_SIZES[t]
    blocks = rows * (cols // per)
    b = rng.integers(0, 256, size=(blocks, size), dtype=np.uint8)
    scale = np.full((blocks, 1), np.float16(0.06 / 127)).view(np.uint8)
    b[:, 0:2] = scale  # d (Q8_0, Q4_K)
    if kind == "q4_k":
        b[:, 2:4] = np.full((blocks, 1), np.float16(0.001)).view(np.uint8)  # dmin
    return t, b.reshape(rows, -1)


def write_gguf(path, kind, seed=0):
    import gguf
    rng = np.random.default_rng(seed)
    shapes = original_shapes()
    w = gguf.GGUFWriter(path, "flux")
    plan = []
    for name, shape in sorted(shapes.items()):
        block = {"q8_0": 32, "q4_k": 256}[kind]
        if len(shape) == 2 and shape[1] % block == 0:
            t, _ = random_blocks(np.random.default_rng(0), 1, shape[1], kind)
            per, size = gguf.GGML_QUANT_SIZES[t]
            nbytes = shape[0] * shape[1] // per * size
            w.add_tensor_info(name, (shape[0], shape[1] // per * size), np.dtype(np.uint8), nbytes,
                              raw_dtype=t)
            plan.append((name, shape, "blocks"))
        elif len(shape) == 2:
            w.add_tensor_info(name, shape, np.dtype(np.float16), shape[0] * shape[1] * 2)
            plan.append((name, shape, "f16"))
        else:
            w.add_tensor_info(name, shape, np.dtype(np.float32), shape[0] * 4)
            plan.append((name, shape, "f32"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, shape, how in plan:
        if how == "blocks":
            _, data = random_blocks(rng, shape[0], shape[1], kind)
        elif how == "f16":
            data = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)
        else:
            data = (rng.standard_normal(shape, dtype=np.float32) * 0.02 +
                    (1.0 if name.endswith(".scale") else 0.0)).astype(np.float32)
        w.write_tensor_data(data)
    w.close()


def write_folder(out, tiny):
    import torch
    from safetensors.torch import save_file
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel
    from diffusers import AutoencoderKL
    os.makedirs(out, exist_ok=True)
    for c in ("tokenizer", "tokenizer_2", "scheduler"):
        shutil.copytree(os.path.join(tiny, c), os.path.join(out, c), dirs_exist_ok=True)
    shutil.copy(os.path.join(tiny, "model_index.json"), out)
    os.makedirs(os.path.join(out, "transformer"), exist_ok=True)
    with open(os.path.join(out, "transformer", "config.json"), "w") as f:
        json.dump({"_class_name": "FluxTransformer2DModel", "attention_head_dim": 128,
                   "axes_dims_rope": [16, 56, 56], "guidance_embeds": True, "in_channels": 64,
                   "joint_attention_dim": 4096, "num_attention_heads": 24, "num_layers": DOUBLE,
                   "num_single_layers": SINGLE, "out_channels": None, "patch_size": 1,
                   "pooled_projection_dim": 768}, f, indent=1)
    torch.manual_seed(0)
    tiny_clip = json.load(open(os.path.join(tiny, "text_encoder", "config.json")))
    clip = CLIPTextModel(CLIPTextConfig(
        vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
        num_attention_heads=12, max_position_embeddings=77, projection_dim=768,
        hidden_act="quick_gelu", bos_token_id=tiny_clip["bos_token_id"],
        eos_token_id=tiny_clip["eos_token_id"], pad_token_id=tiny_clip["pad_token_id"]))
    clip.to(torch.bfloat16).save_pretrained(os.path.join(out, "text_encoder"))
    del clip
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=16,
                        block_out_channels=(128, 256, 512, 512), layers_per_block=2,
                        down_block_types=("DownEncoderBlock2D",) * 4,
                        up_block_types=("UpDecoderBlock2D",) * 4, norm_num_groups=32,
                        scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False,
                        use_post_quant_conv=False, sample_size=1024)
    vae.to(torch.bfloat16).save_pretrained(os.path.join(out, "vae"))
    del vae
    cfg = T5Config(vocab_size=32128, d_model=4096, d_ff=10240, d_kv=64, num_heads=64,
                   num_layers=24, feed_forward_proj="gated-gelu", dense_act_fn="gelu_new",
                   is_gated_act=True, tie_word_embeddings=False)
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in T5EncoderModel(cfg).state_dict().items()}
    shapes.pop("encoder.embed_tokens.weight", None)  # tied to shared.weight
    d = os.path.join(out, "text_encoder_2")
    os.makedirs(d, exist_ok=True)
    cfg.save_pretrained(d)
    shard, size, index, n = {}, 0, {}, 0
    g = torch.Generator().manual_seed(1)

    def flush():
        nonlocal shard, size, n
        name = f"model-{n:05d}.safetensors"
        save_file(shard, os.path.join(d, name), metadata={"format": "pt"})
        for k in shard:
            index[k] = name
        shard, size, n = {}, 0, n + 1

    for k, shape in sorted(shapes.items()):
        t = (torch.randn(shape, generator=g) * (0.02 if len(shape) == 2 else 0.0) +
             (1.0 if len(shape) == 1 else 0.0)).to(torch.bfloat16)
        shard[k] = t
        size += t.numel() * 2
        if size > 2 << 30:
            flush()
    if shard:
        flush()
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": index}, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--types", default="q8_0,q4_k")
    ap.add_argument("--tiny", default="models/flux-dev-tiny")
    ap.add_argument("--no-folder", action="store_true")
    a = ap.parse_args()
    if not a.no_folder:
        write_folder(os.path.join(a.out, "folder"), a.tiny)
    for kind in a.types.split(","):
        write_gguf(os.path.join(a.out, f"flux1-dev-synthetic-{kind}.gguf"), kind)


if __name__ == "__main__":
    main()
