#!/usr/bin/env python3
"""DPMSolverMultistepScheduler goldens: timesteps, sigmas and a whole sampling
trajectory on random model outputs for several configurations.

    python3 tools/goldens/make_scheduler.py tests/data

Writes <out>/goldens/dpm_solver.safetensors with, per case k:
  case{k}.timesteps, case{k}.sigmas, case{k}.sample0, case{k}.model_outputs [S, ...],
  case{k}.samples [S, ...] (the sample after each step)
and the case configurations as JSON in the metadata.
"""
import json
import os
import sys

import diffusers
import torch
from diffusers import DPMSolverMultistepScheduler
from safetensors.torch import save_file

import scheduler_trajectory  # beside this script

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/data"
BASE = dict(algorithm_type="dpmsolver++", beta_end=0.02, beta_schedule="linear", beta_start=0.0001,
            lower_order_final=True, num_train_timesteps=1000, prediction_type="epsilon",
            solver_order=2, solver_type="midpoint", steps_offset=0, thresholding=False)
CASES = [
    (dict(BASE), 20),
    (dict(BASE), 5),
    (dict(BASE), 1),
    (dict(BASE), 2),
    (dict(BASE, timestep_spacing="linspace"), 25),
    (dict(BASE, timestep_spacing="leading", steps_offset=1), 7),
    (dict(BASE, timestep_spacing="trailing"), 9),
    (dict(BASE, beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012,
          prediction_type="v_prediction"), 6),
    (dict(BASE, solver_type="heun", final_sigmas_type="sigma_min"), 6),
    (dict(BASE, algorithm_type="dpmsolver", solver_order=1, final_sigmas_type="sigma_min"), 4),
    (dict(BASE, algorithm_type="dpmsolver", final_sigmas_type="sigma_min", solver_type="heun"), 5),
    (dict(BASE, beta_schedule="squaredcos_cap_v2", prediction_type="sample", lower_order_final=False), 16),
]

tensors, meta = {}, {}
g = torch.Generator().manual_seed(3)
for k, (cfg, steps) in enumerate(CASES):
    s = DPMSolverMultistepScheduler(**cfg)
    s.set_timesteps(steps)
    x = torch.randn(2, 3, 5, 7, generator=g)
    scheduler_trajectory.record(tensors, f"case{k}", s, x, g)
    meta[f"case{k}"] = json.dumps(dict(s.config))
meta["cases"] = str(len(CASES))
meta["torch"] = torch.__version__
meta["diffusers"] = diffusers.__version__
os.makedirs(os.path.join(OUT, "goldens"), exist_ok=True)
save_file(tensors, os.path.join(OUT, "goldens", "dpm_solver.safetensors"), metadata=meta)
print(len(CASES), "cases")
