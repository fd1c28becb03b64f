#!/usr/bin/env python3
"""Tiny decoder-LLM text encoders as the 2025 image pipelines call them:
transformers' Qwen3Model (Z-Image's text encoder: q/k norms, no attention
bias) and Qwen2Model (the language model of Qwen-Image's Qwen2.5-VL: q/k/v
biases), random weights, on two prompts of the Qwen tokenizer of
tests/data/qwen/tokenizer (make_qwen_tokenizer.py), right-padded, with the
attention mask — GQA (4 query heads over 2 key/value heads), RoPE, RMSNorm,
SwiGLU, a causal mask.

    python3 tools/goldens/make_qwen_encoder.py   # from the repository root

Also the whole Qwen2_5_VLForConditionalGeneration (Qwen-Image's text
encoder, with a tiny vision tower) called on text alone; its padding rows
take other positions there (get_rope_index), so only the real tokens compare.

Writes tests/data/qwen/qwen3/, qwen2/ and qwen2_5_vl/ (config.json,
model.safetensors as save_pretrained writes them) and
tests/data/qwen/qwen_encoder.safetensors: ids and mask [2, 12] and, per model,
every entry of output_hidden_states: L + 1 of them, the embeddings, then each
layer's output, the last one after the final norm (it equals
last_hidden_state). So Z-Image's hidden_states[-2] is the output of layer
L − 1, without the norm, and Qwen-Image's hidden_states[-1] the normed last.
"""
import os

import torch
import transformers
from safetensors.torch import save_file
from transformers import (AutoTokenizer, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration,
                          Qwen2Config, Qwen2Model, Qwen3Config, Qwen3Model)

OUT = "tests/data/qwen"
PROMPTS = ["<|im_start|>user\na red fox in the snow<|im_end|>", "two cats"]


def randomize(model, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    return model.eval()


def main():
    tok = AutoTokenizer.from_pretrained(os.path.join(OUT, "tokenizer"))
    enc = tok(PROMPTS, padding=True, return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    vocab = len(tok)
    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6,
                  max_position_embeddings=128, tie_word_embeddings=False)
    models = {
        "qwen3": randomize(Qwen3Model(Qwen3Config(head_dim=8, rope_theta=1000000.0, **common)), 3),
        "qwen2": randomize(Qwen2Model(Qwen2Config(rope_theta=10000.0, **common)), 2),
        # Qwen-Image's kind: the whole Qwen2.5-VL (a tiny vision tower beside),
        # called on text alone as the pipeline calls it; its multimodal RoPE
        # sections (2, 1, 1 of the 4 frequencies) all see the text position.
        "qwen2_5_vl": randomize(Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(
            text_config=dict(rope_parameters=dict(rope_type="default", mrope_section=[2, 1, 1],
                                                  rope_theta=1000000.0), **common),
            vision_config=dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2,
                               out_hidden_size=32, patch_size=2, spatial_merge_size=1,
                               temporal_patch_size=1, fullatt_block_indexes=[0],
                               window_size=4))), 5),
    }
    # (as f32: the C++ reader takes float tensors; the ids are small integers)
    tensors = {"ids": ids.to(torch.float32).contiguous(), "mask": mask.to(torch.float32).contiguous()}
    for name, model in models.items():
        model.save_pretrained(os.path.join(OUT, name), safe_serialization=True)
        with torch.no_grad():
            out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        hs = out.hidden_states
        last = getattr(out, "last_hidden_state", None)
        print(name, len(hs), "entries; last == last_hidden_state:",
              last is None or torch.equal(hs[-1], last))
        for i, h in enumerate(hs):
            tensors[f"{name}.hidden_states.{i}"] = h.contiguous()
    save_file(tensors, os.path.join(OUT, "qwen_encoder.safetensors"),
              metadata={"torch": torch.__version__, "transformers": transformers.__version__,
                        "prompts": "\n---\n".join(PROMPTS)})
    print(ids.tolist(), mask.tolist())




