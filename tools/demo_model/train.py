#!/usr/bin/env python3
"""Trains the demo model of issue 40 on CPU and saves it as a diffusers
PixArt-alpha folder (model_index.json, scheduler, text_encoder, tokenizer,
transformer, vae) with a model card.

    python3 tools/demo_model/make_data.py --out out/demo_data --count 20000
    python3 tools/demo_model/train.py --data out/demo_data --work out/demo_train \\
        --out models/demo-shapes

Stages, each saving under --work so that a later one can run alone (--stage):
  tokenizer  a unigram SentencePiece vocabulary of the grammar's words with
             T5's special ids (pad 0, eos 1, unk 2), spiece.model
  vae        an AutoencoderKL (8x down, 4 latent channels) on random crops of
             the pictures: L1 + a small KL term; its scaling_factor is 1 / the
             standard deviation of the latents it then gives
  latents    every picture through the VAE encoder (the posterior mean)
  text       the T5 encoder alone, from random weights, on a regression: a
             one-cross-attention readout of its outputs predicts each
             picture's colours on a 16 x 16 layout (text_pretrain.py), so its
             tokens bind each colour to its role; --work/text_encoder_init
  dit        the PixArtTransformer2DModel with the DDPM objective (linear
             betas 1e-4 .. 0.02 over 1000 steps, as the scheduler config),
             predicting v (--prediction; epsilon weighs the high-noise
             steps that set the layout by their tiny SNR), jointly with the
             T5 encoder from the text stage (--t5-lr-scale times the
             learning rate; random weights if that stage did not run); 10 % of the captions are replaced by ""
             (what the pipeline encodes as the negative prompt) so that
             classifier-free guidance works; EMA weights are saved, and
             every --checkpoint-every steps under --work/ckpt-STEP
  save       the diffusers folder and its model card (README.md)
Every stage is deterministic for its seed (torch's CPU kernels with a fixed
thread count); the times it took go to --work/log.json and the model card.
"""
import argparse
import io
import json
import math
import os
import shutil
import sys
import time

# Idle OpenMP threads sleep instead of spinning: on 2 cores shared with
# other work a spinning thread steals the core its partner needs (a VAE step
# took 10 s instead of 0.4 s beside a compiler).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import card  # noqa: E402
import grammar  # noqa: E402
import make_data  # noqa: E402
import text_pretrain  # noqa: E402

# The scheduler as the PixArt-alpha hub folders ship it (as tools/goldens/make_pixart.py).
SCHEDULER = dict(algorithm_type="dpmsolver++", beta_end=0.02, beta_schedule="linear",
                 beta_start=0.0001, dynamic_thresholding_ratio=0.995, lower_order_final=True,
                 num_train_timesteps=1000, prediction_type="epsilon", sample_max_value=1.0,
                 solver_order=2, solver_type="midpoint", steps_offset=0, thresholding=False,
                 trained_betas=None, use_karras_sigmas=False)
TEXT_LEN = 32  # tokens the training pads to; every caption of the grammar fits (checked)


def log_stage(work, name, **values):
    path = os.path.join(work, "log.json")
    log = json.load(open(path)) if os.path.exists(path) else {}
    log[name] = dict(values, command="python3 tools/demo_model/train.py " + " ".join(sys.argv[1:]))
    with open(path, "w") as f:
        json.dump(log, f, indent=1)
    print(f"[{name}] " + ", ".join(f"{k} {v}" for k, v in values.items()), flush=True)


# ---------------------------------------------------------------- tokenizer

def train_tokenizer(a):
    import sentencepiece as spm
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(grammar.vocabulary_sentences()), model_writer=buf,
        vocab_size=a.vocab_size, model_type="unigram", pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
        character_coverage=1.0, normalization_rule_name="nmt_nfkc", hard_vocab_limit=False,
        minloglevel=2)
    tdir = os.path.join(a.work, "tokenizer")
    os.makedirs(tdir, exist_ok=True)
    with open(os.path.join(tdir, "spiece.model"), "wb") as f:
        f.write(buf.getvalue())
    sp = spm.SentencePieceProcessor(model_file=os.path.join(tdir, "spiece.model"))
    words = sorted({w for s in grammar.vocabulary_sentences() for w in s.split()})
    split = [w for w in words if len(sp.encode(w)) != 1]
    assert not split, f"words that are not one piece: {split}"
    log_stage(a.work, "tokenizer", pieces=sp.get_piece_size(), words=len(words))


