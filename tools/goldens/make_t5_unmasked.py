#!/usr/bin/env python3
"""T5 as FLUX.1 and SD3 call it: the prompt as given (no lower-casing), padded
to max_sequence_length, and the encoder run WITHOUT an attention mask, so the
pad positions attend and are attended to. Uses the tiny T5 of
models/pixart-alpha-tiny (run make_pixart.py first).

    python3 tools/goldens/make_t5_unmasked.py      # from the repository root

Writes tests/data/goldens/t5_unmasked.safetensors: ids [P, L] (f32, exact),
embeds [P, L, d] (unmasked), masked [P, L, d] (the same ids with the mask, to
show the difference); the prompts and L in the metadata.
"""
import json
import os

import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoTokenizer, T5EncoderModel

MODEL = "models/pixart-alpha-tiny"
LENGTH = 48
PROMPTS = ["A Red Fox in the Snow", "an astronaut riding a horse on mars, 4k",
           "  spaced   out\tprompt ", " ".join(["a small blue bird on a branch"] * 9)]

tok = AutoTokenizer.from_pretrained(os.path.join(MODEL, "tokenizer"))
enc = tok(PROMPTS, padding="max_length", max_length=LENGTH, truncation=True, return_tensors="pt")
model = T5EncoderModel.from_pretrained(os.path.join(MODEL, "text_encoder")).eval()
with torch.no_grad():
    unmasked = model(enc.input_ids).last_hidden_state
    masked = model(enc.input_ids, attention_mask=enc.attention_mask).last_hidden_state
save_file({"ids": enc.input_ids.float(), "embeds": unmasked.contiguous(),
           "masked": masked.contiguous()},
          os.path.join("tests/data/goldens", "t5_unmasked.safetensors"),
          metadata={"prompts": json.dumps(PROMPTS), "length": str(LENGTH),
                    "torch": torch.__version__, "transformers": transformers.__version__,
                    "tokenizer": type(tok).__name__})
print(type(tok).__name__, enc.attention_mask.sum(1).tolist())
