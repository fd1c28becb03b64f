#!/usr/bin/env python3
"""LoRA goldens (issue 44): random LoRAs for the tiny FLUX.1 [schnell] and
SD3 made with peft, and what diffusers makes of them.

    python3 tools/goldens/make_lora.py [FAMILY ...]   # from the repository root, after
                                                      # make_flux.py, make_sd3.py and the
                                                      # Z-Image / Qwen-Image pipeline scripts

Writes tests/data/lora/:
  flux_a.safetensors  peft LoraConfig(r=4, lora_alpha=8) on the attention's
                      to_q/to_k/to_v/to_out.0 and the single blocks'
                      proj_mlp, random A and B (init_lora_weights=False),
                      saved by FluxPipeline.save_lora_weights with its
                      adapter metadata (alpha 8 ≠ rank 4);
  flux_b.safetensors  r=2 on to_q and ff.net.0.proj / ff.net.2, saved without
                      metadata (diffusers takes alpha = rank);
  flux_merged.safetensors  diffusers' own merge: load_lora_weights of both,
                      set_adapters(["a", "b"], [0.7, -0.4]), fuse_lora; every
                      weight either LoRA touches, after the merge; metadata:
                      the versions and the scales.
  flux_merged_bf16.safetensors  the same merge with the pipeline in bf16 (peft
                      forms the delta in f32, rounds it to bf16, then adds).
  flux_images.safetensors  FluxPipeline images (output_type "np", f32, the
                      adapters unfused as load_lora_weights leaves them) of
                      IMAGE: `one` with LoRA a alone at 1, `two` with both at
                      0.7 / -0.4 (set_adapters), `none` without.
  sd3_a, sd3_b, sd3_merged, sd3_images: the same for the tiny SD3 (LoRA a on
                      the image and text streams' projections, b on to_q and
                      the MLP; CFG with a negative prompt), and sd35_* for the
                      tiny SD3.5 (its dual-attention blocks' attn2 included).
  zimage_*, qwen_image_*: the same for the tiny Z-Image (the refiners' blocks
                      and the SwiGLU's w1 / w2 / w3 too; no CFG) and Qwen-Image
                      (both streams' projections and MLPs; true CFG at 4).
  {flux,sd3}_te.safetensors  transformer + CLIP text-encoder LoRA (text_encoder;
                      SD3 also text_encoder_2), r 4, alpha 4; `te` in the images
                      file: it alone at 0.8.
(The peft files' metadata lists target_modules in set order: a rerun may
reorder that list; the tensors are the same.)
"""
import json
import os

import diffusers
import peft
import torch
from diffusers import FluxPipeline, QwenImagePipeline, StableDiffusion3Pipeline, ZImagePipeline
from peft import LoraConfig
from peft.utils import get_peft_model_state_dict
from safetensors.torch import save_file

