// xdit bench zimage: Z-Image-Turbo's transformer (ZImageTransformer2DModel:
// dim 3840, 30 heads x 128, SwiGLU 10240, caption width 2560) at full width
// and reduced depth — one noise-refiner block, one context-refiner block and
// 3 main layers, 4 flat blocks over the joint sequence — on one 1024 px image
// (RES px: (RES/16)² image tokens) and a 128-token caption, with random
// weights, against the GEMM peak measured in the same process; extrapolated
// by FLOPs to the whole model (2 + 2 refiner blocks, 30 layers).
#include "app/bench_util.h"
#include "core/rng.h"
#include "io/weights.h"
#include "models/zimage.h"

namespace xdit::app::bench {

namespace {

constexpr int64_t kCaption = 128;

// FLOPs of one forward (batch 1): N image tokens, L caption tokens (both
// multiples of 32: no pads).
double zimage_flops(const models::ZImageConfig& c, int64_t N, int64_t L) {
  const double D = static_cast<double>(c.dim), F = static_cast<double>(c.ffn_dim());
  const auto block = [&](double S) { return 2.0 * S * (4 * D * D + 3 * D * F) + 4.0 * S * S * D; };
  const double R = static_cast<double>(c.n_refiner_layers);
  return 2.0 * N * 64 * D + 2.0 * L * c.cap_feat_dim * D  // embedders
         + R * (block(static_cast<double>(N)) + block(static_cast<double>(L))) +
         static_cast<double>(c.n_layers) * block(static_cast<double>(N + L)) + 2.0 * N * D * 64;
}

}  // namespace

nlohmann::json run_zimage_row(int64_t res, const std::string& dt_name, int warmup, int repeat) {
  const DType dtype = parse_dtype(dt_name);
  const double peak = gemm_peak(dtype);
  const models::ZImageConfig full = models::ZImageConfig::turbo();
  models::ZImageConfig cfg = full;
  cfg.n_refiner_layers = 1;
  cfg.n_layers = 3;
  const int64_t h = res / 8, N = (h / 2) * (h / 2);
  TorchGenerator g(10);
  Tensor lat = g.randn({1, cfg.in_channels, 1, h, h});
  models::Conditioning cond;
  cond.set(models::kText, g.randn({1, kCaption, cfg.cap_feat_dim}));
  models::DiTInputs in;
  in.latents = &lat;
  in.cond = &cond;
  in.timesteps = {0.5f};
  io::RandomWeights weights(13);
  models::ZImageTransformer model(cfg, weights, dtype);
  const double flops = zimage_flops(cfg, N, kCaption), all = zimage_flops(full, N, kCaption);
  nlohmann::json r = timed_row("zimage_1+1+3_blocks", res, dt_name, flops, dtype, peak, warmup,
                               repeat, [&] { model.forward(in); });
  r["image_tokens"] = N;
  r["text_tokens"] = kCaption;
  r["full_model_flops"] = all;
  r["extrapolated_seconds_turbo"] = r["seconds"].get<double>() * all / flops;
  r["parameters"] = full.parameter_count();
  return r;
}

}  // namespace xdit::app::bench