def load_tokenizer(a):
    from transformers import T5Tokenizer
    tok = T5Tokenizer.from_pretrained(os.path.join(a.work, "tokenizer"))
    return tok


def tokenize(tok, captions):
    enc = tok(captions, padding="max_length", max_length=TEXT_LEN, truncation=True,
              add_special_tokens=True, return_tensors="pt")
    assert int(enc.attention_mask.sum(1).max()) < TEXT_LEN, "a caption is longer than TEXT_LEN"
    return enc.input_ids, enc.attention_mask


# ---------------------------------------------------------------- VAE

def make_vae(a):
    from diffusers import AutoencoderKL
    ch = tuple(int(c) for c in a.vae_channels.split(","))
    assert len(ch) == 4, "8x down needs four blocks"
    # No mid-block attention: the VAE is fully convolutional, so training on
    # crops says all about the full picture.
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4,
                        down_block_types=("DownEncoderBlock2D",) * 4,
                        up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=ch,
                        layers_per_block=1, norm_num_groups=a.vae_groups, sample_size=256,
                        mid_block_add_attention=False)
    init_vae(vae, a.vae_offset)
    return vae


def init_vae(vae, offset):
    """A start that trains in minutes, not hours. With PyTorch's default
    initialisation the VAE's decoder ignores its input (a dozen convolutions
    in a row each shrink the signal), and GroupNorm at the end of the encoder
    and of the decoder fixes every picture's mean feature, so the colour of a
    flat background cannot get through: after 800 steps the reconstructions
    had the shapes' edges in two or three wrong colours. Here every
    convolution keeps the signal's scale (std 1/sqrt(fan_in), zero bias),
    every residual branch starts at zero (the blocks are identities), and one
    channel before each of those two GroupNorms carries a large constant, so
    that the group's statistics hardly depend on the picture and the norm
    passes the colour on nearly linearly (with norm_num_groups 1). The
    posterior's log-variance starts at -10, not 0, so the latents are not
    drowned in unit noise."""
    with torch.no_grad():
        for name, m in vae.named_modules():
            if isinstance(m, torch.nn.Conv2d):
                m.weight.normal_(0, m.weight[0].numel() ** -0.5)
                m.bias.zero_()
                if ".resnets." in name and name.endswith("conv2"):
                    m.weight.zero_()
        vae.quant_conv.bias[4:].fill_(-10.0)
        vae.encoder.mid_block.resnets[-1].conv2.bias[0] += offset
        vae.decoder.up_blocks[-1].resnets[-1].conv2.bias[0] += offset


def to_unit(x):
    """uint8 NHWC -> float NCHW in [-1, 1]."""
    return torch.from_numpy(np.ascontiguousarray(x)).permute(0, 3, 1, 2).float() / 127.5 - 1


def random_crop(images, rng, c):
    """A c x c crop with some edge in it: a flat crop teaches nothing that the
    full pictures (which always hold an object) need."""
    while True:
        i = rng.integers(images.shape[0])
        y, x = rng.integers(0, images.shape[1] - c + 1, 2)
        crop = images[i, y:y + c, x:x + c]
        if crop.reshape(-1, 3).std(0).max() >= 10:
            return crop


