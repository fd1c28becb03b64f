"""The largest |a - b| / max|b| between the 'latents' of two safetensors files
(the safetensors header read by hand: nothing beyond the standard library)."""
import array
import json
import struct
import sys


def latents(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    info = header["latents"]
    assert info["dtype"] == "F32", info["dtype"]
    b, e = info["data_offsets"]
    values = array.array("f")
    values.frombytes(data[b:e])
    if sys.byteorder != "little":
        values.byteswap()
    return info["shape"], values


(sa, a), (sb, b) = latents(sys.argv[1]), latents(sys.argv[2])
if sa != sb:
    print("inf")
else:
    scale = max(max(abs(v) for v in b), 1e-30)
    print(f"{max(abs(x - y) for x, y in zip(a, b)) / scale:.3g}")
