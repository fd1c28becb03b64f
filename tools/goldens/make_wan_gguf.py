#!/usr/bin/env python3
"""The tiny Wan2.1's transformer as the community ships Wan single files
(GGUF conversions, the original repository's safetensors): Wan's original
names (`blocks.N.self_attn.q`, `cross_attn`, `ffn.0`, `modulation`,
`head.head`, `time_embedding.0`, norm3 the cross-attention norm), made from
models/wan21-tiny by the inverse of diffusers'
`convert_wan_transformer_to_diffusers` (checked here: the converter gives
the folder's tensors back, bit for bit).

    python3 tools/goldens/make_wan_gguf.py   # from the repository root,
                                             # after make_wan_pipeline.py

Writes tests/data/wan_checkpoint/:
  wan_tiny_q8_0.gguf    matrices whose rows are whole 32-value blocks in Q8_0
                        (gguf-py's quantizer), the rest F32 (the folder's
                        values), as the community files keep 1-D tensors,
                        the patch convolution and odd widths;
  wan_tiny_q8_0_video.safetensors  "video" [1, 3, F, H, W] in [-1, 1]:
                        WanPipeline's latents decoded as make_wan_pipeline.py
                        decodes them, for its second request (CFG, 6 frames
                        → 5), and "video_1" for its third (no CFG, 1 frame),
                        the transformer WanTransformer3DModel.from_single_file
                        of the GGUF with GGUFQuantizationConfig(compute_dtype=
                        float32): diffusers' own GGUF reading and
                        dequantization.
"""
import glob
import json
import os
import sys

import torch
from diffusers import WanPipeline, WanTransformer3DModel
from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(__file__))
from gguf_single_file import from_single_file, versions, write_q8_0_gguf  # noqa: E402

FOLDER = "models/wan21-tiny"
OUT = "tests/data/wan_checkpoint"
# make_wan_pipeline.py's CASES[1] and CASES[2]
REQUESTS = {"video": ("Two cats, sitting on a mat!", "blurry, &lt;low&gt; quality", 32, 48, 6, 3,
                      4.0, 7, 16),
            "video_1": ("an astronaut riding a horse", None, 64, 32, 1, 3, 1.0, 3, 12)}
# diffusers' module names → Wan's, in the order they are tried on a name.
RENAMES = [("condition_embedder.time_embedder.linear_1", "time_embedding.0"),
           ("condition_embedder.time_embedder.linear_2", "time_embedding.2"),
           ("condition_embedder.text_embedder.linear_1", "text_embedding.0"),
           ("condition_embedder.text_embedder.linear_2", "text_embedding.2"),
           ("condition_embedder.time_proj", "time_projection.1"),
           (".attn1.", ".self_attn."), (".attn2.", ".cross_attn."),
           (".to_out.0.", ".o."), (".to_q.", ".q."), (".to_k.", ".k."), (".to_v.", ".v."),
           (".ffn.net.0.proj.", ".ffn.0."), (".ffn.net.2.", ".ffn.2."),
           (".norm2.", ".norm3."), ("proj_out.", "head.head.")]


def original(sd):
    o = {}
    for name, t in sd.items():
        new = name
        if name == "scale_shift_table":
            new = "head.modulation"
        elif name.endswith(".scale_shift_table"):
            new = name.replace(".scale_shift_table", ".modulation")
        for a, b in RENAMES:
            new = new.replace(a, b)
        o[new] = t
    return o


def main():
    sd = load_file(glob.glob(os.path.join(FOLDER, "transformer", "*.safetensors"))[0])
    o = original(sd)
    back = convert_wan_transformer_to_diffusers({k: v.clone() for k, v in o.items()})
    assert sorted(back) == sorted(sd), set(back) ^ set(sd)
    assert all(torch.equal(back[k], sd[k]) for k in sd), "the converter gives the folder back"
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "wan_tiny_q8_0.gguf")
    quantized = write_q8_0_gguf(path, "wan", o)
    print(len(o), "original tensors,", quantized, "in Q8_0")
    transformer = from_single_file(WanTransformer3DModel, path, FOLDER)
    pipe = WanPipeline.from_pretrained(FOLDER, transformer=transformer, torch_dtype=torch.float32)
    vae = pipe.vae
    mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
    inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
    videos, meta = {}, versions()
    for key, (prompt, neg, h, w_, frames, steps, guidance, seed, msl) in REQUESTS.items():
        with torch.no_grad():
            final = pipe(prompt=prompt, negative_prompt=neg, height=h, width=w_,
                         num_frames=frames, num_inference_steps=steps, guidance_scale=guidance,
                         max_sequence_length=msl, generator=torch.Generator().manual_seed(seed),
                         output_type="latent").frames
            videos[key] = vae.decode(final / inv_std + mean, return_dict=False)[0].contiguous()
        meta[key] = json.dumps(dict(prompt=prompt, negative_prompt=neg, height=h, width=w_,
                                    num_frames=frames, steps=steps, guidance_scale=guidance,
                                    seed=seed, max_sequence_length=msl))
        print(key, tuple(videos[key].shape), float(videos[key].abs().mean()))
    save_file(videos, os.path.join(OUT, "wan_tiny_q8_0_video.safetensors"), metadata=meta)


if __name__ == "__main__":
    main()
