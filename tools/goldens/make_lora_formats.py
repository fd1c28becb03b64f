#!/usr/bin/env python3
"""LoRA format goldens (issue 44): FLUX.1 LoRAs in the community formats
diffusers reads — kohya / sd-scripts, Black Forest Labs' names as ComfyUI
writes them, XLabs' — and what diffusers makes of them.

    python3 tools/goldens/make_lora_formats.py   # from the repository root, after
                                                 # make_flux.py and make_lora.py

Writes tests/data/lora/:
  flux_kohya.safetensors  random lora_down / lora_up of sd-scripts' names for
                      the tiny FLUX.1 [schnell]: every double-block linear
                      (img/txt attn qkv — fused, split by diffusers over q, k,
                      v —, proj, mlp_0, mlp_2, mod_lin), the single blocks'
                      linear2 and modulation_lin, CLIP's fc1 / fc2 (lora_te1_);
                      some with an `.alpha` ≠ rank, some without.
                      (Not linear1: diffusers splits it by FLUX.1's widths,
                      3072 · [1, 1, 1, 4], and asserts on another width —
                      flux_kohya_real covers it. Not the embedders and final
                      layer: diffusers 0.42 converts them without the
                      "transformer." prefix and so never loads them.)
  flux_bfl.safetensors  the same kind of file under BFL's names
                      (`diffusion_model.double_blocks.0.img_attn.qkv
                      .lora_down.weight`, `text_encoders.clip_l.transformer.…`)
                      and an all-zero T5 adapter diffusers drops.
  flux_xlabs.safetensors  XLabs' processors (qkv_lora1/2, proj_lora1/2 in the
                      double blocks, qkv_lora / proj_lora in the single ones).
  flux_t5.safetensors  peft adapters on FLUX.1's T5 encoder (text_encoder_2:
                      q, v, o, wi_0, wo; r 4) and the transformer's to_k, in
                      diffusers' key names (diffusers' loaders do not adapt
                      T5: the golden runs the pipeline with the adapters peft
                      added); flux_t5_kohya.safetensors: its T5 part in
                      sd-scripts' names (lora_te3_…, alpha = rank), and
                      flux_t5_transformer.safetensors its transformer part.
  flux_formats_images.safetensors  FluxPipeline images (f32, output_type "np")
                      of make_lora.py's request: `kohya` at 0.8, `bfl` at 1,
                      `xlabs` at 0.6, `kohya_a`: kohya 0.8 with flux_a 0.5;
                      `t5`: flux_t5's adapters at 1.
  flux_kohya_real.safetensors  sd-scripts' names at FLUX.1 [dev]'s real widths
                      (rank 2–4, bf16): single block 0's linear1 with a
                      block-sparse B (diffusers' "sparse" split), double
                      block 0's img qkv, the final layer (B's shift | scale
                      halves; an alpha ≠ rank), img_in, time_in.
  flux_kohya_real_converted.safetensors  diffusers' own conversion of it
                      (`_convert_kohya_flux_lora_to_diffusers`, f32): the
                      lora_A / lora_B per diffusers module, alpha baked in
                      (the final layer's too: the converter leaves it as a
                      TODO, sd-scripts applies it).
"""
import json
import os
import re

import diffusers
import peft
import torch
from diffusers import FluxPipeline
from diffusers.loaders.lora_conversion_utils import _convert_kohya_flux_lora_to_diffusers
from peft import LoraConfig
from peft.utils import get_peft_model_state_dict
from safetensors.torch import save_file

from make_lora import FAMILIES, OUT

MODEL = "models/flux-schnell-tiny"
DOUBLE = {  # sd-scripts' name → diffusers' module(s) in transformer_blocks.N
    "img_attn_qkv": ["attn.to_q", "attn.to_k", "attn.to_v"], "img_attn_proj": ["attn.to_out.0"],
    "img_mlp_0": ["ff.net.0.proj"], "img_mlp_2": ["ff.net.2"], "img_mod_lin": ["norm1.linear"],
    "txt_attn_qkv": ["attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"],
    "txt_attn_proj": ["attn.to_add_out"], "txt_mlp_0": ["ff_context.net.0.proj"],
    "txt_mlp_2": ["ff_context.net.2"], "txt_mod_lin": ["norm1_context.linear"]}
