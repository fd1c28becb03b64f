#!/usr/bin/env python3
"""PyTorch + diffusers on the same work as `xdit bench` (bench/compare.sh runs
both). Random weights in bf16 (--dtype f32: in f32), the same shapes and
inputs as src/app/bench.cpp:

  pixart   one PixArt-alpha XL/2 step (28 blocks, 16 heads x 72, 120 text
           tokens of which 100 valid, micro-conditions, CFG batch 2) at RES px
  vae      the AutoencoderKL decoder (SD / PixArt VAE) from RES/8 latents
  t5       the T5-XXL encoder (google/t5-v1_1-xxl) on 120 tokens
  t5:N     PixArt's encode_prompt of an N-token prompt and "" under CFG
  flux     a FLUX.1 forward at full width (3072, 24 heads x 128, guidance
           embedding, 512 T5 tokens) and reduced depth (2 double + 4 single
           blocks) at RES px: (RES/16)^2 image tokens, batch 1
  flux_q8_0  the same with the blocks' linear layers in GGUF Q8_0 (gguf-py's
           quantizer) as diffusers runs a GGUF file: its GGUFLinear
           dequantizes each weight at every forward and multiplies in the
           compute dtype (GGUFQuantizationConfig)
  wan      a Wan2.1-T2V-1.3B step at full width (12 heads x 128, ffn 8960,
           512 text tokens, CFG batch 2) and reduced depth (3 blocks) on a
           RES p clip (RES x RES*832/480 px) of 9 frames (3 latent frames)
  wan_vae  AutoencoderKLWan's decoder (Wan2.1's) on those 3 latent frames
  qwen_text  Qwen2.5-VL-7B's language model (Qwen-Image's text encoder), 4 of
           its 28 layers at full width, on one prompt of TOKENS tokens

Each row: warm-up runs, then the best of --repeat timed runs under
torch.inference_mode(), one JSON object per line on stdout. --device cuda runs
the pixart and flux rows on the GPU (diffusers' default attention: PyTorch's
SDPA), synchronising before each clock read; --compile wraps those two models
in torch.compile (its compilation falls in the warm-up runs).
"""
import argparse
import json
import sys
import time

import torch


DEVICE = "cpu"
DTYPE = torch.bfloat16
COMPILE = False


def maybe_compiled(model):
    return torch.compile(model) if COMPILE else model


def sync():
    if DEVICE != "cpu":
        torch.cuda.synchronize()


def best_time(fn, warmup, repeat):
    for _ in range(warmup):
        fn()
    sync()
    best = float("inf")
    for _ in range(max(1, repeat)):
        t = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t)
    return best