def train_vae(a):
    images = np.load(os.path.join(a.data, "images.npy"), mmap_mode="r")
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    vae = make_vae(a).train()
    opt = torch.optim.AdamW(vae.parameters(), lr=a.vae_lr, weight_decay=0.0)
    c = a.vae_crop
    t0, c0, ema = time.time(), time.process_time(), None
    for step in range(1, a.vae_steps + 1):
        x = to_unit(np.stack([random_crop(images, rng, c) for _ in range(a.vae_batch)]))
        post = vae.encode(x).latent_dist
        rec = vae.decode(post.sample()).sample
        l1 = (rec - x).abs().mean()
        kl = post.kl().mean() / (4 * (c // 8) ** 2)  # per latent element
        loss = l1 + a.vae_kl * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        lr = a.vae_lr * min(1.0, step / 100) * (0.5 * (1 + math.cos(math.pi * step / a.vae_steps)) * 0.9 + 0.1)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        ema = l1.item() if ema is None else 0.98 * ema + 0.02 * l1.item()
        if step % a.log_every == 0 or step == a.vae_steps:
            el = time.time() - t0
            cpu = (time.process_time() - c0) / a.threads
            print(f"vae step {step}/{a.vae_steps} l1 {ema:.4f} kl {kl.item():.3f} "
                  f"{el / step:.3f} s/step ({cpu / step:.3f} CPU), {el:.0f} s", flush=True)
    vae.eval()
    # Full pictures now: the reconstruction error and the latents' scale.
    with torch.no_grad():
        x = to_unit(images[:32])
        z = vae.encode(x).latent_dist.mode()
        full_l1 = (vae.decode(z).sample.clamp(-1, 1) - x).abs().mean().item()
    std = z.std().item()
    vae.register_to_config(scaling_factor=float(f"{1.0 / std:.5f}"))
    vae.save_pretrained(os.path.join(a.work, "vae"), safe_serialization=True)
    log_stage(a.work, "vae", steps=a.vae_steps, batch=a.vae_batch, crop=c, seconds=round(time.time() - t0),
              cpu_seconds_per_thread=round((time.process_time() - c0) / a.threads),
              final_l1_crops=round(ema, 5), final_l1_full=round(full_l1, 5),
              latent_mean=round(z.mean().item(), 4), latent_std=round(std, 4),
              scaling_factor=vae.config.scaling_factor,
              parameters=sum(p.numel() for p in vae.parameters()))


def encode_latents(a):
    from diffusers import AutoencoderKL
    vae = AutoencoderKL.from_pretrained(os.path.join(a.work, "vae")).eval()
    images = np.load(os.path.join(a.data, "images.npy"), mmap_mode="r")
    n = images.shape[0]
    out = np.lib.format.open_memmap(os.path.join(a.work, "latents.npy"), mode="w+",
                                    dtype=np.float32,
                                    shape=(n, 4, images.shape[1] // 8, images.shape[2] // 8))
    t0, c0 = time.time(), time.process_time()
    with torch.no_grad():
        for i in range(0, n, 64):
            z = vae.encode(to_unit(images[i:i + 64])).latent_dist.mode()
            out[i:i + 64] = (z * vae.config.scaling_factor).numpy()
            if (i // 64) % 20 == 0:
                print(f"latents {i + len(z)}/{n} {time.time() - t0:.0f} s", flush=True)
    out.flush()
    log_stage(a.work, "latents", pictures=n, seconds=round(time.time() - t0),
              cpu_seconds_per_thread=round((time.process_time() - c0) / a.threads))


# ---------------------------------------------------------------- transformer + T5

def make_t5(a, vocab):
    from transformers import T5Config, T5EncoderModel
    heads = a.t5_dim // 32
    return T5EncoderModel(T5Config(
        vocab_size=vocab, d_model=a.t5_dim, d_kv=32, d_ff=2 * a.t5_dim, num_layers=a.t5_layers,
        num_heads=heads, relative_attention_num_buckets=32, relative_attention_max_distance=128,
        feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6, tie_word_embeddings=False,
        dropout_rate=0.0))


def make_transformer(a):
    from diffusers import PixArtTransformer2DModel
    hidden = a.dit_heads * a.dit_head_dim
    # sample_size 32 (256 px through the 8x VAE): diffusers bins PixArt-alpha
    # sizes for 32, 64 and 128 only, and 128 would turn on the micro-conditions.
    # out_channels 4: the prediction only, no learned sigma (the pipeline takes the
    # prediction as it is when out_channels != 2 x latent channels).
    model = PixArtTransformer2DModel(
        sample_size=32, num_layers=a.dit_layers, num_attention_heads=a.dit_heads,
        attention_head_dim=a.dit_head_dim, in_channels=4, out_channels=4,
        cross_attention_dim=hidden, caption_channels=a.t5_dim, patch_size=a.patch_size,
        norm_elementwise_affine=False, norm_eps=1e-6, interpolation_scale=1)
    if a.pixart_init:
        init_pixart(model)
    return model


def init_pixart(model):
    """PixArt-alpha's own initialisation (PixArt.initialize_weights in the
    PixArt-alpha repository; diffusers' class only loads weights): Xavier
    linears and patch embedding, N(0, 0.02) timestep MLP, adaLN and caption
    projection, and zeros for each block's cross-attention output and the
    final projection, so every block starts as the identity."""
    nn = torch.nn
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    m.bias.zero_()
        w = model.pos_embed.proj.weight
        nn.init.xavier_uniform_(w.view(w.shape[0], -1))
        # The caption projection keeps Xavier: PixArt-alpha's N(0, 0.02) is
        # sized for T5-XXL's 4096 channels; on 128 it gives the
        # cross-attention text features of ~0.03, and the first full run
        # (4200 steps) learned to ignore the caption (the same loss with the
        # caption, with "" and with another picture's caption).
        for lin in (model.adaln_single.emb.timestep_embedder.linear_1,
                    model.adaln_single.emb.timestep_embedder.linear_2, model.adaln_single.linear):
            nn.init.normal_(lin.weight, std=0.02)
        for block in model.transformer_blocks:
            block.attn2.to_out[0].weight.zero_()
            block.attn2.to_out[0].bias.zero_()
        model.proj_out.weight.zero_()
        model.proj_out.bias.zero_()


class Ema:
    def __init__(self, modules, decay):
        self.decay = decay
        self.params = [p for m in modules for p in m.parameters()]
        self.shadow = [p.detach().clone() for p in self.params]
        self.n = 0

    @torch.no_grad()
    def update(self):
        self.n += 1
        d = min(self.decay, (1 + self.n) / (10 + self.n))
        for s, p in zip(self.shadow, self.params):
            s.lerp_(p.detach(), 1 - d)

    @torch.no_grad()
    def save(self, model, t5, work):
        """The EMA weights as diffusers / transformers folders under work
        (transformer/, text_encoder/); the training weights are kept."""
        live = [p.detach().clone() for p in self.params]
        for s, p in zip(self.shadow, self.params):
            p.copy_(s)
        model.save_pretrained(os.path.join(work, "transformer"), safe_serialization=True)
        t5.save_pretrained(os.path.join(work, "text_encoder"), safe_serialization=True)
        for v, p in zip(live, self.params):
            p.copy_(v)


def object_weights(a, records, side):
    """The dit loss's weight of each latent pixel, [n, 1, side, side]: 1, and
    1 + --object-weight on and one latent pixel around each object (its
    coverage at the latents' resolution, dilated), so that the outlines, where
    a circle, a square and a triangle of one area differ, weigh more than the
    flat background. The first run without it drew one round blob for all
    three shapes. Per-pixel weights keep each pixel's optimum (the mean of its
    value given the noisy latents and the caption); they only spend more of
    the model's capacity where the objects are."""
    if not a.object_weight:
        return torch.ones(len(records), 1, side, side)
    if "places" not in records[0]:
        raise SystemExit(f"{a.data}/captions.json has no places: draw the data again with make_data.py")
    cov = np.stack([make_data.shape_coverage(r, r["places"], side).max(-1) for r in records])
    cov = torch.nn.functional.max_pool2d(torch.from_numpy(cov)[:, None], 3, 1, 1)
    return 1 + a.object_weight * cov


def train_dit(a):
    latents = torch.from_numpy(np.load(os.path.join(a.work, "latents.npy")))
    records = json.load(open(os.path.join(a.data, "captions.json")))
    n = min(len(records), latents.shape[0])
    weights = object_weights(a, records[:n], latents.shape[-1])
    tok = load_tokenizer(a)
    ids, mask = tokenize(tok, [r["caption"] for r in records[:n]])
    null_ids, null_mask = tokenize(tok, [""])
    torch.manual_seed(a.seed)
    t5 = make_t5(a, len(tok))
    init = os.path.join(a.work, "text_encoder_init")
    pretrained = os.path.isdir(init)
    if pretrained:  # the text stage's encoder
        from transformers import T5EncoderModel
        t5 = T5EncoderModel.from_pretrained(init)
    t5.train()
    model = make_transformer(a).train()
    params = list(model.parameters()) + list(t5.parameters())
    t5_scale = a.t5_lr_scale if pretrained else 1.0
    opt = torch.optim.AdamW([{"params": list(model.parameters()), "scale": 1.0},
                             {"params": list(t5.parameters()), "scale": t5_scale}],
                            lr=a.dit_lr, weight_decay=0.0, betas=(0.9, 0.99))
    ema = Ema([model, t5], a.ema)
    betas = torch.linspace(SCHEDULER["beta_start"], SCHEDULER["beta_end"], 1000, dtype=torch.float64)
    abar = torch.cumprod(1 - betas, 0).float()
    gen = torch.Generator().manual_seed(a.seed)
    t0, c0, avg = time.time(), time.process_time(), None
    first = 1
    if a.resume:  # a run stopped part-way: its last checkpoint's full state
        st = torch.load(a.resume, weights_only=False)
        model.load_state_dict(st["model"])
        t5.load_state_dict(st["t5"])
        opt.load_state_dict(st["opt"])
        for sh, v in zip(ema.shadow, st["ema_shadow"]):
            sh.copy_(v)
        ema.n, avg, first = st["ema_n"], st["avg"], st["step"] + 1
        gen.set_state(st["gen"])
        print(f"resumed from {a.resume} after step {st['step']}", flush=True)
    for step in range(first, a.dit_steps + 1):
        idx = torch.randint(0, n, (a.dit_batch,), generator=gen)
        x0 = latents[idx]
        b_ids, b_mask = ids[idx].clone(), mask[idx].clone()
        drop = torch.rand(a.dit_batch, generator=gen) < a.cfg_dropout
        b_ids[drop], b_mask[drop] = null_ids, null_mask
        # t = 1000·u^p: p < 1 draws more high-noise steps (where the layout is set).
        u = torch.rand(a.dit_batch, generator=gen)
        t = (1000 * u.pow(a.t_power)).long().clamp(0, 999)
        eps = torch.randn(x0.shape, generator=gen)
        ab = abar[t].view(-1, 1, 1, 1)
        xt = ab.sqrt() * x0 + (1 - ab).sqrt() * eps
        text = t5(input_ids=b_ids, attention_mask=b_mask)[0]
        pred = model(xt, encoder_hidden_states=text, encoder_attention_mask=b_mask, timestep=t,
                     added_cond_kwargs={"resolution": None, "aspect_ratio": None},
                     return_dict=False)[0]
        target = eps if a.prediction == "epsilon" else ab.sqrt() * eps - (1 - ab).sqrt() * x0
        err = (pred - target) ** 2
        w = weights[idx]
        loss = (err * w).sum() / (w.sum() * err.shape[1])  # the objects' latents count more
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        warm = min(1.0, step / a.warmup)
        cos = 0.5 * (1 + math.cos(math.pi * step / a.dit_steps))
        for g in opt.param_groups:
            g["lr"] = a.dit_lr * g["scale"] * warm * (0.1 + 0.9 * cos)
        opt.step()
        ema.update()
        mse = err.mean().item()  # the plain MSE: the log's loss, comparable between runs
        avg = mse if avg is None else 0.99 * avg + 0.01 * mse
        if step % a.log_every == 0 or step == a.dit_steps:
            el = time.time() - t0
            cpu = (time.process_time() - c0) / a.threads
            done = step - first + 1  # (this process's steps, after a resume)
            print(f"dit step {step}/{a.dit_steps} loss {avg:.4f} {el / done:.3f} s/step "
                  f"({cpu / done:.3f} CPU), {el:.0f} s", flush=True)
        if a.checkpoint_every and step % a.checkpoint_every == 0 and step < a.dit_steps:
            ckpt = os.path.join(a.work, f"ckpt-{step}")
            ema.save(model, t5, ckpt)
            # Everything to go on from here (--resume): the same run, step for step.
            torch.save({"model": model.state_dict(), "t5": t5.state_dict(),
                        "opt": opt.state_dict(), "ema_shadow": ema.shadow, "ema_n": ema.n,
                        "avg": avg, "step": step, "gen": gen.get_state()},
                       os.path.join(ckpt, "state.pt"))
    ema.save(model, t5, a.work)
    log_stage(a.work, "dit", steps=a.dit_steps, batch=a.dit_batch, pictures=n,
              seconds=round(time.time() - t0),
              cpu_seconds_per_thread=round((time.process_time() - c0) / a.threads),
              final_loss=round(avg, 5), object_weight=a.object_weight,
              t5_from_text_stage=pretrained, t5_lr_scale=t5_scale,
              transformer_parameters=sum(p.numel() for p in model.parameters()),
              t5_parameters=sum(p.numel() for p in t5.parameters()))


# ---------------------------------------------------------------- timing

def bench(a):
    """Seconds per training step of the VAE and the transformer + T5 as
    configured, on random data: wall time and this process's CPU time / threads
    (what the wall time would be on cores nobody else uses)."""
    torch.manual_seed(a.seed)
    vae = make_vae(a).train()
    vopt = torch.optim.AdamW(vae.parameters(), lr=1e-4)
    x = torch.rand(a.vae_batch, 3, a.vae_crop, a.vae_crop) * 2 - 1

    def vae_step():
        post = vae.encode(x).latent_dist
        loss = (vae.decode(post.sample()).sample - x).abs().mean() + a.vae_kl * post.kl().mean()
        vopt.zero_grad()
        loss.backward()
        vopt.step()

    t5, model = make_t5(a, 152).train(), make_transformer(a).train()
    params = list(model.parameters()) + list(t5.parameters())
    dopt = torch.optim.AdamW(params, lr=1e-4)
    lat = torch.randn(a.dit_batch, 4, 32, 32)
    ids = torch.randint(3, 52, (a.dit_batch, TEXT_LEN))
    mask = (torch.arange(TEXT_LEN) < 24).long().expand(a.dit_batch, -1)

    def dit_step():
        text = t5(input_ids=ids, attention_mask=mask)[0]
        pred = model(lat, encoder_hidden_states=text, encoder_attention_mask=mask,
                     timestep=torch.randint(0, 1000, (a.dit_batch,)),
                     added_cond_kwargs={"resolution": None, "aspect_ratio": None},
                     return_dict=False)[0]
        loss = torch.nn.functional.mse_loss(pred, lat)
        dopt.zero_grad()
        loss.backward()
        dopt.step()

    with torch.no_grad():
        enc = make_vae(a).eval()
        imgs = torch.rand(16, 3, 256, 256) * 2 - 1

        def encode_step():
            enc.encode(imgs).latent_dist.mode()

    for name, fn, n in (("vae", vae_step, 10), ("dit", dit_step, 10), ("encode16", encode_step, 3)):
        fn()
        w, c = time.time(), time.process_time()
        for _ in range(n):
            if name == "encode16":
                with torch.no_grad():
                    fn()
            else:
                fn()
        w, c = (time.time() - w) / n, (time.process_time() - c) / n
        print(f"{name}: {w:.3f} s/step wall, {c / a.threads:.3f} s/step CPU / {a.threads} threads")
    print(f"transformer parameters {sum(p.numel() for p in model.parameters())}, "
          f"VAE parameters {sum(p.numel() for p in vae.parameters())}")


# ---------------------------------------------------------------- folder

def save_folder(a):
    from diffusers import (AutoencoderKL, DPMSolverMultistepScheduler, PixArtAlphaPipeline,
                           PixArtTransformer2DModel)
    from transformers import T5EncoderModel
    tok = load_tokenizer(a)
    dtype = torch.bfloat16 if a.bf16 else torch.float32
    pipe = PixArtAlphaPipeline(
        tokenizer=tok,
        text_encoder=T5EncoderModel.from_pretrained(os.path.join(a.work, "text_encoder")).to(dtype),
        vae=AutoencoderKL.from_pretrained(os.path.join(a.work, "vae")).to(dtype),
        transformer=PixArtTransformer2DModel.from_pretrained(os.path.join(a.work, "transformer")).to(dtype),
        scheduler=DPMSolverMultistepScheduler(**dict(SCHEDULER, prediction_type=a.prediction)))
    shutil.rmtree(a.out, ignore_errors=True)
    pipe.save_pretrained(a.out, safe_serialization=True)
    # The C++ tokenizer reads spiece.model (transformers 5 writes tokenizer.json only).
    shutil.copy(os.path.join(a.work, "tokenizer", "spiece.model"),
                os.path.join(a.out, "tokenizer", "spiece.model"))
    for comp in ("transformer", "vae", "text_encoder"):  # from_pretrained's work path
        path = os.path.join(a.out, comp, "config.json")
        cfg = json.load(open(path))
        cfg.pop("_name_or_path", None)
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
            f.write("\n")
    card.write_card(a)
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(a.out) for f in fs)
    log_stage(a.work, "save", folder=a.out, bytes=total, dtype=str(dtype))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="out/demo_data")
    ap.add_argument("--work", default="out/demo_train")
    ap.add_argument("--out", default="models/demo-shapes")
    ap.add_argument("--stage", default="all",
                    choices=["all", "tokenizer", "vae", "latents", "text", "dit", "save", "bench"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--vocab-size", type=int, default=64)
    ap.add_argument("--vae-channels", default="8,16,32,64")
    ap.add_argument("--vae-groups", type=int, default=1)
    ap.add_argument("--vae-offset", type=float, default=20.0)
    ap.add_argument("--vae-steps", type=int, default=2500)
    ap.add_argument("--vae-batch", type=int, default=8)
    ap.add_argument("--vae-crop", type=int, default=64)
    ap.add_argument("--vae-lr", type=float, default=1e-3)
    ap.add_argument("--vae-kl", type=float, default=1e-6)
    ap.add_argument("--t5-dim", type=int, default=128)
    ap.add_argument("--t5-layers", type=int, default=4)
    ap.add_argument("--text-steps", type=int, default=1500)
    ap.add_argument("--text-batch", type=int, default=128)
    ap.add_argument("--text-lr", type=float, default=1e-3)
    ap.add_argument("--t5-lr-scale", type=float, default=0.2,
                    help="the T5's learning rate in the dit stage over the transformer's")
    ap.add_argument("--dit-layers", type=int, default=6)
    ap.add_argument("--dit-heads", type=int, default=4,
                    help="divisible by the Ulysses and tensor-parallel degrees the tests run (2, 4)")
    ap.add_argument("--dit-head-dim", type=int, default=32)
    ap.add_argument("--patch-size", type=int, default=2)
    ap.add_argument("--pixart-init", type=int, default=1, help="1: PixArt-alpha's initialisation")
    ap.add_argument("--dit-steps", type=int, default=4000)
    ap.add_argument("--prediction", default="v_prediction", choices=["v_prediction", "epsilon"])
    ap.add_argument("--checkpoint-every", type=int, default=0)
    ap.add_argument("--resume", help="a checkpoint's state.pt: go on from its step")
    ap.add_argument("--t-power", type=float, default=1.0,
                    help="training timesteps 1000 u^p: 1 uniform, 0.5 three quarters above 500")
    ap.add_argument("--dit-batch", type=int, default=32)
    ap.add_argument("--dit-lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--ema", type=float, default=0.999)
    ap.add_argument("--cfg-dropout", type=float, default=0.1)
    ap.add_argument("--object-weight", type=float, default=4.0,
                    help="extra dit loss weight on the objects' latent pixels (0: plain MSE)")
    ap.add_argument("--bf16", action="store_true", help="save the weights in bfloat16")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    os.makedirs(a.work, exist_ok=True)
    if a.stage == "bench":
        return bench(a)
    stages = {"tokenizer": train_tokenizer, "vae": train_vae, "latents": encode_latents,
              "text": lambda a: text_pretrain.train_text(a, make_t5, load_tokenizer(a), tokenize,
                                                         log_stage),
              "dit": train_dit, "save": save_folder}
    for name, fn in stages.items():
        if a.stage in ("all", name):
            fn(a)


if __name__ == "__main__":
    main()