SINGLE = {"linear2": ["proj_out"], "modulation_lin": ["norm.linear"]}
# CLIP's MLP only: diffusers 0.42 hands kohya's attention adapters to
# transformers 5 as `self_attn.to_q_lora.down.weight`, which CLIPTextModel
# reports unexpected and drops; xdit applies them to q/k/v/out_proj.
CLIP = {"mlp_fc1": "mlp.fc1", "mlp_fc2": "mlp.fc2"}


def load():
    return FluxPipeline.from_pretrained(MODEL, torch_dtype=torch.float32)


def shape(module):
    return module.weight.shape


def pair(gen, rank, out, inp, b_std=0.2):
    return (torch.randn(rank, inp, generator=gen) * 0.3,
            torch.randn(out, rank, generator=gen) * b_std)


def kohya_like(pipe, seed):
    """{sd-scripts base name: (down, up, alpha or None)} for the tiny model."""
    gen = torch.Generator().manual_seed(seed)
    t, enc = pipe.transformer, pipe.text_encoder
    out = {}
    i = 0
    for b in range(len(t.transformer_blocks)):
        for name, mods in DOUBLE.items():
            w = [shape(t.get_submodule(f"transformer_blocks.{b}.{m}")) for m in mods]
            rank = 2 + i % 3
            down, up = pair(gen, rank, sum(s[0] for s in w), w[0][1])
            out[f"double_blocks_{b}_{name}"] = (down, up, [None, 1.0, 6.0][i % 3])
            i += 1
    for b in range(len(t.single_transformer_blocks)):
        for name, mods in SINGLE.items():
            s = shape(t.get_submodule(f"single_transformer_blocks.{b}.{mods[0]}"))
            down, up = pair(gen, 3, s[0], s[1])
            out[f"single_blocks_{b}_{name}"] = (down, up, [None, 2.0][b % 2])
    te = {}
    for layer in range(len(enc.encoder.layers)):  # transformers 5: no "text_model."
        for name, mod in CLIP.items():
            s = shape(enc.get_submodule(f"encoder.layers.{layer}.{mod}"))
            down, up = pair(gen, 4, s[0], s[1], 0.3)
            te[f"text_model_encoder_layers_{layer}_{name}"] = (down, up, [None, 2.0][layer % 2])
    return out, te


def kohya_file(pipe, seed):
    unet, te = kohya_like(pipe, seed)
    sd = {}
    for prefix, parts in (("lora_unet_", unet), ("lora_te1_", te)):
        for base, (down, up, alpha) in parts.items():
            sd[f"{prefix}{base}.lora_down.weight"] = down
            sd[f"{prefix}{base}.lora_up.weight"] = up
            if alpha is not None:
                sd[f"{prefix}{base}.alpha"] = torch.tensor(alpha)
    return sd


def bfl_name(base):  # "double_blocks_0_img_attn_qkv" → "double_blocks.0.img_attn.qkv"
    m = re.match(r"(double|single)_blocks_(\d+)_(.+)", base)
    rest = {"img_mlp_0": "img_mlp.0", "img_mlp_2": "img_mlp.2", "txt_mlp_0": "txt_mlp.0",
            "txt_mlp_2": "txt_mlp.2", "img_mod_lin": "img_mod.lin", "txt_mod_lin": "txt_mod.lin",
            "modulation_lin": "modulation.lin"}.get(m[3], m[3].replace("_attn_", "_attn."))
    return f"{m[1]}_blocks.{m[2]}.{rest}"


def bfl_file(pipe, seed):
    unet, te = kohya_like(pipe, seed)
    sd = {}
    for base, (down, up, alpha) in unet.items():
        key = "diffusion_model." + bfl_name(base)
        sd[f"{key}.lora_down.weight"], sd[f"{key}.lora_up.weight"] = down, up
        if alpha is not None:
            sd[f"{key}.alpha"] = torch.tensor(alpha)
    for base, (down, up, alpha) in te.items():
        m = re.match(r"text_model_encoder_layers_(\d+)_(.+)", base)
        key = (f"text_encoders.clip_l.transformer.text_model.encoder.layers.{m[1]}."
               + CLIP[m[2]])
        sd[f"{key}.lora_down.weight"], sd[f"{key}.lora_up.weight"] = down, up
        if alpha is not None:
            sd[f"{key}.alpha"] = torch.tensor(alpha)
    t5 = "text_encoders.t5xxl.transformer.encoder.block.0.layer.0.SelfAttention.q"
    sd[f"{t5}.lora_down.weight"] = torch.zeros(2, 32)
    sd[f"{t5}.lora_up.weight"] = torch.zeros(32, 2)
    return sd


