#!/usr/bin/env python3
"""FlowMatchEulerDiscreteScheduler goldens (FLUX.1, SD3): timesteps, sigmas
and a whole sampling trajectory on random model outputs per configuration.

    python3 tools/goldens/make_flow_match.py tests/data

Writes <out>/goldens/flow_match.safetensors with, per case k:
  case{k}.timesteps, case{k}.sigmas, case{k}.sample0, case{k}.model_outputs [S, ...],
  case{k}.samples [S, ...] (the sample after each step)
and in the metadata the config, the steps, the pipeline's mu (for
image_seq_len latent tokens, via diffusers' calculate_shift as the FLUX
pipeline calls it) and the custom sigmas the pipeline passes, if any.
"""
import json
import os
import sys

import diffusers
import numpy as np
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.pipelines.flux.pipeline_flux import calculate_shift
from safetensors.torch import save_file

import scheduler_trajectory  # beside this script

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/data"
g = torch.Generator().manual_seed(5)

FM_BASE = dict(num_train_timesteps=1000, base_image_seq_len=256, max_image_seq_len=4096,
               base_shift=0.5, max_shift=1.15)
FLUX_SIGMAS = "flux"  # np.linspace(1.0, 1 / steps, steps), as FluxPipeline passes
FM_CASES = [  # (config, steps, image_seq_len, sigmas)
    (dict(FM_BASE, shift=1.0, use_dynamic_shifting=False), 4, 1024, FLUX_SIGMAS),  # schnell
    (dict(FM_BASE, shift=1.0, use_dynamic_shifting=False), 1, 4096, FLUX_SIGMAS),
    (dict(FM_BASE, shift=3.0, use_dynamic_shifting=True), 28, 4096, FLUX_SIGMAS),  # dev
    (dict(FM_BASE, shift=3.0, use_dynamic_shifting=True), 5, 1530, FLUX_SIGMAS),
    (dict(FM_BASE, shift=3.0, use_dynamic_shifting=True), 9, 999, None),
    (dict(num_train_timesteps=1000, shift=3.0), 28, 4096, None),  # SD3: shifted twice
    (dict(num_train_timesteps=1000, shift=3.0), 4, 1024, None),
    (dict(num_train_timesteps=1000, shift=3.0), 1, 1024, None),
    (dict(FM_BASE, shift=1.0, use_dynamic_shifting=True, time_shift_type="linear"), 6, 2048,
     FLUX_SIGMAS),
    (dict(FM_BASE, shift=1.0, use_dynamic_shifting=True, shift_terminal=0.1), 8, 700, None),
    (dict(num_train_timesteps=1000, shift=2.0, invert_sigmas=True), 5, 1024, None),
    (dict(num_train_timesteps=500, shift=1.7), 7, 1024, [0.9, 0.8, 0.55, 0.5, 0.3, 0.11, 0.02]),
]

tensors, meta = {}, {}
for k, (cfg, steps, seq, sig) in enumerate(FM_CASES):
    s = FlowMatchEulerDiscreteScheduler(**cfg)
    sigmas = np.linspace(1.0, 1 / steps, steps) if sig == FLUX_SIGMAS else sig
    c = s.config
    mu = calculate_shift(seq, c.get("base_image_seq_len", 256), c.get("max_image_seq_len", 4096),
                         c.get("base_shift", 0.5), c.get("max_shift", 1.15))
    kw = dict(sigmas=sigmas) if sigmas is not None else {}
    if c.use_dynamic_shifting:
        kw["mu"] = mu
    s.set_timesteps(steps if sigmas is None else None, **kw)
    x = torch.randn(1, 16, 3, 5, generator=g)
    scheduler_trajectory.record(tensors, f"case{k}", s, x, g)
    meta[f"case{k}"] = json.dumps(dict(s.config, _class_name=type(s).__name__))
    meta[f"case{k}.steps"] = str(steps)
    meta[f"case{k}.image_seq_len"] = str(seq)
    meta[f"case{k}.mu"] = repr(float(mu))
    meta[f"case{k}.uses_mu"] = "true" if c.use_dynamic_shifting else "false"
    if sigmas is not None:
        meta[f"case{k}.sigmas_in"] = json.dumps([float(v) for v in sigmas])
meta["cases"] = str(len(FM_CASES))
meta["torch"] = torch.__version__
meta["diffusers"] = diffusers.__version__
meta["numpy"] = np.__version__
os.makedirs(os.path.join(OUT, "goldens"), exist_ok=True)
save_file(tensors, os.path.join(OUT, "goldens", "flow_match.safetensors"), metadata=meta)
print(len(FM_CASES), "flow-match cases")
