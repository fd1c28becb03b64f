#!/usr/bin/env python3
"""Makes the PixArt models and goldens: tiny random-weight PixArt-alpha and
PixArt-Sigma style pipelines saved as diffusers folders (transformer, scheduler,
T5 tokenizer trained here with SentencePiece, T5 encoder, VAE), with inputs and
outputs of diffusers / transformers themselves.

    python3 tools/goldens/make_pixart.py            # from the repository root

Needs torch, diffusers, transformers, sentencepiece, safetensors (versions in
tools/goldens/requirements.txt). Writes
  models/pixart-{alpha,sigma}-tiny/            complete diffusers pipeline folders
  tests/data/goldens/pixart_{alpha,sigma}_forward.safetensors  one transformer forward
  tests/data/goldens/pixart_{alpha,sigma}_loop.safetensors     CFG loop from embeddings
  tests/data/goldens/t5_*.safetensors, vae_*.safetensors, pipeline_*.safetensors
Each golden's metadata records the torch/diffusers/transformers versions.
"""
import json
import os
import sys

import io
import random
import shutil
import tempfile

import diffusers
import sentencepiece as spm
import torch
import transformers
from diffusers import AutoencoderKL, DPMSolverMultistepScheduler, PixArtTransformer2DModel
from safetensors.torch import save_file
from transformers import T5Config, T5EncoderModel, T5Tokenizer

OUT = "tests/data"
MODELS = "models"
VERSIONS = {"torch": torch.__version__, "diffusers": diffusers.__version__,
            "transformers": transformers.__version__, "sentencepiece": spm.__version__}
T5_DIM = 32

# Prompts the tokenizer, encoder and pipeline goldens use: plain, cased and
# spaced (the pipeline lowercases and strips), punctuation, digits, non-ASCII,
# words the vocabulary never saw, and one longer than the 120-token limit.
PROMPTS = [
    "a red fox in the snow",
    "  A Photo of TWO cats,   sitting on a   mat!  ",
    "an astronaut riding a horse on mars, 4k, highly detailed",
    "caf\u00e9 au lait \u2014 na\u00efve r\u00e9sum\u00e9 \u00fcber",
    "xylophone quokka zephyr",
    "",
    " ".join(["a small blue bird sits on a green branch near the river"] * 12),
]
WORDS = ("a an the red blue green small large cat cats dog fox bird horse astronaut photo painting "
         "of in on at near with riding sitting snow mars river branch mat city night sky light dark "
         "highly detailed 4k portrait landscape beautiful old young man woman tree house car road "
         "two three one sun moon water fire stone glass golden silver").split()

# Scheduler configs as the PixArt-alpha and PixArt-Sigma hub folders ship them.
ALPHA_SCHEDULER = dict(algorithm_type="dpmsolver++", beta_end=0.02, beta_schedule="linear",
                       beta_start=0.0001, dynamic_thresholding_ratio=0.995, lower_order_final=True,
                       num_train_timesteps=1000, prediction_type="epsilon", sample_max_value=1.0,
                       solver_order=2, solver_type="midpoint", steps_offset=0, thresholding=False,
                       trained_betas=None, use_karras_sigmas=False)
SIGMA_SCHEDULER = dict(ALPHA_SCHEDULER, euler_at_final=False, final_sigmas_type="zero",
                       lambda_min_clipped=-float("inf"), timestep_spacing="linspace",
                       use_lu_lambdas=False, variance_type=None)

