// xdit bench wan and wan_vae: Wan2.1's components at their real shapes with
// random weights, each against the GEMM peak measured in the same process:
//  - wan: a Wan2.1-T2V-1.3B step with CFG (batch 2, 512 text tokens) at full
//    width (1536 = 12 heads x 128, feed-forward 8960) and reduced depth (3 of
//    its 30 blocks) on RES p (RES x RES·832/480 px) of 9 frames (3 latent
//    frames), per block and extrapolated by FLOPs to 30 blocks and to 81
//    frames (21 latent frames: attention grows with the square);
//  - wan_vae: AutoencoderKLWan's decoder (base 96, dim_mult 1 2 4 4) decoding
//    the same 3 latent frames into 9 frames.
#include <string>

#include "app/bench_util.h"
#include "core/rng.h"
#include "io/weights.h"
#include "models/wan.h"
#include "models/wan_vae.h"

namespace xdit::app::bench {

namespace {

constexpr int64_t kLatentFrames = 3, kFullLatentFrames = 21, kText = 512;

// The width of a RES p clip: Wan's 480 x 832 aspect, to a multiple of 16.
int64_t wan_width(int64_t res) {
  return (res * 832 / 480 + 8) / 16 * 16;
}

// FLOPs (multiply-adds × 2) of one Wan forward: batch B, N video and L text tokens.
double wan_flops(const models::WanConfig& c, double B, double N, double L) {
  const double D = static_cast<double>(c.hidden()), F = static_cast<double>(c.ffn_dim);
  const double patch = static_cast<double>(c.in_channels * c.patch_t * c.patch_h * c.patch_w);
  double f = 2.0 * N * patch * D + 2.0 * L * static_cast<double>(c.text_dim) * D + 2.0 * L * D * D;
  const double block = 2.0 * N * D * 3 * D + 4.0 * N * N * D + 2.0 * N * D * D  // self-attention
                       + 2.0 * N * D * D + 2.0 * L * D * 2 * D + 4.0 * N * L * D +
                       2.0 * N * D * D         // cross-attention
                       + 2.0 * N * D * F * 2;  // feed-forward
  f += static_cast<double>(c.num_layers) * block;
  return B * (f + 2.0 * N * D * static_cast<double>(c.out_channels * c.patch_h * c.patch_w));
}

// FLOPs of the decoder's convolutions and mid-block attention for F latent
// frames of h x w: each layer at its level's size and frame count (frame 0
// stays one frame through a time upsampling, each later one doubles).
double wan_vae_flops(const models::WanVaeConfig& c, int64_t F, int64_t h, int64_t w) {
  const std::vector<int64_t> d = c.level_dims();
  double frames = static_cast<double>(F), area = static_cast<double>(h * w);
  const auto conv = [&](double cin, double cout, double taps) {
    return 2.0 * cin * cout * taps * frames * area;
  };
  const auto resnet = [&](double cin, double cout) {
    return conv(cin, cout, 27) + conv(cout, cout, 27) + (cin != cout ? conv(cin, cout, 1) : 0);
  };
  const double top = static_cast<double>(d[0]);
  double f = conv(static_cast<double>(c.z_dim), top, 27) + 2 * resnet(top, top) +
             frames * (2.0 * area * top * 4 * top + 4.0 * area * area * top);  // attention
  for (size_t i = 0; i + 1 < d.size(); ++i) {
    const auto [in, mode] = c.up_block(i);
    const double out = static_cast<double>(d[i + 1]);
    f += resnet(static_cast<double>(in), out);
    for (int64_t r = 0; r < c.num_res_blocks; ++r) f += resnet(out, out);
    if (mode == models::WanVaeConfig::UpMode::k3d) {
      f += conv(out, 2 * out, 3);  // the time convolution, then twice the frames
      frames = 1 + 2 * (frames - 1);
    }
    if (mode != models::WanVaeConfig::UpMode::kNone) {
      area *= 4;
      f += conv(out, out / 2, 9);
    }
  }
  return f + conv(static_cast<double>(d.back()), static_cast<double>(c.out_channels), 27);
}

}  // namespace

nlohmann::json run_wan_row(int64_t res, const std::string& dt_name, int warmup, int repeat) {
  const DType dtype = parse_dtype(dt_name);
  const double peak = gemm_peak(dtype);
  const models::WanConfig cfg = models::WanConfig::t2v_1_3b();
  const int64_t h = res / 8, w = wan_width(res) / 8, B = 2;
  const int64_t per_frame = (h / cfg.patch_h) * (w / cfg.patch_w), N = kLatentFrames * per_frame;
  TorchGenerator g(9);
  Tensor lat = g.randn({B, cfg.in_channels, kLatentFrames, h, w});
  Tensor text = g.randn({B, kText, cfg.text_dim});
  models::Conditioning cond;
  cond.set(models::kText, text);
  models::DiTInputs in;
  in.latents = &lat;
  in.cond = &cond;
  in.timesteps = {500.0f, 500.0f};
  models::WanConfig reduced = cfg;
  reduced.num_layers = 3;
  io::RandomWeights weights(6);
  models::WanTransformer model(reduced, weights, dtype);
  const double flops = wan_flops(reduced, B, N, kText);
  nlohmann::json r = timed_row("wan21_1_3b_3_blocks", res, dt_name, flops, dtype, peak, warmup,
                               repeat, [&] { model.forward(in); });
  const double t = r["seconds"].get<double>();
  r["width"] = wan_width(res);
  r["latent_frames"] = kLatentFrames;
  r["video_tokens"] = N;
  r["text_tokens"] = kText;
  r["batch"] = B;
  r["seconds_per_block"] = t / 3;
  const double full = wan_flops(cfg, B, N, kText);
  const double clip = wan_flops(cfg, B, kFullLatentFrames * per_frame, kText);
  r["extrapolated_seconds_30_blocks"] = t * full / flops;
  r["extrapolated_seconds_81_frames"] = t * clip / flops;
  r["parameters"] = cfg.parameter_count();
  return r;
}

nlohmann::json run_wan_vae_row(int64_t res, const std::string& dt_name, int warmup, int repeat) {
  const DType dtype = parse_dtype(dt_name);
  const double peak = gemm_peak(dtype);
  models::WanVaeConfig cfg;  // Wan2.1's: base 96, dim_mult 1 2 4 4, 2 ResNets a level
  cfg.latents_mean.assign(static_cast<size_t>(cfg.z_dim), 0.0);
  cfg.latents_std.assign(static_cast<size_t>(cfg.z_dim), 1.0);
  io::RandomWeights weights(7);
  models::WanVaeDecoder vae(cfg, weights, dtype);
  const int64_t h = res / 8, w = wan_width(res) / 8;
  TorchGenerator g(2);
  Tensor z = g.randn({1, cfg.z_dim, kLatentFrames, h, w});
  nlohmann::json r =
      timed_row("wan_vae_decoder", res, dt_name, wan_vae_flops(cfg, kLatentFrames, h, w), dtype,
                peak, warmup, repeat, [&] { vae.decode(z); });
  r["width"] = wan_width(res);
  r["frames"] = cfg.frames(kLatentFrames);
  return r;
}

}  // namespace xdit::app::bench
