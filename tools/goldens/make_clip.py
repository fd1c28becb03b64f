#!/usr/bin/env python3
"""Makes the CLIP fixtures and goldens: a small byte-level BPE vocabulary
trained here (laid out like OpenAI CLIP's: the 256 byte symbols, the same with
</w>, one token per merge, then <|startoftext|> and <|endoftext|>), two
tokenizer folders as FLUX and SD3 ship them (pad <|endoftext|>, and SD3
tokenizer_2's pad "!"), a CLIP-L-like CLIPTextModel (quick_gelu) and a
CLIP-G-like CLIPTextModelWithProjection (gelu) with random weights, and what
transformers makes of them.

    python3 tools/goldens/make_clip.py            # from the repository root

Writes
  tests/data/clip/                      model_index.json, tokenizer/, tokenizer_2/,
                                        text_encoder/, text_encoder_2/
  tests/data/goldens/clip_tokens.json   ids and masks per prompt, both tokenizers
  tests/data/goldens/clip_encoders.safetensors
      {l,g}.ids [P, 77], {l,g}.last [P, 77, H], {l,g}.penultimate [P, 77, H],
      {l,g}.pooled [P, H] (g: projected [P, proj])
"""
import json
import os
import shutil

import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers
from transformers import (CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection,
                          CLIPTokenizer)

ROOT = "tests/data/clip"
GOLDENS = "tests/data/goldens"
VERSIONS = {"torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": __import__("tokenizers").__version__}
SPLIT = (r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|"""
         r"""[^\s\p{L}\p{N}]+""")

CORPUS = [
    "a photo of a cat sitting on a mat", "an astronaut riding a horse on mars",
    "a red fox in the snow, highly detailed, 4k", "portrait of an old man with a beard",
    "the city at night with neon lights", "a painting of a golden sunset over the sea",
    "two dogs playing in the park", "it's a beautiful day, isn't it? we'll see",
    "they're here and we've got the photos, i'm sure you'd like them",
    "a bowl of fruit: apples, oranges and bananas", "café au lait, naïve résumé",
    "a small blue bird sits on a green branch near the river", "3 cats and 12 dogs",
    "a watercolor landscape with mountains and a lake", "cinematic lighting, ultra realistic",
]

# Prompts for the token goldens: punctuation, digits, contractions, non-ASCII,
# emoji, runs of whitespace, special-token text, and prompts over 75 tokens.
PROMPTS = [
    "a photo of a cat",
    "A Photo OF a CAT!!!",
    "   leading, trailing   and\tinner \n\n whitespace   ",
    "it's, we'll, they're, I've, I'm, you'd, DON'T, o'clock, 'quoted'",
    "3.14159 and 2,000,000 or 1/2 + 7% = x^2",
    "café au lait — naïve résumé über Ärger",
    "cafe\u0301 (combining accent) \u00c5ngstr\u00f6m \u212b",
    "\u039f\u0394\u039f\u03a3 \u03c3\u03bf\u03c6\u03af\u03b1 \u0130stanbul \u01c5 stra\u00dfe",
    "\u6771\u4eac\u306e\u591c \ud55c\uad6d\uc5b4 \u0645\u0631\u062d\u0628\u0627",
    "emoji \U0001F98A\U0001F525 \U0001F469\u200D\U0001F680 \u2764\uFE0F",
    "full-width \uff11\uff12\uff13 roman \u216b superscript x\u00b2 \u00bd",
    "nbsp\u00a0here ideographic\u3000space zero\u200bwidth",
    "a <|endoftext|> inside <|startoftext|> text <|ENDOFTEXT|>",
    "email@example.com $100.50 #hashtag @user ---> a/b\\c \"quotes\" [x]{y}",
    "",
    " ".join(["a small blue bird sits on a green branch near the river"] * 6),
    " ".join(str(i) for i in range(100)),
]


def bytes_to_unicode():
    """GPT-2's reversible byte → printable character table, as a list in the
    order CLIP's vocab.json lists the byte symbols."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]  # in CLIP's vocab order: printable bytes first ("!" = 0)


def train_merges(max_merges=230):
    """A small BPE trained on CORPUS with CLIP's normalizer and pre-tokenizer:
    the most frequent adjacent pair first (ties: the smaller pair), "</w>" on
    each word's last symbol. Written out here, not with the tokenizers
    trainer, whose tie order changes from run to run."""
    from collections import Counter
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    words = Counter()
    for text in CORPUS:
        for piece, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(text)):
            words[tuple(piece[:-1]) + (piece[-1] + "</w>",)] += 1
    merges = []
    while len(merges) < max_merges:
        pairs = Counter()
        for w, n in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        merged = Counter()
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += n
        words = merged
    return merges