def pixart_row(res, warmup, repeat):
    from diffusers import PixArtTransformer2DModel

    model = PixArtTransformer2DModel(
        num_attention_heads=16, attention_head_dim=72, in_channels=4, out_channels=8,
        num_layers=28, cross_attention_dim=1152, caption_channels=4096, sample_size=128,
        patch_size=2, norm_type="ada_norm_single", norm_elementwise_affine=False,
        norm_eps=1e-6, attention_bias=True, use_additional_conditions=True,
        interpolation_scale=2,
    ).to(DTYPE).to(DEVICE).eval()
    g = torch.Generator().manual_seed(0)
    batch, tokens = 2, 120
    latents = torch.randn(batch, 4, res // 8, res // 8, generator=g).to(DTYPE)
    text = torch.randn(batch, tokens, 4096, generator=g).to(DTYPE)
    mask = torch.zeros(batch, tokens)
    mask[:, :100] = 1
    cond = {"resolution": torch.full((batch, 2), float(res), dtype=DTYPE),
            "aspect_ratio": torch.ones(batch, 1, dtype=DTYPE)}
    t = torch.full((batch,), 500.0)
    latents, text, mask, t = (v.to(DEVICE) for v in (latents, text, mask, t))
    cond = {k: v.to(DEVICE) for k, v in cond.items()}
    model = maybe_compiled(model)

    def step():
        model(latents, encoder_hidden_states=text, encoder_attention_mask=mask, timestep=t,
              added_cond_kwargs=cond, return_dict=False)

    return {"name": "pixart_alpha_step_cfg", "resolution": res,
            "seconds": best_time(step, warmup, repeat)}


def vae_row(res, warmup, repeat):
    from diffusers import AutoencoderKL

    vae = AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4,
        down_block_types=["DownEncoderBlock2D"] * 4, up_block_types=["UpDecoderBlock2D"] * 4,
        block_out_channels=[128, 256, 512, 512], layers_per_block=2, norm_num_groups=32,
        sample_size=1024,
    ).to(DTYPE).eval()
    z = torch.randn(1, 4, res // 8, res // 8, generator=torch.Generator().manual_seed(1))
    z = z.to(DTYPE)
    return {"name": "vae_decoder", "resolution": res,
            "seconds": best_time(lambda: vae.decode(z, return_dict=False), warmup, repeat)}


def wan_width(res):
    return (res * 832 // 480 + 8) // 16 * 16


def wan_row(res, warmup, repeat):
    from diffusers import WanTransformer3DModel

    torch.set_default_dtype(DTYPE)
    model = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=12,
                                  attention_head_dim=128, in_channels=16, out_channels=16,
                                  text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=3,
                                  cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                  eps=1e-6).eval()
    torch.set_default_dtype(torch.float32)
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, 16, 3, res // 8, wan_width(res) // 8, generator=g).to(DTYPE)
    text = torch.randn(2, 512, 4096, generator=g).to(DTYPE)
    t = torch.tensor([500, 500])

    def step():
        model(hidden_states=x, timestep=t, encoder_hidden_states=text, return_dict=False)

    return {"name": "wan21_1_3b_3_blocks", "resolution": res, "width": wan_width(res),
            "seconds": best_time(step, warmup, repeat)}


def wan_vae_row(res, warmup, repeat):
    from diffusers import AutoencoderKLWan

    vae = AutoencoderKLWan().to(DTYPE).eval()  # Wan2.1's: base 96, dim_mult 1 2 4 4
    z = torch.randn(1, 16, 3, res // 8, wan_width(res) // 8,
                    generator=torch.Generator().manual_seed(2)).to(DTYPE)
    return {"name": "wan_vae_decoder", "resolution": res, "width": wan_width(res),
            "seconds": best_time(lambda: vae.decode(z, return_dict=False), warmup, repeat)}


def qwen_text_row(tokens, warmup, repeat):
    """Qwen-Image's text encoder, Qwen2.5-VL-7B's language model, at full
    width and 4 of its 28 layers (transformers' Qwen2Model: the same layers)
    on one prompt of `tokens` tokens, with its mask, as the pipeline calls it
    (output_hidden_states)."""
    from transformers import Qwen2Config, Qwen2Model

    cfg = Qwen2Config(vocab_size=152064, hidden_size=3584, intermediate_size=18944,
                      num_hidden_layers=4, num_attention_heads=28, num_key_value_heads=4,
                      rms_norm_eps=1e-6, rope_theta=1000000.0, use_cache=False)
    torch.set_default_dtype(DTYPE)
    model = Qwen2Model(cfg).eval()
    torch.set_default_dtype(torch.float32)
    ids = ((torch.arange(tokens) * 7919) % 150000 + 3).unsqueeze(0)
    mask = torch.ones(1, tokens, dtype=torch.long)
    return {"name": "qwen2_5_vl_7b_text_4_layers", "resolution": 0, "tokens": tokens,
            "seconds": best_time(lambda: model(input_ids=ids, attention_mask=mask,
                                               output_hidden_states=True), warmup, repeat)}


def zimage_row(res, warmup, repeat):
    """Z-Image-Turbo's transformer at full width, one noise- and one
    context-refiner block and 3 of its 30 layers (xdit bench zimage's), on one
    RES px image and a 128-token caption, as ZImagePipeline calls it."""
    from diffusers import ZImageTransformer2DModel

    torch.set_default_dtype(DTYPE)
    model = ZImageTransformer2DModel(n_layers=3, n_refiner_layers=1).eval()
    torch.set_default_dtype(torch.float32)
    g = torch.Generator().manual_seed(10)
    x = [torch.randn(16, 1, res // 8, res // 8, generator=g).to(DTYPE)]
    cap = [torch.randn(128, 2560, generator=g).to(DTYPE)]
    t = torch.tensor([0.5], dtype=DTYPE)
    return {"name": "zimage_1+1+3_blocks", "resolution": res, "text_tokens": 128,
            "seconds": best_time(lambda: model(x, t, cap, return_dict=False), warmup, repeat)}


def t5_row(prompt_tokens, warmup, repeat):
    """prompt_tokens 0: the encoder on 120 real tokens. Otherwise what
    PixArtAlphaPipeline.encode_prompt runs for a prompt of that many tokens
    and the empty negative prompt under CFG: two calls, each padded to 120
    with its attention mask."""
    from transformers import T5Config, T5EncoderModel

    cfg = T5Config(vocab_size=32128, d_model=4096, d_kv=64, d_ff=10240, num_layers=24,
                   num_heads=64, feed_forward_proj="gated-gelu", is_encoder_decoder=False,
                   use_cache=False)
    # Built in the compute type from the start (the f32 XXL weights are 19 GB).
    torch.set_default_dtype(DTYPE)
    enc = T5EncoderModel(cfg).eval()
    torch.set_default_dtype(torch.float32)
    tokens = 120
    ids = ((torch.arange(tokens) * 7919) % 32000 + 3).unsqueeze(0)
    mask = torch.ones(1, tokens, dtype=torch.long)
    if not prompt_tokens:
        return {"name": "t5_xxl_encoder", "resolution": 0, "tokens": tokens,
                "seconds": best_time(lambda: enc(input_ids=ids, attention_mask=mask), warmup,
                                     repeat)}
    ids[0, prompt_tokens:] = 0  # T5's padding id
    mask[0, prompt_tokens:] = 0
    neg_ids = torch.zeros(1, tokens, dtype=torch.long)
    neg_ids[0, 0] = 1  # "": EOS alone
    neg_mask = torch.zeros(1, tokens, dtype=torch.long)
    neg_mask[0, 0] = 1

    def both():
        enc(input_ids=ids, attention_mask=mask)
        enc(input_ids=neg_ids, attention_mask=neg_mask)

    return {"name": "t5_xxl_pixart_cfg", "resolution": 0, "tokens": prompt_tokens,
            "seconds": best_time(both, warmup, repeat)}


def sd3_row(res, warmup, repeat):
    from diffusers import SD3Transformer2DModel

    # SD3.5-large at full width (38 heads x 64, qk RMSNorm), 3 blocks, CFG batch 2.
    torch.set_default_dtype(DTYPE)
    model = SD3Transformer2DModel(num_layers=3, attention_head_dim=64, num_attention_heads=38,
                                  caption_projection_dim=2432, pos_embed_max_size=192,
                                  qk_norm="rms_norm").eval()
    torch.set_default_dtype(torch.float32)
    g = torch.Generator().manual_seed(9)
    side, tokens = res // 8, 77 + 256
    x = torch.randn(2, 16, side, side, generator=g).to(DTYPE)
    text = torch.randn(2, tokens, 4096, generator=g).to(DTYPE)
    pooled = torch.randn(2, 2048, generator=g).to(DTYPE)

    def step():
        model(hidden_states=x, encoder_hidden_states=text, pooled_projections=pooled,
              timestep=torch.tensor([500.0, 500.0], dtype=DTYPE), return_dict=False)

    return {"name": "sd35_large_3_blocks", "resolution": res, "text_tokens": tokens,
            "seconds": best_time(step, warmup, repeat)}


def gguf_q8_0(model):
    """The blocks' linear layers as diffusers' GGUFLinear over Q8_0 blocks
    (what from_single_file builds from a Q8_0 GGUF file)."""
    import gguf
    from diffusers.quantizers.gguf.utils import GGUFLinear, GGUFParameter
    for block in list(model.transformer_blocks) + list(model.single_transformer_blocks):
        for name, lin in list(block.named_modules()):
            if not isinstance(lin, torch.nn.Linear) or lin.in_features % 32:
                continue
            q = GGUFLinear(lin.in_features, lin.out_features, lin.bias is not None,
                           compute_dtype=DTYPE)
            blocks = gguf.quants.quantize(lin.weight.float().numpy(), gguf.GGMLQuantizationType.Q8_0)
            q.weight = GGUFParameter(torch.from_numpy(blocks),
                                     quant_type=gguf.GGMLQuantizationType.Q8_0)
            q.bias = lin.bias
            parent, _, leaf = name.rpartition(".")
            setattr(block.get_submodule(parent) if parent else block, leaf, q)
    return model


def flux_row(res, warmup, repeat, q8_0=False):
    from diffusers import FluxTransformer2DModel

    torch.set_default_dtype(DTYPE)
    model = FluxTransformer2DModel(num_layers=2, num_single_layers=4,
                                   guidance_embeds=True).to(DEVICE).eval()
    torch.set_default_dtype(torch.float32)
    if q8_0:
        model = gguf_q8_0(model)
    g = torch.Generator().manual_seed(9)
    side = res // 16
    tokens = 512
    x = torch.randn(1, side * side, 64, generator=g).to(DTYPE)
    text = torch.randn(1, tokens, 4096, generator=g).to(DTYPE)
    pooled = torch.randn(1, 768, generator=g).to(DTYPE)
    img_ids = torch.zeros(side, side, 3)
    img_ids[..., 1] += torch.arange(side)[:, None]
    img_ids[..., 2] += torch.arange(side)[None, :]
    img_ids = img_ids.reshape(-1, 3)
    x, text, pooled, img_ids = (v.to(DEVICE) for v in (x, text, pooled, img_ids))
    ts = torch.tensor([0.5], dtype=DTYPE, device=DEVICE)
    gs = torch.tensor([3.5], dtype=DTYPE, device=DEVICE)
    txt_ids = torch.zeros(tokens, 3, device=DEVICE)
    model = maybe_compiled(model)

    def step():
        model(hidden_states=x, encoder_hidden_states=text, pooled_projections=pooled,
              timestep=ts, guidance=gs, img_ids=img_ids, txt_ids=txt_ids, return_dict=False)

    return {"name": "flux_2+4_blocks" + ("_q8_0" if q8_0 else ""), "resolution": res,
            "text_tokens": tokens,
            "seconds": best_time(step, warmup, repeat)}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", nargs="+", help="pixart:RES, vae:RES, t5[:N], flux:RES, flux_q8_0:RES, sd3:RES, wan:RES, wan_vae:RES, qwen_text:TOKENS or zimage:RES")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (pixart and flux rows)")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the pixart and flux models (default mode)")
    a = ap.parse_args()
    global DEVICE, DTYPE, COMPILE
    DEVICE = a.device
    COMPILE = a.compile
    DTYPE = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    torch.set_num_threads(a.threads)
    import diffusers
    import transformers

    diffusers.utils.logging.set_verbosity_error()  # the "cast with to()" notice

    versions = {"torch": torch.__version__, "diffusers": diffusers.__version__,
                "transformers": transformers.__version__}
    for row in a.rows:
        what, _, res = row.partition(":")
        if DEVICE != "cpu" and what not in ("pixart", "flux"):
            sys.exit(f"torch_bench.py: --device {DEVICE} runs the pixart and flux rows only")
        with torch.inference_mode():
            if what == "pixart":
                r = pixart_row(int(res), a.warmup, a.repeat)
            elif what == "vae":
                r = vae_row(int(res), a.warmup, a.repeat)
            elif what == "t5":
                r = t5_row(int(res or 0), a.warmup, a.repeat)
            elif what in ("flux", "flux_q8_0"):
                r = flux_row(int(res), a.warmup, a.repeat, q8_0=what == "flux_q8_0")
            elif what == "sd3":
                r = sd3_row(int(res), a.warmup, a.repeat)
            elif what == "wan":
                r = wan_row(int(res), a.warmup, a.repeat)
            elif what == "wan_vae":
                r = wan_vae_row(int(res), a.warmup, a.repeat)
            elif what == "qwen_text":
                r = qwen_text_row(int(res), a.warmup, a.repeat)
            elif what == "zimage":
                r = zimage_row(int(res), a.warmup, a.repeat)
            else:
                sys.exit(f"torch_bench.py: unknown row '{row}' (pixart:RES, vae:RES, t5[:N], flux:RES, flux_q8_0:RES, sd3:RES, wan:RES, wan_vae:RES, qwen_text:TOKENS or zimage:RES)")
        r.update(versions, threads=a.threads, dtype=a.dtype, compiled=COMPILE,
                 isa=torch.backends.cpu.get_cpu_capability(),
                 gpu=torch.cuda.get_device_name() if DEVICE != "cpu" else None)
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
