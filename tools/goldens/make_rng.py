#!/usr/bin/env python3
"""torch.randn goldens: torch.randn(shape, generator=torch.Generator().manual_seed(seed))
in float32 on CPU for several seeds and shapes (sizes below 16, multiples of 16
and not). Writes <out>/goldens/torch_randn.safetensors; tensor names are
"seed<seed>_<d0>x<d1>x...". Also <out>/goldens/torch_randn_frames.safetensors:
the initial noise of latents with a frame axis, [P, C, F, h, w] with F > 1 and
odd sizes, named the same way."""
import os
import sys

import torch
from safetensors.torch import save_file

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/data"
SEEDS = [0, 42, 1234, 2**32 + 5, 2**63 - 1]
SHAPES = [(1,), (7,), (15,), (16,), (17,), (1, 4, 6, 10), (2, 4, 9, 13), (1, 4, 64, 64)]
t = {}
for seed in SEEDS:
    for shape in SHAPES:
        if seed not in (0, 42) and shape == (1, 4, 64, 64):
            continue  # keep the file small
        g = torch.Generator().manual_seed(seed)
        t[f"seed{seed}_" + "x".join(map(str, shape))] = torch.randn(shape, generator=g)
# Two draws from one generator: the second continues the stream.
g = torch.Generator().manual_seed(7)
t["seq7_a_3"] = torch.randn(3, generator=g)
t["seq7_b_40"] = torch.randn(40, generator=g)
t["seq7_c_5"] = torch.randn(5, generator=g)
os.makedirs(os.path.join(OUT, "goldens"), exist_ok=True)
save_file(t, os.path.join(OUT, "goldens", "torch_randn.safetensors"), metadata={"torch": torch.__version__})
print(len(t), "tensors")

# Latents with a frame axis [P, C, F, h, w] (pipeline::initial_noise).
FRAME_SHAPES = [(1, 1, 3, 1, 5), (1, 4, 3, 5, 7), (2, 16, 3, 3, 5)]
f = {}
for seed in (0, 42, 2**32 + 5):
    for shape in FRAME_SHAPES:
        g = torch.Generator().manual_seed(seed)
        f[f"seed{seed}_" + "x".join(map(str, shape))] = torch.randn(shape, generator=g)
save_file(f, os.path.join(OUT, "goldens", "torch_randn_frames.safetensors"),
          metadata={"torch": torch.__version__})
print(len(f), "frame tensors")