def write_tokenizer(folder, vocab, merges, pad):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")
    special = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>",
               "unk_token": "<|endoftext|>", "pad_token": pad}
    added = {str(vocab[t]): {"content": t, "lstrip": False, "normalized": True, "rstrip": False,
                             "single_word": False, "special": True}
             for t in ["<|startoftext|>", "<|endoftext|>"]}
    cfg = dict(special, add_prefix_space=False, clean_up_tokenization_spaces=False,
               do_lower_case=True, errors="replace", model_max_length=77,
               tokenizer_class="CLIPTokenizer", added_tokens_decoder=added)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(folder, "special_tokens_map.json"), "w") as f:
        json.dump(special, f, indent=2)


def main():
    torch.manual_seed(0)
    shutil.rmtree(ROOT, ignore_errors=True)
    symbols = bytes_to_unicode()
    merges = train_merges()
    vocab = {}
    for s in symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges]:
        vocab.setdefault(s, len(vocab))
    for s in ["<|startoftext|>", "<|endoftext|>"]:
        vocab[s] = len(vocab)
    write_tokenizer(os.path.join(ROOT, "tokenizer"), vocab, merges, "<|endoftext|>")
    write_tokenizer(os.path.join(ROOT, "tokenizer_2"), vocab, merges, "!")
    with open(os.path.join(ROOT, "model_index.json"), "w") as f:
        json.dump({"_class_name": "ClipFixture", "tokenizer": ["transformers", "CLIPTokenizer"],
                   "tokenizer_2": ["transformers", "CLIPTokenizer"],
                   "text_encoder": ["transformers", "CLIPTextModel"],
                   "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"]}, f, indent=2)

    tokens = {"versions": VERSIONS, "prompts": PROMPTS}
    ids = {}
    for name in ["tokenizer", "tokenizer_2"]:
        t = CLIPTokenizer.from_pretrained(os.path.join(ROOT, name))
        enc = t(PROMPTS, padding="max_length", max_length=t.model_max_length, truncation=True)
        tokens[name] = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                        "pad_token_id": t.pad_token_id, "bos_token_id": t.bos_token_id,
                        "eos_token_id": t.eos_token_id,
                        "untruncated": [len(x) for x in t(PROMPTS)["input_ids"]]}
        ids[name] = torch.tensor(enc["input_ids"])
    os.makedirs(GOLDENS, exist_ok=True)
    with open(os.path.join(GOLDENS, "clip_tokens.json"), "w", encoding="utf-8") as f:
        json.dump(tokens, f, ensure_ascii=False, indent=1)

    eos = vocab["<|endoftext|>"]
    common = dict(vocab_size=len(vocab), max_position_embeddings=77, layer_norm_eps=1e-5,
                  bos_token_id=vocab["<|startoftext|>"], eos_token_id=eos, pad_token_id=1)
    encoders = {
        # (folder, class, config, tokenizer whose ids it reads)
        "l": ("text_encoder", CLIPTextModel,
              CLIPTextConfig(hidden_size=48, intermediate_size=80, num_hidden_layers=3,
                             num_attention_heads=4, hidden_act="quick_gelu", **common),
              "tokenizer"),
        "g": ("text_encoder_2", CLIPTextModelWithProjection,
              CLIPTextConfig(hidden_size=40, intermediate_size=72, num_hidden_layers=3,
                             num_attention_heads=5, hidden_act="gelu", projection_dim=24,
                             **common),
              "tokenizer_2"),
    }
    out = {}
    for key, (folder, cls, cfg, tok) in encoders.items():
        model = cls(cfg).eval()
        with torch.no_grad():
            for p in model.parameters():  # spread the weights so every layer matters
                p.add_(torch.randn_like(p) * 0.05)
            model.save_pretrained(os.path.join(ROOT, folder), safe_serialization=True)
            x = ids[tok][:4]
            r = model(input_ids=x, output_hidden_states=True)
        out[f"{key}.ids"] = x.to(torch.float32)  # exact: ids < 2^24
        out[f"{key}.last"] = r.last_hidden_state.contiguous()
        out[f"{key}.penultimate"] = r.hidden_states[-2].contiguous()
        out[f"{key}.pooled"] = (r.text_embeds if key == "g" else r.pooler_output).contiguous()
    save_file(out, os.path.join(GOLDENS, "clip_encoders.safetensors"),
              metadata={k: str(v) for k, v in VERSIONS.items()})
    print("vocab", len(vocab), "merges", len(merges))


if __name__ == "__main__":
    main()
