"""The model card (README.md) of the demo model's folder: what it is, how
it was trained (from --work/log.json and the data's meta.json), versions."""
import json
import os
import platform
import subprocess


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def write_card(a):
    import diffusers
    import sentencepiece
    import torch
    import transformers
    log = json.load(open(os.path.join(a.work, "log.json")))
    data = json.load(open(os.path.join(a.data, "meta.json"))) if os.path.exists(
        os.path.join(a.data, "meta.json")) else {}
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = "unknown"
    v, d, t = log.get("vae", {}), log.get("dit", {}), log.get("text", {})
    # One line per distinct command (a --stage all run logs every stage with the same one).
    commands = "\n".join(dict.fromkeys(f"    {log[k]['command']}"
                                        for k in ("tokenizer", "vae", "latents", "text", "dit")
                                        if k in log))
    card = f"""# demo-shapes

A small PixArt-alpha model of xdit's own (issue 40): it draws one or two
circles, squares and triangles of eight colours on a plain background, from
captions of one grammar (`tools/demo_model/grammar.py`):

    a {{small|large}} {{colour}} {{circle|square|triangle}} {{on the left|on the right|at the top|at the bottom|in the center}}
      [and a ... ...] on a {{colour}} background

Colours: red, green, blue, yellow, white, black, purple, orange. 256 x 256
pixels (the transformer's sample_size 32 through the VAE's factor 8).

## Components
- transformer: PixArtTransformer2DModel, {a.dit_layers} blocks, {a.dit_heads} heads x {a.dit_head_dim},
  patch {a.patch_size}, caption_channels {a.t5_dim}, out_channels 4 ({a.prediction}, no learned
  sigma), no micro-conditions; {d.get('transformer_parameters', '?')} parameters.
- text_encoder: T5EncoderModel (v1.1 style, gated-gelu), d_model {a.t5_dim}, {a.t5_layers} layers,
  {"trained from random initialisation first alone, to predict each picture's 16 x 16 layout of colours and shapes through a one-cross-attention readout (the text stage, tools/demo_model/text_pretrain.py), then" if d.get('t5_from_text_stage') else "trained from random initialisation"}
  jointly with the transformer; {d.get('t5_parameters', '?')} parameters.
- tokenizer: a unigram SentencePiece model (`spiece.model`) trained on the
  grammar's sentences, every word one piece, T5's special ids.
- vae: AutoencoderKL, block_out_channels {a.vae_channels}, 4 latent channels, 8x
  down, no mid-block attention; scaling_factor {v.get('scaling_factor', '?')}; {v.get('parameters', '?')} parameters.
- scheduler: DPMSolverMultistepScheduler as PixArt-alpha ships it, with
  prediction_type "{a.prediction}".
Weights in {'bfloat16' if a.bf16 else 'float32'}.

## Data
`tools/demo_model/make_data.py --count {data.get('count', '?')} --seed {data.get('seed', '?')}`: anti-aliased
shapes with jittered centre, size and shade, half the scenes with two
objects. No training scene holds one of the 24 held-out (colour, shape,
position) triples; `tools/demo_model/heldout.json` lists the 24 test captions.

## Training (commit {commit}; {cpu_name()}, {a.threads} threads)
    python3 tools/demo_model/make_data.py --out {a.data} --count {data.get('count', '?')} --seed {data.get('seed', '?')}
{commands}

| stage | steps x batch | time | final loss |
|---|---|---|---|
| data | {data.get('count', '?')} pictures | {data.get('seconds', '?')} s | |
| VAE | {v.get('steps', '?')} x {v.get('batch', '?')} ({v.get('crop', '?')} px crops) | {v.get('seconds', '?')} s ({v.get('cpu_seconds_per_thread', '?')} s CPU per thread) | L1 {v.get('final_l1_crops', '?')} (full pictures {v.get('final_l1_full', '?')}) |
| latents | {log.get('latents', {}).get('pictures', '?')} pictures | {log.get('latents', {}).get('seconds', '?')} s | |
| text (T5 alone) | {t.get('steps', '-')} x {t.get('batch', '-')} | {t.get('seconds', '-')} s ({t.get('cpu_seconds_per_thread', '-')} s CPU per thread) | MSE {t.get('final_loss', '-')} (held-out layouts {t.get('heldout_layouts_pass', '-')}) |
| transformer + T5 | {d.get('steps', '?')} x {d.get('batch', '?')} | {d.get('seconds', '?')} s ({d.get('cpu_seconds_per_thread', '?')} s CPU per thread) | MSE {d.get('final_loss', '?')} (trained on it weighted 1 + {d.get('object_weight', 0)} on the objects) |

Versions: torch {torch.__version__}, diffusers {diffusers.__version__}, transformers
{transformers.__version__}, sentencepiece {sentencepiece.__version__}.

## License
Apache License 2.0, the project's own (the repository's `LICENSE`), data
and weights included: everything here was drawn and trained by the
committed scripts.
"""
    with open(os.path.join(a.out, "README.md"), "w") as f:
        f.write(card)