SPECS = {
    # alpha: sample_size 128 turns on the resolution / aspect-ratio micro-conditions
    # (as PixArt-alpha 1024) and the default interpolation scale 2.
    "alpha": dict(config=dict(sample_size=128, num_layers=2, num_attention_heads=3,
                              attention_head_dim=8, in_channels=4, out_channels=8,
                              cross_attention_dim=24, caption_channels=32, patch_size=2,
                              norm_elementwise_affine=False, norm_eps=1e-6),
                  scheduler=ALPHA_SCHEDULER, pipeline="PixArtAlphaPipeline",
                  latent_hw=(6, 10), text_len=7, steps=5, guidance=4.5,
                  e2e=dict(prompts=[PROMPTS[0]], negative="", height=48, width=80, steps=4,
                           guidance=4.5, seed=0, binning=False)),
    # sigma: no micro-conditions, explicit interpolation scale, 3 blocks.
    "sigma": dict(config=dict(sample_size=32, num_layers=3, num_attention_heads=2,
                              attention_head_dim=12, in_channels=4, out_channels=8,
                              cross_attention_dim=24, caption_channels=32, patch_size=2,
                              norm_elementwise_affine=False, norm_eps=1e-6,
                              interpolation_scale=0.5, use_additional_conditions=False),
                  scheduler=SIGMA_SCHEDULER, pipeline="PixArtSigmaPipeline",
                  latent_hw=(10, 6), text_len=9, steps=6, guidance=3.0,
                  # sample_size 32: diffusers bins the size to its 256-px table, then resizes back
                  e2e=dict(prompts=[PROMPTS[1], PROMPTS[2]], negative="blurry, low quality", height=40,
                           width=72, steps=3, guidance=3.0, seed=7, binning=True)),
}


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            fan_in = p.shape[1] if p.ndim >= 2 else p.shape[0]
            std = 1.0 / fan_in ** 0.5 if p.ndim >= 2 else 0.3
            if p.ndim == 4:  # patch-embedding conv
                std = 1.0 / (p.shape[1] * p.shape[2] * p.shape[3]) ** 0.5
            p.copy_(torch.randn(p.shape, generator=g) * std)


def text_inputs(g, batch, length, channels):
    embeds = torch.randn(batch, length, channels, generator=g)
    mask = torch.ones(batch, length, dtype=torch.int64)
    for b in range(batch):  # padded captions: the last tokens masked out, differently per row
        mask[b, length - 2 - b:] = 0
    return embeds, mask


def save(path, tensors, extra=None):
    meta = dict(VERSIONS, **(extra or {}))
    save_file({k: v.contiguous().float() for k, v in tensors.items()}, path,
              metadata={k: str(v) for k, v in meta.items()})


def train_sentencepiece(path):
    """A small unigram SentencePiece model with T5's special ids (pad 0, eos 1, unk 2)."""
    rnd = random.Random(11)
    lines = []
    for _ in range(2000):
        n = rnd.randint(3, 14)
        words = [rnd.choice(WORDS) for _ in range(n)]
        if rnd.random() < 0.3:
            words.append(str(rnd.randint(0, 2048)))
        line = " ".join(words)
        if rnd.random() < 0.3:
            line += rnd.choice([",", ".", "!", "?"])
        lines.append(line)
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=buf, vocab_size=300,
                                   model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
                                   character_coverage=1.0, normalization_rule_name="nmt_nfkc",
                                   minloglevel=2)
    with open(path, "wb") as f:
        f.write(buf.getvalue())


def make_text_stack(seed):
    """Tokenizer, T5 v1.1-style encoder and VAE shared by both pipelines."""
    tmp = tempfile.mkdtemp()
    sp_path = os.path.join(tmp, "spiece.model")
    train_sentencepiece(sp_path)
    tok = T5Tokenizer.from_pretrained(tmp)  # converts spiece.model as a hub folder would be
    torch.manual_seed(seed)
    t5 = T5EncoderModel(T5Config(vocab_size=len(tok), d_model=T5_DIM, d_kv=8, d_ff=48, num_layers=2,
                                 num_heads=4, relative_attention_num_buckets=32,
                                 relative_attention_max_distance=128, feed_forward_proj="gated-gelu",
                                 layer_norm_epsilon=1e-6, tie_word_embeddings=False,
                                 dropout_rate=0.0)).eval()
    randomize(t5, seed)
    with torch.no_grad():  # RMSNorm gains near 1, embeddings of unit size
        for n, p in t5.named_parameters():
            if "layer_norm" in n:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
            if "embed_tokens" in n or n == "shared.weight":
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(2)))
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4,
                        down_block_types=("DownEncoderBlock2D",) * 4,
                        up_block_types=("UpDecoderBlock2D",) * 4,
                        block_out_channels=(8, 16, 16, 24), layers_per_block=1,
                        norm_num_groups=8, sample_size=64).eval()
    randomize(vae, seed + 1)
    with torch.no_grad():
        for n, p in vae.named_parameters():
            if "norm" in n and n.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))
    return tok, t5, vae, sp_path, tmp