OUT = "tests/data/lora"
SCALES = {"a": 0.7, "b": -0.4}
FAMILIES = {
    "flux": dict(
        pipeline=FluxPipeline, model="models/flux-schnell-tiny",
        image=dict(prompt="a red fox in the snow", height=48, width=80, num_inference_steps=4,
                   guidance_scale=0.0, max_sequence_length=32, seed=0),
        configs={
            "a": (LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                             target_modules=["to_q", "to_k", "to_v", "to_out.0", "proj_mlp"]),
                  True),
            "b": (LoraConfig(r=2, lora_alpha=2, init_lora_weights=False,
                             target_modules=["to_q", "ff.net.0.proj", "ff.net.2"]), False)}),
    "sd3": dict(
        pipeline=StableDiffusion3Pipeline, model="models/sd3-tiny",
        image=dict(prompt="a red fox in the snow", negative_prompt="blurry", height=48, width=64,
                   num_inference_steps=4, guidance_scale=5.0, max_sequence_length=32, seed=1),
        configs={
            "a": (LoraConfig(r=4, lora_alpha=6, init_lora_weights=False,
                             target_modules=["to_q", "to_k", "to_v", "to_out.0", "add_q_proj",
                                             "add_v_proj", "to_add_out"]), True),
            "b": (LoraConfig(r=3, lora_alpha=3, init_lora_weights=False,
                             target_modules=["to_q", "ff.net.0.proj", "ff_context.net.2"]),
                  False)}),
    "sd35": dict(
        pipeline=StableDiffusion3Pipeline, model="models/sd35-tiny",
        image=dict(prompt="Two cats, sitting on a mat!", negative_prompt="blurry", height=40,
                   width=56, num_inference_steps=4, guidance_scale=4.0, max_sequence_length=24,
                   seed=5),
        configs={  # to_q / to_k / to_out.0 match the dual-attention blocks' attn2 too
            "a": (LoraConfig(r=4, lora_alpha=2, init_lora_weights=False,
                             target_modules=["to_q", "to_k", "to_out.0", "add_k_proj"]), True),
            "b": (LoraConfig(r=2, lora_alpha=2, init_lora_weights=False,
                             target_modules=["to_v", "ff.net.2"]), False)}),
    "zimage": dict(
        pipeline=ZImagePipeline, model="models/zimage-tiny",
        image=dict(prompt="a red fox in the snow", height=32, width=48, num_inference_steps=3,
                   guidance_scale=0.0, max_sequence_length=24, seed=2),
        configs={  # the refiners' blocks too; w1 / w3: the fused SwiGLU input
            "a": (LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                             target_modules=["to_q", "to_k", "to_v", "to_out.0", "w1"]), True),
            "b": (LoraConfig(r=2, lora_alpha=2, init_lora_weights=False,
                             target_modules=["to_q", "w2", "w3"]), False)}),
    "qwen_image": dict(
        pipeline=QwenImagePipeline, model="models/qwen-image-tiny",
        image=dict(prompt="a red fox in the snow", negative_prompt="blurry", height=32, width=48,
                   num_inference_steps=3, max_sequence_length=24, seed=3),
        configs={
            "a": (LoraConfig(r=4, lora_alpha=6, init_lora_weights=False,
                             target_modules=["to_q", "to_k", "to_v", "to_out.0", "add_q_proj",
                                             "add_k_proj", "add_v_proj", "to_add_out"]), True),
            "b": (LoraConfig(r=2, lora_alpha=2, init_lora_weights=False,
                             target_modules=["to_q", "img_mlp.net.0.proj", "txt_mlp.net.2"]),
                  False)}),
}


def load(family):
    f = FAMILIES[family]
    return f["pipeline"].from_pretrained(f["model"], torch_dtype=torch.float32)


def make_file(family, name, seed):
    """A LoRA of random A and B, saved as diffusers saves one."""
    torch.manual_seed(seed)
    cfg, with_metadata = FAMILIES[family]["configs"][name]
    t = load(family).transformer
    t.add_adapter(cfg, adapter_name=name)
    with torch.no_grad():  # visible: B of the size of A (peft's False init is small)
        for n, p in t.named_parameters():
            if f"lora_B.{name}" in n:
                p.normal_(0, 0.2)
    sd = get_peft_model_state_dict(t, adapter_name=name)
    path = os.path.join(OUT, f"{family}_{name}")
    FAMILIES[family]["pipeline"].save_lora_weights(
        path, transformer_lora_layers=sd,
        transformer_lora_adapter_metadata=cfg.to_dict() if with_metadata else None)
    os.replace(os.path.join(path, "pytorch_lora_weights.safetensors"), path + ".safetensors")
    os.rmdir(path)
    return {k.removesuffix(".lora_A.weight") for k in sd if k.endswith(".lora_A.weight")}


