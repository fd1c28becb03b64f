#!/usr/bin/env python3
"""First-Block-Cache goldens: whole diffusers pipelines on the tiny models of
models/ with diffusers' own FirstBlockCacheConfig hooks, prompt to image.

    python3 tools/goldens/make_caches.py   # from the repository root, after
                                           # make_pixart.py, make_flux.py, make_sd3.py

FLUX.1 (schnell, dev with true CFG) runs as diffusers ships it:
`transformer.enable_cache(FirstBlockCacheConfig(threshold))`, and FluxPipeline
calls the transformer in the contexts "cond" and "uncond" (separate states,
separate decisions). diffusers' PixArt and SD3 transformers have no
`enable_cache`, and their pipelines set no context; the rule xdit defines for
them is diffusers' hooks applied with `apply_first_block_cache` and every call
in one context "cond_uncond" (the batched [uncond, cond] pair decides once, as
diffusers' batched-CFG pipelines do). SD3's last block returns no text stream
(context_pre_only), which diffusers' tail hook cannot subtract: here the last
block hands its text input through unchanged, which the SD3 output never
reads, so the image is diffusers' rule with that crash removed.

Each case's threshold is picked from a few candidates so that some steps run
in full and some are skipped, and every ratio the run compares lies at least
2% away from it (the C++ run's f32 rounding cannot flip a decision).

TaylorSeer (TaylorSeerCacheConfig, factors in f32) runs the same cases at the
settings of TAYLOR, into tests/data/goldens/taylorseer_pipeline.safetensors
(caseK.image, and the settings in caseK's metadata); PixArt forecasts attn1
and attn2 (diffusers' default patterns match no PixArt module). Run with
--taylorseer-only to remake those alone.

Writes tests/data/goldens/fbcache_pipeline.safetensors: per case K
  caseK.image [B, H, W, 3] in [0, 1] (output_type "np"),
  caseK.full [contexts, steps] 1 where the step ran every block, 0 where skipped;
and in the metadata caseK = the request as JSON (model, prompt, negative
prompt, size, steps, guidance, true CFG, seed, T5 length, threshold, contexts,
the ratios per context and step).
"""
import json
import os

import diffusers
import numpy as np
import torch
import transformers
from diffusers import FluxPipeline, PixArtAlphaPipeline, StableDiffusion3Pipeline
from diffusers.hooks import (FirstBlockCacheConfig, TaylorSeerCacheConfig,
                             apply_first_block_cache, apply_taylorseer_cache)
from diffusers.hooks import first_block_cache as fbc
from diffusers.hooks.hooks import CacheContext, HookRegistry, _set_cache_context
from safetensors.torch import save_file

MODELS = "models"
OUT = "tests/data/goldens/fbcache_pipeline.safetensors"
TAYLOR_OUT = "tests/data/goldens/taylorseer_pipeline.safetensors"
# (interval, warm-up, order) per model: every order, the forecast at step W
# itself, and intervals that end on a forecast step.
TAYLOR = {"pixart-alpha-tiny": (3, 2, 2), "flux-schnell-tiny": (4, 2, 1),
          "flux-dev-tiny": (3, 3, 3), "sd3-tiny": (2, 1, 0), "sd35-tiny": (5, 3, 1)}
# PixArt's attention modules are attn1 / attn2, which diffusers' default
# patterns (".*attn" at the end) do not match: xdit forecasts both.
PIXART_MODULES = [r"^transformer_blocks\.\d+\.attn1$", r"^transformer_blocks\.\d+\.attn2$"]
VERSIONS = {"torch": torch.__version__, "diffusers": diffusers.__version__,
            "transformers": transformers.__version__}