def make_text_goldens(tok, t5):
    """Token ids and encoder outputs (max length 120 and 300) for PROMPTS."""
    t = {}
    for max_len in (120, 300):
        texts = [p.lower().strip() for p in PROMPTS]  # the pipeline's clean_caption=False preprocessing
        enc = tok(texts, padding="max_length", max_length=max_len, truncation=True,
                  add_special_tokens=True, return_tensors="pt")
        with torch.no_grad():
            out = t5(enc.input_ids, attention_mask=enc.attention_mask)[0]
        t[f"ids_{max_len}"] = enc.input_ids.float()
        t[f"mask_{max_len}"] = enc.attention_mask.float()
        t[f"embeds_{max_len}"] = out
    save(os.path.join(OUT, "goldens", "t5_encoder.safetensors"), t,
         {"prompts": json.dumps(PROMPTS)})
    # The same encoder stored in bf16: the golden is the bf16 weights upcast to f32.
    folder = os.path.join(OUT, "t5_bf16")
    t5b = copy_model(t5).to(torch.bfloat16)
    t5b.save_pretrained(folder, safe_serialization=True)
    t5f = t5b.to(torch.float32)
    enc = tok([p.lower().strip() for p in PROMPTS[:3]], padding="max_length", max_length=16,
              truncation=True, return_tensors="pt")
    with torch.no_grad():
        out = t5f(enc.input_ids, attention_mask=enc.attention_mask)[0]
    save(os.path.join(OUT, "goldens", "t5_bf16.safetensors"),
         {"ids": enc.input_ids.float(), "mask": enc.attention_mask.float(), "embeds": out})


def copy_model(m):
    import copy
    return copy.deepcopy(m)


def make_vae_golden(vae):
    g = torch.Generator().manual_seed(21)
    z = torch.randn(2, 4, 5, 7, generator=g)
    with torch.no_grad():
        img = vae.decode(z / vae.config.scaling_factor, return_dict=False)[0]
    save(os.path.join(OUT, "goldens", "vae_decoder.safetensors"), {"latents": z, "image": img},
         {"scaling_factor": vae.config.scaling_factor})