def qwen_image_prompts():
    """QwenImagePipeline.encode_prompt on the tiny tokenizer and Qwen2.5-VL:
    the system template around each prompt, padding=True, hidden_states[-1]
    of the real tokens, the first 34 dropped (hard-coded), zero-padded to
    the longest, then cut at max_sequence_length. Written as
    qwen_image_prompts.safetensors (prompt_embeds, prompt_embeds_mask, and
    the same cut at 20)."""
    import types

    from diffusers import QwenImagePipeline
    from transformers import Qwen2_5_VLForConditionalGeneration

    tok = AutoTokenizer.from_pretrained(os.path.join(OUT, "tokenizer"))
    enc = Qwen2_5_VLForConditionalGeneration.from_pretrained(os.path.join(OUT, "qwen2_5_vl"))
    fake = types.SimpleNamespace(tokenizer=tok, text_encoder=enc, tokenizer_max_length=1024,
                                 prompt_template_encode_start_idx=34,
                                 _execution_device=torch.device("cpu"))
    fake.prompt_template_encode = (
        "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, "
        "quantity, text, spatial relationships of the objects and background:<|im_end|>\n"
        "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n")
    fake._extract_masked_hidden = types.MethodType(QwenImagePipeline._extract_masked_hidden, fake)
    fake._get_qwen_prompt_embeds = types.MethodType(QwenImagePipeline._get_qwen_prompt_embeds,
                                                    fake)
    prompts = ["a red fox in the snow", "Two cats, sitting on a mat! 3 dogs and 12 birds."]
    out = {}
    with torch.no_grad():
        for cut, tag in ((1024, ""), (20, "_cut20")):
            e, m = QwenImagePipeline.encode_prompt(fake, prompts, max_sequence_length=cut)
            out["prompt_embeds" + tag] = e.contiguous()
            # (None when every token is real: all ones)
            m = torch.ones(e.shape[:2]) if m is None else m.to(torch.float32)
            out["prompt_embeds_mask" + tag] = m.contiguous()
    save_file(out, os.path.join(OUT, "qwen_image_prompts.safetensors"),
              metadata={"torch": torch.__version__, "transformers": transformers.__version__,
                        "prompts": "\n---\n".join(prompts)})
    print("qwen-image prompts", {k: tuple(v.shape) for k, v in out.items()})


def z_image_prompts():
    """ZImagePipeline._encode_prompt on the tiny tokenizer and Qwen3: each
    prompt through the chat template with thinking enabled, padded to
    max_sequence_length, hidden_states[-2] (no final norm) of its real
    tokens. The tiny tokenizer gets the part of Qwen3's chat template a
    single user message with a generation prompt uses (messages, then
    <|im_start|>assistant, and an empty think block only when thinking is
    off: Qwen3-4B's enable_thinking=True adds none). Written as
    z_image_prompts.safetensors (embeds0, embeds1) at max_sequence_length 24."""
    import types

    from diffusers import ZImagePipeline
    from transformers import Qwen3Model

    tok = AutoTokenizer.from_pretrained(os.path.join(OUT, "tokenizer"))
    tok.chat_template = (
        "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content"
        " + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
        "{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking is"
        " false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}")
    enc = Qwen3Model.from_pretrained(os.path.join(OUT, "qwen3"))
    fake = types.SimpleNamespace(tokenizer=tok, text_encoder=enc,
                                 _execution_device=torch.device("cpu"))
    prompts = ["a red fox in the snow", "Two cats, sitting on a mat!"]
    with torch.no_grad():
        embeds = ZImagePipeline._encode_prompt(fake, list(prompts), max_sequence_length=24)
    out = {f"embeds{i}": e.contiguous() for i, e in enumerate(embeds)}
    save_file(out, os.path.join(OUT, "z_image_prompts.safetensors"),
              metadata={"torch": torch.__version__, "transformers": transformers.__version__,
                        "prompts": "\n---\n".join(prompts),
                        "text0": tok.apply_chat_template([{"role": "user", "content": prompts[0]}],
                                                         tokenize=False, add_generation_prompt=True,
                                                         enable_thinking=True)})
    print("z-image prompts", {k: tuple(v.shape) for k, v in out.items()})


if __name__ == "__main__":
    main()
    qwen_image_prompts()
    z_image_prompts()