def xlabs_file(pipe, seed):
    gen = torch.Generator().manual_seed(seed)
    t = pipe.transformer
    inner = shape(t.transformer_blocks[0].attn.to_q)[0]
    sd = {}
    for b in range(len(t.transformer_blocks)):
        for name, (o, i) in {"qkv_lora1": (3 * inner, inner), "proj_lora1": (inner, inner),
                             "qkv_lora2": (3 * inner, inner), "proj_lora2": (inner, inner)}.items():
            sd[f"double_blocks.{b}.processor.{name}.down.weight"], \
                sd[f"double_blocks.{b}.processor.{name}.up.weight"] = pair(gen, 4, o, i)
    for b in range(len(t.single_transformer_blocks)):
        proj = shape(t.single_transformer_blocks[b].proj_out)
        for name, (o, i) in {"qkv_lora": (3 * inner, inner), "proj_lora": tuple(proj)}.items():
            sd[f"single_blocks.{b}.processor.{name}.down.weight"], \
                sd[f"single_blocks.{b}.processor.{name}.up.weight"] = pair(gen, 2, o, i)
    return sd


def t5_files(seed):
    """FLUX.1's T5 encoder (text_encoder_2) adapted by peft — which diffusers'
    loaders do not do — with a transformer part: the adapters in diffusers'
    key names and the T5 part in sd-scripts' (lora_te3_)."""
    torch.manual_seed(seed)
    pipe = load()
    cfg = LoraConfig(r=4, lora_alpha=4, init_lora_weights=False,
                     target_modules=["q", "v", "o", "wi_0", "wo"])
    pipe.text_encoder_2.add_adapter(cfg, adapter_name="t5")
    with torch.no_grad():
        for n, p in pipe.text_encoder_2.named_parameters():
            if "lora_B.t5" in n:
                p.normal_(0, 0.3)
    t5 = get_peft_model_state_dict(pipe.text_encoder_2, adapter_name="t5")
    pipe.transformer.add_adapter(LoraConfig(r=2, lora_alpha=2, init_lora_weights=False,
                                            target_modules=["to_k"]), adapter_name="t5")
    tr = get_peft_model_state_dict(pipe.transformer, adapter_name="t5")
    sd = {f"text_encoder_2.{k}": v for k, v in t5.items()}
    sd.update({f"transformer.{k}": v for k, v in tr.items()})
    kohya = {}
    for k, v in t5.items():
        module, kind = k.rsplit(".lora_", 1)
        base = "lora_te3_" + module.replace(".", "_")
        kohya[base + (".lora_down.weight" if kind.startswith("A") else ".lora_up.weight")] = v
        kohya[base + ".alpha"] = torch.tensor(4.0)
    return pipe, sd, kohya


def real_file(seed):
    """sd-scripts' names at FLUX.1's real widths (the converter needs no model)."""
    gen = torch.Generator().manual_seed(seed)
    sd = {}
    d, mlp = 3072, 12288
    down, up = pair(gen, 4, 3 * d + mlp, d)
    mask = torch.zeros_like(up)  # block-sparse: part j uses rank j only
    rows = 0
    for j, n in enumerate([d, d, d, mlp]):
        mask[rows:rows + n, j] = 1
        rows += n
    sd.update({"lora_unet_single_blocks_0_linear1.lora_down.weight": down,
               "lora_unet_single_blocks_0_linear1.lora_up.weight": up * mask,
               "lora_unet_single_blocks_0_linear1.alpha": torch.tensor(2.0)})
    for base, (o, i, rank, alpha) in {
            "double_blocks_0_img_attn_qkv": (3 * d, d, 2, 1.0),
            "final_layer_adaLN_modulation_1": (2 * d, d, 2, 8.0),
            "final_layer_linear": (64, d, 2, None),
            "img_in": (d, 64, 2, 3.0),
            "time_in_in_layer": (d, 256, 3, None)}.items():
        sd[f"lora_unet_{base}.lora_down.weight"], sd[f"lora_unet_{base}.lora_up.weight"] = \
            pair(gen, rank, o, i)
        if alpha is not None:
            sd[f"lora_unet_{base}.alpha"] = torch.tensor(alpha)
    return {k: v.to(torch.bfloat16).contiguous() for k, v in sd.items()}


