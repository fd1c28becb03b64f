#!/usr/bin/env python3
"""The cheap checks of a transformer checkpoint before a full evaluation
(evaluate.py samples 24 pictures; this takes seconds): on training latents,
noised to t = 300, 600 and 900,

  x0 error  the mean squared error of the model's one-step estimate of the
            clean latents, beside the error of guessing the data's mean
            (a model that has learned the layout at that noise beats it);
  decoded   those estimates through the VAE, scored by classify.py against
            the pictures' own captions (how many already show the scene);
  caption   the training loss with the caption, with "" and with another
            picture's caption (the caption must lower it).

    python3 tools/demo_model/gate.py out/demo_train/ckpt-2000 --work out/demo_train \\
        --prediction v_prediction
"""
import argparse
import json
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see train.py

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import classify  # noqa: E402
import train  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint", help="a folder with transformer/ and text_encoder/")
    ap.add_argument("--work", default="out/demo_train", help="tokenizer/, vae/, latents.npy")
    ap.add_argument("--data", default="out/demo_data")
    ap.add_argument("--prediction", default="v_prediction", choices=["v_prediction", "epsilon"])
    ap.add_argument("--count", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from diffusers import AutoencoderKL, PixArtTransformer2DModel
    from transformers import T5EncoderModel
    model = PixArtTransformer2DModel.from_pretrained(os.path.join(a.checkpoint, "transformer")).eval()
    t5 = T5EncoderModel.from_pretrained(os.path.join(a.checkpoint, "text_encoder")).eval()
    vae = AutoencoderKL.from_pretrained(os.path.join(a.work, "vae")).eval()
    latents = np.load(os.path.join(a.work, "latents.npy"), mmap_mode="r")
    records = json.load(open(os.path.join(a.data, "captions.json")))
    idx = np.random.default_rng(1).choice(len(records), a.count, replace=False)
    x0 = torch.from_numpy(np.stack([latents[i] for i in idx]))
    tok = train.load_tokenizer(a)
    ids, mask = train.tokenize(tok, [records[i]["caption"] for i in idx])
    null_ids, null_mask = train.tokenize(tok, [""] * a.count)
    betas = torch.linspace(train.SCHEDULER["beta_start"], train.SCHEDULER["beta_end"], 1000,
                           dtype=torch.float64)
    abar = torch.cumprod(1 - betas, 0).float()
    guess = latents[:2000].mean(axis=(0, 2, 3), keepdims=True)
    base = float(((x0.numpy() - guess) ** 2).mean())
    gen = torch.Generator().manual_seed(2)
    rows = []
    with torch.no_grad():
        for t in (300, 600, 900):
            ab = abar[t]
            eps = torch.randn(x0.shape, generator=gen)
            xt = ab.sqrt() * x0 + (1 - ab).sqrt() * eps
            target = eps if a.prediction == "epsilon" else ab.sqrt() * eps - (1 - ab).sqrt() * x0
            losses = {}
            for name, (i_, m_) in {"caption": (ids, mask), "empty": (null_ids, null_mask),
                                   "other": (ids.roll(1, 0), mask.roll(1, 0))}.items():
                text = t5(input_ids=i_, attention_mask=m_)[0]
                pred = model(xt, encoder_hidden_states=text, encoder_attention_mask=m_,
                             timestep=torch.full((a.count,), t),
                             added_cond_kwargs={"resolution": None, "aspect_ratio": None},
                             return_dict=False)[0]
                losses[name] = float(((pred - target) ** 2).mean())
                if name == "caption":
                    if a.prediction == "epsilon":
                        est = (xt - (1 - ab).sqrt() * pred) / ab.sqrt()
                    else:
                        est = ab.sqrt() * xt - (1 - ab).sqrt() * pred
            x0_err = float(((est - x0) ** 2).mean())
            img = vae.decode(est / vae.config.scaling_factor).sample
            img = ((img.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).numpy()
            passed = sum(classify.check(img[k], records[i])["pass"] for k, i in enumerate(idx))
            rows.append((t, x0_err, passed, losses))
    print(f"{a.checkpoint}: {a.count} training latents; guessing the mean: x0 error {base:.3f}")
    for t, err, passed, losses in rows:
        print(f"t={t}: x0 error {err:.3f}, decoded {passed}/{a.count} pass, loss caption "
              f"{losses['caption']:.4f} / empty {losses['empty']:.4f} / other {losses['other']:.4f}")


if __name__ == "__main__":
    main()
