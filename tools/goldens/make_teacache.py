#!/usr/bin/env python3
"""TeaCache goldens: whole diffusers pipelines on the tiny models of models/,
prompt to image, with TeaCache applied as diffusers-style block hooks.

    python3 tools/goldens/make_teacache.py   # from the repository root, after
                                             # make_pixart.py, make_flux.py, make_sd3.py

diffusers has no TeaCache. This is a reimplementation, written here, of the
rule of xDiT's TeaCachedTransformerBlocks (xfuser/model_executor/cache/
utils.py; docs/research/step_caches.md §3.1) with the forced steps of the
TeaCache paper that issue 43 asks for (the first and the last step; xDiT's
counter forces steps 0 and 1 instead), one state per diffusers cache context:
  - m = block 0's timestep-modulated image input: `norm1(x, emb=temb)[0]`
    for FLUX.1 and SD3 (AdaLayerNormZero / SD3.5's AdaLayerNormZeroX),
    `norm1(x)·(1 + scale_msa) + shift_msa` from PixArt's scale_shift_table
    and timestep (ada_norm_single: the same first norm);
  - d = mean|m − m_prev| / mean|m_prev|, m_prev from the context's previous
    call (kept on every call); acc' = acc + P(d), P = xDiT's flux_coef
    polynomial for FLUX.1, the identity (xDiT's default_coef) for the others;
  - skip every block when acc' < threshold and the call is neither the
    context's first nor its last step: the output is the input plus the
    residual (last block's output − block 0's input, image and text streams)
    of the last full call; acc = acc' on a skip, 0 on a full call.
Contexts as in make_caches.py: FLUX.1's pipeline calls "cond" / "uncond";
PixArt's and SD3's batched pair decides once ("cond_uncond"). SD3's last
block hands its text input through (make_caches.py's pass_text_through).

Writes tests/data/goldens/teacache_pipeline.safetensors: per case K
  caseK.image [B, H, W, 3] in [0, 1] (output_type "np"),
  caseK.full [contexts, steps] 1 where the step ran every block, 0 where skipped;
and in the metadata caseK = the request as JSON (make_caches.py's cases, the
threshold, the contexts, acc' per context and step, null where none).
"""
import inspect

import numpy as np
import torch
from diffusers.hooks._helpers import TransformerBlockRegistry
from diffusers.hooks.hooks import BaseState, HookRegistry, ModelHook, StateManager
from diffusers.utils.torch_utils import unwrap_module

from make_caches import (by_context, in_one_context, load, make_thresholded, pass_text_through,
                         pipeline_kwargs)

OUT = "tests/data/goldens/teacache_pipeline.safetensors"
FLUX_COEF = [4.98651651e+02, -2.83781631e+02, 5.58554382e+01, -3.82021401e+00, 2.64230861e-01]
CANDIDATES = (0.05, 0.08, 0.12, 0.16, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.2, 1.5, 2.0)
HOOK = "teacache_block_hook"
LOG = []  # (context, acc' or None, full) per call


class TeaState(BaseState):
    def __init__(self):
        super().__init__()
        self.reset()

    def reset(self):
        self.previous = None  # m of the context's previous call
        self.acc = 0.0
        self.calls = 0
        self.should_compute = True
        self.head_input = None  # (image, text) of block 0 on a full call
        self.residual = None  # (image, text)


def modulated_input(block, args, kwargs):
    """Block 0's timestep-modulated image input."""
    unwrapped = unwrap_module(block)
    bound = inspect.signature(type(unwrapped).forward).bind(unwrapped, *args, **kwargs)
    a = bound.arguments
    if "temb" in a:  # FLUX.1, SD3: AdaLayerNormZero(X)'s normalised output
        return unwrapped.norm1(a["hidden_states"], emb=a["temb"])[0]
    x, t = a["hidden_states"], a["timestep"]  # PixArt: ada_norm_single
    shift, scale = (unwrapped.scale_shift_table[None] + t.reshape(x.shape[0], 6, -1)).chunk(
        6, dim=1)[:2]
    return unwrapped.norm1(x) * (1 + scale) + shift