CANDIDATES = (0.05, 0.12, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7, 0.8)
CASES = [
    dict(model="pixart-alpha-tiny", prompt="a red fox in the snow", negative_prompt="",
         height=48, width=80, steps=10, guidance_scale=4.5, true_cfg_scale=1.0, seed=0,
         max_sequence_length=120),
    dict(model="flux-schnell-tiny", prompt="a red fox in the snow", negative_prompt=None,
         height=48, width=80, steps=8, guidance_scale=0.0, true_cfg_scale=1.0, seed=0,
         max_sequence_length=32),
    dict(model="flux-dev-tiny", prompt="an astronaut riding a horse",
         negative_prompt="blurry, low quality", height=40, width=64, steps=8,
         guidance_scale=3.5, true_cfg_scale=2.5, seed=3, max_sequence_length=32),
    dict(model="sd3-tiny", prompt="a red fox in the snow", negative_prompt="blurry",
         height=48, width=64, steps=8, guidance_scale=5.0, true_cfg_scale=1.0, seed=1,
         max_sequence_length=32),
    dict(model="sd35-tiny", prompt="Two cats, sitting on a mat!", negative_prompt=None,
         height=40, width=56, steps=8, guidance_scale=4.0, true_cfg_scale=1.0, seed=5,
         max_sequence_length=24),
]

LOG = []  # (context, ratio or None, full) per head-block call
_original_should_compute = fbc.FBCHeadBlockHook._should_compute_remaining_blocks


def _logged_should_compute(self, residual):
    state = self.state_manager.get_state()
    ratio = None
    if state.head_block_residual is not None:
        prev = state.head_block_residual
        ratio = ((residual - prev).abs().mean() / prev.abs().mean()).item()
    full = _original_should_compute(self, residual)
    LOG.append((self.state_manager.context.name, ratio, full))
    return full


fbc.FBCHeadBlockHook._should_compute_remaining_blocks = _logged_should_compute


def load(case):
    folder = os.path.join(MODELS, case["model"])
    if case["model"].startswith("flux"):
        return FluxPipeline.from_pretrained(folder, torch_dtype=torch.float32)
    if case["model"].startswith("sd3"):
        return StableDiffusion3Pipeline.from_pretrained(folder, torch_dtype=torch.float32)
    return PixArtAlphaPipeline.from_pretrained(folder, torch_dtype=torch.float32)


def pass_text_through(block):
    """SD3's last block (context_pre_only) returns no text; hand its input on."""
    forward = block.forward

    def wrapped(hidden_states, encoder_hidden_states, *args, **kwargs):
        text, image = forward(hidden_states, encoder_hidden_states, *args, **kwargs)
        return (encoder_hidden_states if text is None else text), image

    block.forward = wrapped


def with_cache(pipe, case, threshold):
    """The pipeline's transformer with First-Block-Cache at `threshold`, fresh state."""
    t = pipe.transformer
    if case["model"].startswith("flux"):
        if t.is_cache_enabled:
            t.disable_cache()
        t.enable_cache(FirstBlockCacheConfig(threshold=threshold))
        return
    registry = HookRegistry.check_if_exists_or_initialize(t)
    for b in t.transformer_blocks:
        HookRegistry.check_if_exists_or_initialize(b).remove_hook(fbc._FBC_LEADER_BLOCK_HOOK,
                                                                 recurse=False)
        HookRegistry.check_if_exists_or_initialize(b).remove_hook(fbc._FBC_BLOCK_HOOK,
                                                                 recurse=False)
    if case["model"].startswith("sd3") and not hasattr(t.transformer_blocks[-1], "_passes"):
        pass_text_through(t.transformer_blocks[-1])
        t.transformer_blocks[-1]._passes = True
    apply_first_block_cache(t, FirstBlockCacheConfig(threshold=threshold))
    in_one_context(t)
    del registry


def in_one_context(t):
    """Every call of the transformer `t` in the one cache context "cond_uncond"
    (the batched pair decides once); applied once however often it is asked."""
    forward = getattr(t, "_uncached_forward", t.forward)
    t._uncached_forward = forward

    def call(*args, **kwargs):
        _set_cache_context(t, CacheContext("cond_uncond"))
        return forward(*args, **kwargs)

    t.forward = call


def pipeline_kwargs(case):
    """The case as its diffusers pipeline takes it, output_type "np"."""
    kw = dict(prompt=case["prompt"], height=case["height"], width=case["width"],
              num_inference_steps=case["steps"], guidance_scale=case["guidance_scale"],
              generator=torch.Generator().manual_seed(case["seed"]), output_type="np")
    if case["model"].startswith("flux"):
        kw.update(max_sequence_length=case["max_sequence_length"])
        if case["negative_prompt"] is not None:
            kw.update(negative_prompt=case["negative_prompt"],
                      true_cfg_scale=case["true_cfg_scale"])
    elif case["model"].startswith("sd3"):
        kw.update(negative_prompt=case["negative_prompt"],
                  max_sequence_length=case["max_sequence_length"])
    else:
        kw.update(negative_prompt=case["negative_prompt"], use_resolution_binning=False,
                  clean_caption=False, max_sequence_length=case["max_sequence_length"])
    return kw


