// xdit bench attention: the self-attention kernel of one PixArt-α block at
// full size, against the GEMM peak measured in the same process.
#include <string>

#include "app/bench_util.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "models/pixart.h"
#include "nn/attention.h"

namespace xdit::app::bench {

// The self-attention of one PixArt-α block at `res` px as the model calls it:
// S = (res/16)² tokens, 16 heads × 72, batch 2 (CFG), Q/K/V interleaved in one
// fused projection output, with the log-sum-exp that Ring attention merges.
// In bf16 on a CPU with native bf16, q/k/v come and the output goes as bf16
// rows, as between the model's bf16 projections (nn/attention.cpp).
nlohmann::json run_attention_row(int64_t res, const std::string& dt_name, int warmup, int repeat) {
  const DType dtype = parse_dtype(dt_name);
  const double peak = gemm_peak(dtype);
  const models::PixArtConfig cfg = models::PixArtConfig::alpha_xl_1024();
  const int64_t B = 2, H = cfg.num_attention_heads, D = cfg.attention_head_dim;
  const int64_t S = (res / 8 / cfg.patch_size) * (res / 8 / cfg.patch_size), inner = H * D;
  TorchGenerator g(5);
  Tensor qkv = g.randn({B, S, 3 * inner}), out = Tensor::empty({B, S, inner}),
         lse = Tensor::empty({B, H, S});
  kernels::AttentionArgs a = nn::fused_qkv_args(qkv.data<float>(), B, S, H, D, out.data<float>(),
                                                inner, dtype == DType::kBF16);
  Tensor qkv_bf16, out_bf16;
  if (dtype == DType::kBF16 && !g_device.cuda() && kernels::attention_packs_bf16(true)) {
    qkv_bf16 = qkv.to(DType::kBF16);
    out_bf16 = Tensor::empty({B, S, inner}, DType::kBF16);
    const auto* rows = static_cast<const uint16_t*>(qkv_bf16.raw());
    a.q = a.k = a.v = nullptr;
    a.q_bf16 = rows;
    a.k_bf16 = rows + inner;
    a.v_bf16 = rows + 2 * inner;
    a.out = nullptr;
    a.out_bf16 = static_cast<uint16_t*>(out_bf16.raw());
  }
  a.lse = lse.data<float>();  // as Ring attention asks for it
  const double flops = 4.0 * static_cast<double>(B * H) * static_cast<double>(S) *
                       static_cast<double>(S) * static_cast<double>(D);
  nlohmann::json r = timed_row("attention", res, dt_name, flops, dtype, peak, warmup, repeat,
                               [&] { kernels::attention(a); });
  r["tokens"] = S;
  r["heads"] = H;
  r["head_dim"] = D;
  return r;
}

}  // namespace xdit::app::bench
