#!/usr/bin/env python3
"""GGUF goldens (issue 45): one tensor of every ggml type xdit reads, and
what gguf-py (the reference implementation of the GGUF format, ggml's own
Python package) dequantizes them to.

    python3 tools/goldens/make_gguf.py   # from the repository root

Writes tests/data/gguf/:
  types.gguf       F32, F16, BF16 and Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 tensors
                   quantized by gguf-py from random values ([3, 64]; a 3-D
                   one [2, 3, 32]), and Q4_K, Q5_K, Q6_K ones ([3, 256],
                   [2, 512]) of random blocks with finite f16 scales (gguf-py
                   does not quantize K-quants); metadata of every value type
                   (general.alignment 64, strings, arrays).
  types_f32.safetensors  gguf-py's `quants.dequantize` of each tensor (f32).
"""
import os

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants
from safetensors.numpy import save_file

OUT = "tests/data/gguf"


def k_blocks(rng, t, n_blocks):
    """Random K-quant blocks whose f16 scales (d, dmin) are finite and small."""
    size = gguf.GGML_QUANT_SIZES[t][1]
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    scales = (rng.uniform(0.001, 0.05, size=(n_blocks, 2))).astype(np.float16).view(np.uint8)
    if t == T.Q6_K:
        raw[:, 208:210] = scales[:, 0:2]  # d last
    else:
        raw[:, 0:4] = scales  # d, dmin first
    return raw


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(45)
    w = gguf.GGUFWriter(os.path.join(OUT, "types.gguf"), "xdit-test")
    w.data_alignment = 64
    w.add_uint32("general.alignment", 64)
    w.add_string("general.name", "xdit gguf types")
    w.add_int8("test.i8", -3)
    w.add_uint16("test.u16", 65535)
    w.add_int64("test.i64", -(2 ** 40))
    w.add_float32("test.f32", 0.25)
    w.add_float64("test.f64", -1.5)
    w.add_bool("test.bool", True)
    w.add_array("test.ints", [1, -2, 3])
    w.add_array("test.strings", ["a", "bc"])
    want = {}
    for t, shape in [(T.F32, (3, 64)), (T.F16, (3, 64)), (T.BF16, (3, 64)), (T.Q8_0, (3, 64)),
                     (T.Q4_0, (3, 64)), (T.Q4_1, (3, 64)), (T.Q5_0, (3, 64)), (T.Q5_1, (3, 64)),
                     (T.Q8_0, (2, 3, 32))]:
        x = rng.standard_normal(shape).astype(np.float32)
        q = quants.quantize(x, t)
        name = f"{t.name.lower()}_{len(shape)}d"
        w.add_tensor(name, q, raw_dtype=t)
        want[name] = quants.dequantize(q, t).astype(np.float32).reshape(shape)
    for t, shape in [(T.Q4_K, (3, 256)), (T.Q5_K, (2, 512)), (T.Q6_K, (3, 256)),
                     (T.Q6_K, (2, 512))]:
        n_blocks = shape[0] * shape[1] // 256
        raw = k_blocks(rng, t, n_blocks).reshape(shape[0], -1)
        name = f"{t.name.lower()}_{shape[1]}"
        w.add_tensor(name, raw, raw_dtype=t)
        want[name] = quants.dequantize(raw, t).astype(np.float32).reshape(shape)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    save_file({k: np.ascontiguousarray(v) for k, v in want.items()},
              os.path.join(OUT, "types_f32.safetensors"),
              metadata={"gguf": gguf.__version__ if hasattr(gguf, "__version__") else "0.19.0",
                        "numpy": np.__version__})
    print(sorted(want))


if __name__ == "__main__":
    main()
