#!/usr/bin/env python3
"""A tiny Qwen2 byte-level BPE tokenizer (Qwen-Image's, Z-Image's and FLUX.2
[klein]'s kind) and transformers' ids on a battery of prompts.

    python3 tools/goldens/make_qwen_tokenizer.py   # from the repository root

Trains an 800-token BPE with the tokenizers library set up as Qwen2's
tokenizer.json is (NFC; the Qwen2 pre-tokenizer regex, isolated; byte-level
without its own regex; the added tokens <|endoftext|>, <|im_start|>,
<|im_end|>, not normalized), and writes tests/data/qwen/tokenizer/
(tokenizer.json, tokenizer_config.json naming Qwen2Tokenizer) and
tests/data/qwen/tokenizer_slow/ (the same vocabulary as vocab.json +
merges.txt, no tokenizer.json, as Qwen-Image's folders ship it). The ids are
transformers' Qwen2Tokenizer's (AutoTokenizer) on both folders, which must
agree: tests/data/qwen/tokenizer_battery.json.
"""
import json
import os
import shutil

import tokenizers
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoTokenizer

OUT = "tests/data/qwen"
PAT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
       r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_IMAGE = ("<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, "
              "quantity, text, spatial relationships of the objects and background:<|im_end|>\n"
              "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n")
Z_IMAGE = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
CORPUS = [
    "a red fox in the snow, a cat sitting on a mat, the quick brown fox jumps over the lazy dog",
    "Describe the image by detailing the color, shape, size, texture, quantity, text, spatial "
    "relationships of the objects and background",
    "an astronaut riding a horse on the moon; a lighthouse at dusk; two cats; 3 dogs and 12 birds",
    "Ein Fuchs im Schnee. Un renard dans la neige. 雪の中のキツネ。雪中的狐狸。",
    "I'm sure it's what they've said: we'll see, you'd know. DON'T SHOUT!",
    "    indented code\n\tand tabs\n\n\nnew lines",
] * 20
BATTERY = [
    "a red fox in the snow",
    "",
    " ",
    "   leading and trailing   ",
    "a   b\t\tc\n\nd  \n  e",
    "digits 1234567 and 3.14159, 2025-11-29",
    "I'M sure it's THEY'RE we'll you'D",
    "café crème brûlée — naïve façade",
    "cafe\u0301 (a combining accent, NFC)",
    "雪の中のキツネ 雪中的狐狸 한국어 текст",
    "emoji 🦊🐈‍⬛ and symbols ©®™ ½ ∑",
    "<|im_start|>user\nhi<|im_end|>",
    "text<|endoftext|>more<|im_end|><|im_start|>",
    "punctuation!!! ... ??? ---- (brackets) [x] {y}",
    "\r\n windows\r\nlines\r\n",
    QWEN_IMAGE.format("a red fox in the snow"),
    Z_IMAGE.format("Two cats, sitting on a mat!"),
    " ".join(["a long prompt with many words"] * 40),
]


def main():
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=800, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    fast = os.path.join(OUT, "tokenizer")
    slow = os.path.join(OUT, "tokenizer_slow")
    for d in (fast, slow):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    tok.save(os.path.join(fast, "tokenizer.json"))
    tok.model.save(slow)  # vocab.json + merges.txt
    added = {str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False,
                                       "rstrip": False, "single_word": False, "special": True}
             for t in SPECIAL}
    config = {"tokenizer_class": "Qwen2Tokenizer", "model_max_length": 131072,
              "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "bos_token": None,
              "unk_token": None, "errors": "replace", "added_tokens_decoder": added}
    for d in (fast, slow):
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(config, f, indent=2)
    ids = {}
    for d in (fast, slow):
        t = AutoTokenizer.from_pretrained(d)
        ids[d] = [t(p, add_special_tokens=True)["input_ids"] for p in BATTERY]
        print(d, type(t).__name__, len(t))
    assert ids[fast] == ids[slow], "the two folders disagree"
    with open(os.path.join(OUT, "tokenizer_battery.json"), "w") as f:
        json.dump({"versions": {"transformers": transformers.__version__,
                                "tokenizers": tokenizers.__version__},
                   "prompts": BATTERY, "ids": ids[fast]}, f, ensure_ascii=False, indent=0)
    for p, i in zip(BATTERY[:6], ids[fast]):
        print(repr(p[:30]), i[:12])


if __name__ == "__main__":
    main()