def meta():
    return {"torch": torch.__version__, "diffusers": diffusers.__version__,
            "peft": peft.__version__}


def main():
    pipe = load()
    files = {"kohya": kohya_file(pipe, 11), "bfl": bfl_file(pipe, 12), "xlabs": xlabs_file(pipe, 13)}
    for name, sd in files.items():
        save_file({k: v.contiguous() for k, v in sd.items()},
                  os.path.join(OUT, f"flux_{name}.safetensors"))
    real = real_file(14)
    save_file(real, os.path.join(OUT, "flux_kohya_real.safetensors"), metadata=meta())
    converted = _convert_kohya_flux_lora_to_diffusers({k: v.float() for k, v in real.items()})
    # The converter's "TODO: alphas" for the final layer: alpha / rank into B.
    for base, module in {"final_layer_adaLN_modulation_1": "norm_out.linear",
                         "final_layer_linear": "proj_out"}.items():
        alpha = real.get(f"lora_unet_{base}.alpha")
        up = f"{module}.lora_B.weight"  # (converted without "transformer.")
        if alpha is not None and up in converted:
            rank = real[f"lora_unet_{base}.lora_down.weight"].shape[0]
            converted[up] = converted[up] * (alpha.float().item() / rank)
    save_file({k: v.float().clone().contiguous() for k, v in converted.items()},
              os.path.join(OUT, "flux_kohya_real_converted.safetensors"), metadata=meta())
    print(len(converted), "converted tensors:", sorted(converted)[:4], "…")

    image = FAMILIES["flux"]["image"]
    cases = {"kohya": {"kohya": 0.8}, "bfl": {"bfl": 1.0}, "xlabs": {"xlabs": 0.6},
             "kohya_a": {"kohya": 0.8, "a": 0.5}}
    images = {}
    for case, adapters in cases.items():
        pipe = load()
        for name in adapters:
            pipe.load_lora_weights(os.path.join(OUT, f"flux_{name}.safetensors"),
                                   adapter_name=name)
        pipe.set_adapters(list(adapters), list(adapters.values()))
        print(case, "CLIP adapted:", sum("lora_A" in n for n, _ in pipe.text_encoder.named_modules()),
              "transformer:", sum("lora_A" in n for n, _ in pipe.transformer.named_modules()))
        kw = {k: v for k, v in image.items() if k != "seed"}
        with torch.no_grad():
            images[case] = torch.from_numpy(pipe(
                **kw, generator=torch.Generator().manual_seed(image["seed"]),
                output_type="np").images).contiguous()
    pipe, t5, kohya = t5_files(15)  # the adapters active as peft added them (scale 1)
    save_file({k: v.contiguous() for k, v in t5.items()}, os.path.join(OUT, "flux_t5.safetensors"))
    save_file({k: v.contiguous() for k, v in kohya.items()},
              os.path.join(OUT, "flux_t5_kohya.safetensors"))
    save_file({k: v.contiguous() for k, v in t5.items() if k.startswith("transformer.")},
              os.path.join(OUT, "flux_t5_transformer.safetensors"))
    kw = {k: v for k, v in image.items() if k != "seed"}
    with torch.no_grad():
        images["t5"] = torch.from_numpy(pipe(
            **kw, generator=torch.Generator().manual_seed(image["seed"]),
            output_type="np").images).contiguous()
    save_file(images, os.path.join(OUT, "flux_formats_images.safetensors"),
              metadata=dict(meta(), request=json.dumps(image), cases=json.dumps(cases)))


if __name__ == "__main__":
    main()