def make(name, spec, seed, stack):
    tok, t5, vae, sp_path = stack
    folder = os.path.join(MODELS, f"pixart-{name}-tiny")
    shutil.rmtree(folder, ignore_errors=True)
    model = PixArtTransformer2DModel(**spec["config"]).eval()
    randomize(model, seed)
    sched = DPMSolverMultistepScheduler(**spec["scheduler"])
    pipe_cls = getattr(diffusers, spec["pipeline"])
    full = pipe_cls(tokenizer=tok, text_encoder=t5, vae=vae, transformer=model, scheduler=sched)
    # Small shards so that every component exercises the sharded-index loader.
    full.save_pretrained(folder, safe_serialization=True, max_shard_size="48KB")
    shutil.copy(sp_path, os.path.join(folder, "tokenizer", "spiece.model"))

    cfg = model.config
    h, w = spec["latent_hw"]
    g = torch.Generator().manual_seed(seed + 1)
    os.makedirs(os.path.join(OUT, "goldens"), exist_ok=True)

    # One forward, batch 2, different timesteps, padded text.
    x = torch.randn(2, cfg.in_channels, h, w, generator=g)
    t = torch.tensor([999, 421], dtype=torch.int64)
    enc, mask = text_inputs(g, 2, spec["text_len"], cfg.caption_channels)
    added = {"resolution": None, "aspect_ratio": None}
    inputs = dict(hidden_states=x, timestep=t.float(), encoder_hidden_states=enc,
                  encoder_attention_mask=mask.float())
    if model.use_additional_conditions:
        added = {"resolution": torch.tensor([[h * 8.0, w * 8.0], [h * 8.0, w * 8.0]]),
                 "aspect_ratio": torch.tensor([[h / w], [h / w]])}
        inputs.update(resolution=added["resolution"], aspect_ratio=added["aspect_ratio"])
    with torch.no_grad():
        out = model(x, encoder_hidden_states=enc, encoder_attention_mask=mask, timestep=t,
                    added_cond_kwargs=added, return_dict=False)[0]
    save(os.path.join(OUT, "goldens", f"pixart_{name}_forward.safetensors"),
         dict(inputs, output=out))

    # The full pipeline loop with CFG from embeddings to latents.
    pipe = pipe_cls(tokenizer=None, text_encoder=None, vae=None, transformer=model,
                    scheduler=DPMSolverMultistepScheduler.from_pretrained(
                        os.path.join(folder, "scheduler")))
    pe, pm = text_inputs(g, 1, spec["text_len"], cfg.caption_channels)
    ne, nm = text_inputs(g, 1, spec["text_len"], cfg.caption_channels)
    nm[:] = 0
    nm[0, :3] = 1
    latents = torch.randn(1, cfg.in_channels, h, w, generator=g)
    with torch.no_grad():
        result = pipe(negative_prompt=None, prompt_embeds=pe, prompt_attention_mask=pm, negative_prompt_embeds=ne,
                      negative_prompt_attention_mask=nm, latents=latents.clone(),
                      height=h * 8, width=w * 8, num_inference_steps=spec["steps"],
                      guidance_scale=spec["guidance"], output_type="latent",
                      use_resolution_binning=False, return_dict=False)[0]
    save(os.path.join(OUT, "goldens", f"pixart_{name}_loop.safetensors"),
         dict(prompt_embeds=pe, prompt_attention_mask=pm.float(), negative_prompt_embeds=ne,
              negative_prompt_attention_mask=nm.float(), latents=latents, output=result),
         dict(steps=spec["steps"], guidance_scale=spec["guidance"], height=h * 8, width=w * 8))
    print(name, "forward", tuple(out.shape), "loop", tuple(result.shape),
          "timesteps", pipe.scheduler.timesteps.tolist())

    # From prompt to image, through the folder as diffusers loads it.
    e2e = spec["e2e"]
    loaded = pipe_cls.from_pretrained(folder)
    with torch.no_grad():
        image = loaded(prompt=e2e["prompts"], negative_prompt=e2e["negative"],
                       height=e2e["height"], width=e2e["width"],
                       num_inference_steps=e2e["steps"], guidance_scale=e2e["guidance"],
                       generator=torch.Generator().manual_seed(e2e["seed"]),
                       use_resolution_binning=e2e["binning"], clean_caption=False,
                       output_type="np", return_dict=False)[0]
    save(os.path.join(OUT, "goldens", f"pipeline_{name}.safetensors"),
         {"image": torch.from_numpy(image)}, {"request": json.dumps(e2e)})
    print(name, "image", image.shape)


if __name__ == "__main__":
    torch.manual_seed(0)
    os.makedirs(os.path.join(OUT, "goldens"), exist_ok=True)
    tok, t5, vae, sp_path, tmp = make_text_stack(99)
    make_text_goldens(tok, t5)
    make_vae_golden(vae)
    make("alpha", SPECS["alpha"], 1234, (tok, t5, vae, sp_path))
    make("sigma", SPECS["sigma"], 5678, (tok, t5, vae, sp_path))
    shutil.rmtree(tmp)