class TeaBlockHook(ModelHook):
    _is_stateful = True

    def __init__(self, state_manager, role, threshold=None, coef=None, steps=None):
        super().__init__()
        self.state_manager = state_manager
        self.role = role  # "head", "block" or "tail"
        self.threshold, self.coef, self.steps = threshold, coef, steps
        self._metadata = None

    def initialize_hook(self, module):
        self._metadata = TransformerBlockRegistry.get(unwrap_module(module).__class__)
        return module

    def reset_state(self, module):
        self.state_manager.reset()
        return module

    def _streams(self, args, kwargs):
        image = self._metadata._get_parameter_from_args_kwargs("hidden_states", args, kwargs)
        text = None
        if self._metadata.return_encoder_hidden_states_index is not None:
            text = self._metadata._get_parameter_from_args_kwargs("encoder_hidden_states", args,
                                                                  kwargs)
        return image, text

    def _output(self, image, text):
        if self._metadata.return_encoder_hidden_states_index is None:
            return image
        out = [None, None]
        out[self._metadata.return_hidden_states_index] = image
        out[self._metadata.return_encoder_hidden_states_index] = text
        return tuple(out)

    def _decide(self, state, m):
        full, indicator = True, None
        if state.previous is not None:
            d = ((m - state.previous).abs().mean() / state.previous.abs().mean()).item()
            p = self.coef(d)
            indicator = state.acc + p
            forced = state.calls == 0 or state.calls == self.steps - 1
            full = forced or not indicator < self.threshold
            state.acc = 0.0 if full else indicator
        state.previous = m
        state.calls += 1
        state.should_compute = full
        LOG.append((self.state_manager.context.name, indicator, full))

    def new_forward(self, module, *args, **kwargs):
        state = self.state_manager.get_state()
        image, text = self._streams(args, kwargs)
        if self.role == "head":
            self._decide(state, modulated_input(module, args, kwargs))
            if not state.should_compute:
                r_image, r_text = state.residual
                return self._output(image + r_image, None if text is None else text + r_text)
            state.head_input = (image, text)
        elif not state.should_compute:
            return self._output(image, text)
        output = self.fn_ref.original_forward(*args, **kwargs)
        if self.role == "tail":
            if self._metadata.return_encoder_hidden_states_index is None:
                state.residual = (output - state.head_input[0], None)
            else:
                out_image = output[self._metadata.return_hidden_states_index]
                out_text = output[self._metadata.return_encoder_hidden_states_index]
                state.residual = (out_image - state.head_input[0], out_text - state.head_input[1])
        return output


def apply_teacache(t, case, threshold):
    """TeaCache on the transformer `t`, fresh state: block hooks, one state manager."""
    blocks = list(t.transformer_blocks) + list(getattr(t, "single_transformer_blocks", []))
    for b in blocks:
        HookRegistry.check_if_exists_or_initialize(b).remove_hook(HOOK, recurse=False)
    if case["model"].startswith("sd3") and not hasattr(blocks[-1], "_passes"):
        pass_text_through(blocks[-1])
        blocks[-1]._passes = True
    flux = case["model"].startswith("flux")
    coef = (lambda x: float(np.polyval(FLUX_COEF, x))) if flux else (lambda x: x)
    manager = StateManager(TeaState, (), {})
    for i, b in enumerate(blocks):
        role = "head" if i == 0 else "tail" if i == len(blocks) - 1 else "block"
        hook = TeaBlockHook(manager, role, threshold, coef, case["steps"])
        HookRegistry.check_if_exists_or_initialize(b).register_hook(hook, HOOK)
    if not flux:  # FluxPipeline sets "cond" / "uncond" itself
        in_one_context(t)


def run(pipe, case, threshold):
    apply_teacache(pipe.transformer, case, threshold)
    LOG.clear()
    with torch.no_grad():
        image = pipe(**pipeline_kwargs(case)).images
    return (image, *by_context(LOG))


if __name__ == "__main__":
    make_thresholded(run, OUT, CANDIDATES, "indicators", 3)
