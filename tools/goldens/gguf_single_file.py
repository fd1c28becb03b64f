"""What the single-file GGUF goldens share (make_zimage_gguf.py,
make_qwen_image_gguf.py, make_wan_gguf.py): a state dict written as the
community's GGUF conversions store one, and diffusers' model of such a file."""
import importlib.metadata

import diffusers
import gguf
import torch
from diffusers import GGUFQuantizationConfig
from gguf import GGMLQuantizationType as T
from gguf import quants


def write_q8_0_gguf(path, arch, tensors):
    """Matrices whose rows are whole 32-value blocks in Q8_0 (gguf-py's
    quantizer), the rest F32; returns how many are Q8_0."""
    w = gguf.GGUFWriter(path, arch)
    quantized = 0
    for name, t in sorted(tensors.items()):
        x = t.float().numpy()
        if x.ndim == 2 and x.shape[1] % 32 == 0:
            w.add_tensor(name, quants.quantize(x, T.Q8_0), raw_dtype=T.Q8_0)
            quantized += 1
        else:
            w.add_tensor(name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return quantized


def from_single_file(model_class, path, folder):
    """diffusers' model of the GGUF file at `path`, the config from `folder`'s
    transformer, computing in f32 (diffusers' own GGUF reading and
    dequantization)."""
    return model_class.from_single_file(
        path, config=folder, subfolder="transformer", torch_dtype=torch.float32,
        quantization_config=GGUFQuantizationConfig(compute_dtype=torch.float32))


def versions():
    return {"gguf": importlib.metadata.version("gguf"), "diffusers": diffusers.__version__,
            "torch": torch.__version__}