def by_context(log):
    """The contexts of (context, value, full) records, sorted, with each one's
    full flags and values in call order."""
    contexts = sorted({c for c, _, _ in log})
    full = [[int(f) for c2, _, f in log if c2 == c] for c in contexts]
    values = [[v for c2, v, _ in log if c2 == c] for c in contexts]
    return contexts, full, values


def run(pipe, case, threshold):
    with_cache(pipe, case, threshold)
    LOG.clear()
    with torch.no_grad():
        image = pipe(**pipeline_kwargs(case)).images
    if not case["model"].startswith("flux"):
        HookRegistry.check_if_exists_or_initialize(pipe.transformer).reset_stateful_hooks()
    return (image, *by_context(LOG))


def margin(values, threshold):
    vs = [v for per in values for v in per if v is not None]
    return min(abs(v / threshold - 1.0) for v in vs) if vs else 0.0


def make_thresholded(run_case, out, candidates, key, min_full):
    """Per case the first candidate threshold at which run_case(pipe, case, T)
    skips two steps or more, runs at least min_full in full per context and
    keeps every indicator 2% from T; its image, full flags and indicators
    (metadata `key`) into `out`."""
    tensors, meta = {}, dict(VERSIONS)
    for k, case in enumerate(CASES):
        pipe = load(case)
        best = None
        for thr in candidates:
            image, contexts, full, values = run_case(pipe, case, thr)
            skipped = sum(len(f) - sum(f) for f in full)
            if (skipped >= 2 and all(sum(f) >= min_full for f in full)
                    and margin(values, thr) >= 0.02):
                best = thr
                break
        assert best is not None, f"no threshold of {candidates} fits {case['model']}"
        image, contexts, full, values = run_case(pipe, case, best)
        tensors[f"case{k}.image"] = torch.from_numpy(np.ascontiguousarray(image))
        tensors[f"case{k}.full"] = torch.tensor(full, dtype=torch.float32)
        meta[f"case{k}"] = json.dumps(dict(case, threshold=best, contexts=contexts,
                                           **{key: values}))
        print(case["model"], "threshold", best, dict(zip(contexts, full)))
    meta["cases"] = str(len(CASES))
    save_file(tensors, out, metadata=meta)


def make():
    make_thresholded(run, OUT, CANDIDATES, "ratios", 2)


def taylor_case(case, pipe):
    interval, warmup, order = TAYLOR[case["model"]]
    cfg = dict(cache_interval=interval, disable_cache_before_step=warmup, max_order=order,
               taylor_factors_dtype=torch.float32)
    t = pipe.transformer
    if case["model"].startswith("flux"):
        t.enable_cache(TaylorSeerCacheConfig(**cfg))
    else:
        if case["model"].startswith("pixart"):
            cfg.update(cache_identifiers=PIXART_MODULES)
        apply_taylorseer_cache(t, TaylorSeerCacheConfig(**cfg))
        in_one_context(t)
    return dict(taylorseer_interval=interval, taylorseer_warmup=warmup, taylorseer_order=order)


def make_taylor():
    tensors, meta = {}, dict(VERSIONS)
    for k, case in enumerate(CASES):
        pipe = load(case)
        settings = taylor_case(case, pipe)
        with torch.no_grad():
            image = pipe(**pipeline_kwargs(case)).images
        tensors[f"case{k}.image"] = torch.from_numpy(np.ascontiguousarray(image))
        meta[f"case{k}"] = json.dumps(dict(case, **settings))
        print(case["model"], settings)
    meta["cases"] = str(len(CASES))
    save_file(tensors, TAYLOR_OUT, metadata=meta)


if __name__ == "__main__":
    import sys
    if "--taylorseer-only" not in sys.argv:
        make()
    make_taylor()