def make_text_file(family, seed):
    """A LoRA on the transformer and the CLIP text encoders diffusers adapts."""
    torch.manual_seed(seed)
    pipe = load(family)
    layers = {}
    cfg = LoraConfig(r=4, lora_alpha=4, init_lora_weights=False, target_modules=["to_q", "to_v"])
    pipe.transformer.add_adapter(cfg, adapter_name="te")
    layers["transformer_lora_layers"] = get_peft_model_state_dict(pipe.transformer,
                                                                  adapter_name="te")
    encoders = ["text_encoder"] + (["text_encoder_2"] if family != "flux" else [])
    for name in encoders:
        enc = getattr(pipe, name)
        enc.add_adapter(LoraConfig(r=4, lora_alpha=4, init_lora_weights=False,
                                   target_modules=["q_proj", "v_proj", "fc1"]), adapter_name="te")
        with torch.no_grad():
            for n, p in enc.named_parameters():
                if "lora_B.te" in n:
                    p.normal_(0, 0.3)
        layers[f"{name}_lora_layers"] = get_peft_model_state_dict(enc, adapter_name="te")
    path = os.path.join(OUT, f"{family}_te")
    FAMILIES[family]["pipeline"].save_lora_weights(path, **layers)
    os.replace(os.path.join(path, "pytorch_lora_weights.safetensors"), path + ".safetensors")
    os.rmdir(path)


def fused(family, modules, dtype):
    """diffusers' own merge: load_lora_weights of both, set_adapters at
    SCALES, fuse_lora; the weights of `modules` after it."""
    f = FAMILIES[family]
    pipe = f["pipeline"].from_pretrained(f["model"], torch_dtype=dtype)
    for name in SCALES:
        pipe.load_lora_weights(os.path.join(OUT, f"{family}_{name}.safetensors"),
                               adapter_name=name)
    pipe.set_adapters(list(SCALES), list(SCALES.values()))
    pipe.fuse_lora(adapter_names=list(SCALES))
    state = pipe.transformer.state_dict()
    return {f"{m}.weight": state[f"{m}.base_layer.weight"].contiguous()
            if f"{m}.base_layer.weight" in state else state[f"{m}.weight"].contiguous()
            for m in sorted(modules)}


def make(family):
    modules = make_file(family, "a", 1) | make_file(family, "b", 2)
    if family in ("flux", "sd3"):
        make_text_file(family, 3)
    meta = {"torch": torch.__version__, "diffusers": diffusers.__version__,
            "peft": peft.__version__, "scale_a": str(SCALES["a"]), "scale_b": str(SCALES["b"])}
    merged = fused(family, modules, torch.float32)
    save_file(merged, os.path.join(OUT, f"{family}_merged.safetensors"), metadata=meta)
    print(family, len(merged), "merged weights")
    if family == "flux":  # the same merge in bf16 (peft: A, B and the delta rounded, then added)
        save_file(fused(family, modules, torch.bfloat16),
                  os.path.join(OUT, f"{family}_merged_bf16.safetensors"), metadata=meta)
    image = FAMILIES[family]["image"]
    images = {}
    cases = [("none", {}), ("one", {"a": 1.0}), ("two", SCALES)]
    if family in ("flux", "sd3"):
        cases.append(("te", {"te": 0.8}))
    for case, adapters in cases:
        pipe = load(family)
        for name in adapters:
            pipe.load_lora_weights(os.path.join(OUT, f"{family}_{name}.safetensors"),
                                   adapter_name=name)
        if adapters:
            pipe.set_adapters(list(adapters), list(adapters.values()))
        kw = {k: v for k, v in image.items() if k != "seed"}
        with torch.no_grad():
            images[case] = torch.from_numpy(pipe(
                **kw, generator=torch.Generator().manual_seed(image["seed"]),
                output_type="np").images).contiguous()
    save_file(images, os.path.join(OUT, f"{family}_images.safetensors"),
              metadata=dict(meta, request=json.dumps(image)))


if __name__ == "__main__":
    import sys
    os.makedirs(OUT, exist_ok=True)
    for fam in sys.argv[1:] or FAMILIES:
        make(fam)
