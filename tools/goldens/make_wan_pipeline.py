#!/usr/bin/env python3
"""A tiny Wan2.1 text-to-video pipeline with random weights (diffusers
WanPipeline) and whole runs of it: prompt → UMT5 embeddings → UniPC loop →
AutoencoderKLWan frames.

    python3 tools/goldens/make_wan_pipeline.py   # from the repository root, after
                                                 # make_wan.py, make_wan_vae.py, make_pixart.py

The pipeline takes the transformer of tests/data/wan (make_wan.py), the VAE of
tests/data/wan/vae (make_wan_vae.py), the SentencePiece tokenizer of
models/pixart-alpha-tiny and a tiny random UMT5 encoder made here (d_model 32,
the transformer's text_dim; 4 heads of 8, d_ff 48, 2 layers, its vocabulary the
tokenizer's), with UniPC as Wan's folders configure it (flow_prediction, flow
sigmas, flow_shift 3). Writes models/wan21-tiny/ (a complete diffusers folder)
and tests/data/goldens/wan_pipeline.safetensors with, per case (request in the
metadata): prompt_embeds, negative_prompt_embeds (under CFG), initial_latents
[1, 16, F', h, w] (torch.randn with the seed's generator, as prepare_latents
draws them), latents (final) and video [1, 3, F, H, W] in [-1, 1] (the
pipeline's decode: latents / (1 / latents_std) + latents_mean → vae.decode).
ftfy is not installed, so prompt_clean is html.unescape twice + whitespace.
"""
import json
import os
import shutil

import diffusers
import torch
import transformers
from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
from safetensors.torch import save_file
from transformers import T5TokenizerFast, UMT5Config, UMT5EncoderModel

MODELS = "models"
GOLDENS = "tests/data/goldens"
TOKENIZER = f"{MODELS}/pixart-alpha-tiny/tokenizer"
VERSIONS = {"torch": torch.__version__, "diffusers": diffusers.__version__,
            "transformers": transformers.__version__}
# (prompt, negative prompt, height, width, num_frames, steps, guidance, seed,
#  max_sequence_length): entities and runs of spaces for prompt_clean; 6 frames
# are rounded to 5 as diffusers rounds them; the last runs without CFG.
CASES = [
    ("a red fox &amp;amp; a  cat\tin the   snow", None, 48, 80, 9, 4, 5.0, 0, 24),
    ("Two cats, sitting on a mat!", "blurry, &lt;low&gt; quality", 32, 48, 6, 3, 4.0, 7, 16),
    ("an astronaut riding a horse", None, 64, 32, 1, 3, 1.0, 3, 12),
]


def text_encoder(vocab):
    torch.manual_seed(47)
    cfg = UMT5Config(vocab_size=vocab, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
                     relative_attention_num_buckets=32, relative_attention_max_distance=128,
                     feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                     dropout_rate=0.0)
    model = UMT5EncoderModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * (0.5 if "relative_attention_bias" in name else 0.15))
    return model


def main():
    vocab = json.load(open(f"{MODELS}/pixart-alpha-tiny/text_encoder/config.json"))["vocab_size"]
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                        num_train_timesteps=1000, flow_shift=3.0)
    pipe = WanPipeline(tokenizer=T5TokenizerFast.from_pretrained(TOKENIZER),
                       text_encoder=text_encoder(vocab),
                       transformer=WanTransformer3DModel.from_pretrained("tests/data/wan/transformer"),
                       vae=AutoencoderKLWan.from_pretrained("tests/data/wan/vae"),
                       scheduler=scheduler)
    folder = os.path.join(MODELS, "wan21-tiny")
    shutil.rmtree(folder, ignore_errors=True)
    pipe.save_pretrained(folder, safe_serialization=True)
    for f in os.listdir(TOKENIZER):  # the SentencePiece model beside tokenizer.json
        shutil.copy(os.path.join(TOKENIZER, f), os.path.join(folder, "tokenizer", f))
    vae = pipe.vae
    mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
    inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
    tensors, meta = {}, dict(VERSIONS)
    for k, (prompt, neg, h, w, frames, steps, guidance, seed, msl) in enumerate(CASES):
        cfg = guidance > 1
        with torch.no_grad():
            pe, ne = pipe.encode_prompt(prompt=prompt, negative_prompt=neg,
                                        do_classifier_free_guidance=cfg,
                                        max_sequence_length=msl)
            rounded = frames // 4 * 4 + 1 if frames % 4 != 1 else frames
            lf = (rounded - 1) // 4 + 1
            init = torch.randn(1, 16, lf, h // 8, w // 8,
                               generator=torch.Generator().manual_seed(seed))
            final = pipe(prompt=prompt, negative_prompt=neg, height=h, width=w,
                         num_frames=frames, num_inference_steps=steps, guidance_scale=guidance,
                         max_sequence_length=msl, generator=torch.Generator().manual_seed(seed),
                         output_type="latent").frames
            video = vae.decode(final / inv_std + mean, return_dict=False)[0]
        tensors.update({f"case{k}.prompt_embeds": pe.contiguous(),
                        f"case{k}.initial_latents": init, f"case{k}.latents": final.contiguous(),
                        f"case{k}.video": video.contiguous()})
        if cfg:
            tensors[f"case{k}.negative_prompt_embeds"] = ne.contiguous()
        meta[f"case{k}"] = json.dumps(dict(
            prompt=prompt, negative_prompt=neg, height=h, width=w, num_frames=frames,
            steps=steps, guidance_scale=guidance, seed=seed, max_sequence_length=msl))
        print(k, tuple(final.shape), tuple(video.shape), float(video.abs().mean()))
    meta["cases"] = str(len(CASES))
    save_file(tensors, os.path.join(GOLDENS, "wan_pipeline.safetensors"), metadata=meta)


if __name__ == "__main__":
    main()
