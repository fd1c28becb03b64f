#!/usr/bin/env python3
"""UniPCMultistepScheduler goldens with flow sigmas (Wan2.1 / Wan2.2):
timesteps, sigmas and a whole sampling trajectory on random model outputs
per configuration.

    python3 tools/goldens/make_unipc.py tests/data

Writes <out>/goldens/unipc.safetensors with, per case k:
  case{k}.timesteps, case{k}.sigmas, case{k}.sample0, case{k}.model_outputs [S, ...],
  case{k}.samples [S, ...] (the sample after each step)
and in the metadata the config, the steps and the custom sigmas, if any.
"""
import json
import os
import sys

import diffusers
import numpy as np
import torch
from diffusers import UniPCMultistepScheduler
from safetensors.torch import save_file

import scheduler_trajectory  # beside this script

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/data"
g = torch.Generator().manual_seed(46)

# Wan2.1-T2V's scheduler_config.json (diffusers folders), flow_shift 3.0 (480p).
WAN = dict(num_train_timesteps=1000, beta_start=0.0001, beta_end=0.02, beta_schedule="linear",
           solver_order=2, prediction_type="flow_prediction", thresholding=False,
           predict_x0=True, solver_type="bh2", lower_order_final=True, disable_corrector=[],
           use_flow_sigmas=True, flow_shift=3.0, timestep_spacing="linspace", steps_offset=0,
           final_sigmas_type="zero")
CASES = [  # (config, steps, sample shape, custom sigmas)
    (WAN, 10, (1, 16, 3, 5, 7), None),
    (dict(WAN, flow_shift=5.0), 7, (1, 16, 2, 4, 6), None),  # 720p
    (dict(WAN, flow_shift=12.0), 4, (2, 4, 5, 3), None),
    (WAN, 1, (1, 4, 3, 5), None),
    (WAN, 2, (1, 4, 3, 5), None),
    # bh1, or second order at the last step, with a final sigma of zero give
    # NaN / inf in diffusers (B(h) = h = -inf; r = 0): xdit refuses those, and
    # these two cases end at sigma_min.
    (dict(WAN, solver_type="bh1", final_sigmas_type="sigma_min"), 6, (1, 4, 3, 5), None),
    (dict(WAN, solver_order=1), 5, (1, 4, 3, 5), None),
    (dict(WAN, lower_order_final=False, final_sigmas_type="sigma_min"), 5, (1, 4, 3, 5), None),
    (dict(WAN, disable_corrector=[0, 3]), 6, (1, 4, 3, 5), None),
    (dict(WAN, final_sigmas_type="sigma_min"), 5, (1, 4, 3, 5), None),
    (dict(WAN, flow_shift=1.0), 5, (1, 4, 3, 5), None),
    (dict(WAN, num_train_timesteps=500), 6, (1, 4, 3, 5), [0.95, 0.8, 0.6, 0.41, 0.2, 0.05]),
]

tensors, meta = {}, {}
for k, (cfg, steps, shape, sig) in enumerate(CASES):
    s = UniPCMultistepScheduler(**cfg)
    if sig is not None:
        s.set_timesteps(sigmas=np.array(sig))  # (shifted by flow_shift as well)
    else:
        s.set_timesteps(steps)
    x = torch.randn(*shape, generator=g)
    scheduler_trajectory.record(tensors, f"case{k}", s, x, g)
    assert torch.isfinite(tensors[f"case{k}.samples"]).all(), k
    meta[f"case{k}"] = json.dumps(dict(s.config, _class_name=type(s).__name__))
    meta[f"case{k}.steps"] = str(steps)
    if sig is not None:
        meta[f"case{k}.sigmas_in"] = json.dumps(sig)
meta["cases"] = str(len(CASES))
meta["torch"] = torch.__version__
meta["diffusers"] = diffusers.__version__
meta["numpy"] = np.__version__
os.makedirs(os.path.join(OUT, "goldens"), exist_ok=True)
save_file({k: v.contiguous() for k, v in tensors.items()},
          os.path.join(OUT, "goldens", "unipc.safetensors"), metadata=meta)
print(len(CASES), "cases;", "timesteps of case 0:", tensors["case0.timesteps"].tolist())
