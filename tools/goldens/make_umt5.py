#!/usr/bin/env python3
"""UMT5 (transformers UMT5EncoderModel, Wan's text encoder): a T5 v1.1
encoder whose every block has its own relative-position bias table. A tiny
random one with awkward sizes, run on random ids with and without padding.

    python3 tools/goldens/make_umt5.py      # from the repository root

Writes tests/data/umt5/text_encoder/ (config.json, model.safetensors: the
model as save_pretrained writes it) and tests/data/umt5/umt5_encoder.safetensors:
ids [B, S] (f32, exact), mask [B, S], embeds [B, S, d] (masked), unmasked
[B, S, d] (no attention mask); versions in the metadata.
"""
import os

import torch
import transformers
from safetensors.torch import save_file
from transformers import UMT5Config, UMT5EncoderModel

OUT = "tests/data/umt5"
torch.manual_seed(46)
cfg = UMT5Config(vocab_size=301, d_model=40, d_kv=12, d_ff=56, num_layers=3, num_heads=5,
                 relative_attention_num_buckets=32, relative_attention_max_distance=128,
                 feed_forward_proj="gated-gelu", tie_word_embeddings=False, dropout_rate=0.0)
model = UMT5EncoderModel(cfg).eval()
with torch.no_grad():  # larger than the default init's, so every block's bias shows
    for name, p in model.named_parameters():
        p.copy_(torch.randn_like(p) * (0.5 if "relative_attention_bias" in name else 0.15))
model.save_pretrained(os.path.join(OUT, "text_encoder"), safe_serialization=True)

B, S = 3, 37
ids = torch.randint(2, cfg.vocab_size, (B, S))
lengths = [37, 20, 5]
mask = (torch.arange(S)[None] < torch.tensor(lengths)[:, None]).long()
ids[1, 19], ids[2, 4] = 1, 1  # EOS at the real ends
ids = torch.where(mask.bool(), ids, torch.zeros_like(ids))
with torch.no_grad():
    embeds = model(input_ids=ids, attention_mask=mask).last_hidden_state
    unmasked = model(input_ids=ids).last_hidden_state
save_file({"ids": ids.float(), "mask": mask.float(), "embeds": embeds.contiguous(),
           "unmasked": unmasked.contiguous()}, os.path.join(OUT, "umt5_encoder.safetensors"),
          metadata={"torch": torch.__version__, "transformers": transformers.__version__})
print(sorted(k for k in model.state_dict() if "relative" in k))
