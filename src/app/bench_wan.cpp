// xdit bench wan and wan_vae: Wan2.1's components at their real shapes with
// random weights, each against the GEMM peak measured in the same process:
//  - wan: a Wan2.1-T2V-1.3B step with CFG (batch 2, 512 text tokens) at full
//    width (1536 = 12 heads x 128, feed-forward 8960) and reduced depth (3 of
//    its 30 blocks) on RES p (RES x RES·832/480 px) of 9 frames (3 latent
//    frames), per block and extrapolated by FLOPs to 30 blocks and to 81
//    frames (21 latent frames: attention grows with the square);
//  - wan_vae: AutoencoderKLWan's decoder (base 96, dim_mult 1 2 4 4) decoding
//    the same 3 latent frames into 9 frames;
//  - wan_parallel: the wan step on 2 ranks x 1 thread with Ulysses 2 and
//    Ring 2 over the video tokens, against 1 rank x 2 threads.
#include <omp.h>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <optional>
#include <string>

#include "app/bench_util.h"
#include "app/startup.h"
#include "core/error.h"
#include "core/rng.h"
#include "io/weights.h"
#include "models/wan.h"
#include "models/wan_vae.h"
#include "parallel/config.h"
#include "parallel/runtime.h"

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

nlohmann::json run_wan_row(int64_t res, const std::string& dt_name, int warmup, int repeat,
                           const std::string& layout) {
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
  // Two ranks: the pipeline's runtime splits the token rows (frames × patch
  // rows) and gathers the outputs, as a Ulysses 2 or Ring 2 run does.
  std::optional<parallel::Mesh> mesh;
  if (!layout.empty()) {
    XDIT_CHECK(world().size() == 2, "bench wan's parallel rows run on 2 ranks");
    parallel::ParallelConfig pc;
    if (layout == "ulysses")
      pc.ulysses_degree = 2;
    else if (layout == "ring")
      pc.ring_degree = 2;
    else
      XDIT_FAIL("bench wan: unknown layout '", layout, "': ulysses or ring");
    mesh.emplace(pc, world());
  }
  parallel::ParallelRuntime rt(mesh ? &*mesh : nullptr, cfg.patch_h);
  models::WanTransformer model(reduced, weights, dtype, rt.stage(reduced.num_layers));
  rt.attach(model);
  rt.set_grid_width(w / cfg.patch_w);
  const int64_t rows = kLatentFrames * (h / cfg.patch_h);
  std::tie(in.row_begin, in.row_end) = rt.my_rows(0, rows);
  const double flops = wan_flops(reduced, B, N, kText);
  const auto groups = [&mesh] {  // each group once (a degree-2 layout's may be one)
    std::vector<comm::Communicator*> g;
    for (comm::Communicator* c : {&mesh->sp_group(), &mesh->ulysses_group(), &mesh->ring_group()})
      if (std::find(g.begin(), g.end(), c) == g.end()) g.push_back(c);
    return g;
  };
  if (mesh)
    for (comm::Communicator* c : groups()) c->stats() = {};
  nlohmann::json r =
      timed_row("wan21_1_3b_3_blocks", res, dt_name, flops, dtype, peak, warmup, repeat, [&] {
        if (mesh) mesh->world().barrier();
        rt.gather(model.forward(in), false, 0, rows);
      });
  const double t = r["seconds"].get<double>();
  if (mesh) {
    r["layout"] = layout;
    r["ranks"] = 2;
    r["threads"] = omp_get_max_threads();
    // Per step (the counters cover the warm-up and the repeats alike).
    double sent = 0;
    for (comm::Communicator* c : groups()) sent += static_cast<double>(c->stats().bytes_sent);
    r["comm_bytes_per_step"] = sent / (warmup + std::max(1, repeat));
  }
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

// 1 rank x 2 threads against 2 ranks x 1 thread (Ulysses 2, Ring 2) on the
// same two cores: the efficiency of the split on this machine.
int run_wan_parallel_bench(const BenchOptions& o) {
  XDIT_CHECK(world().size() == 1,
             "run `xdit bench wan_parallel` itself without mpirun: it starts mpirun for its rows");
  const int64_t res = *std::max_element(o.resolutions.begin(), o.resolutions.end());
  const std::string dt = o.dtypes.front();
  nlohmann::json base = run_child("wan", res, dt, o, "", 2);
  const double t1 = base["seconds"].get<double>();
  if (o.json) std::cout << base.dump() << std::endl;
  if (!o.json)
    std::cout << "Wan2.1-1.3B step (3 blocks, CFG, " << kLatentFrames << " latent frames) at "
              << res << "p, " << dt << ": 1 rank x 2 threads against 2 ranks x 1 thread\n"
              << std::left << std::setw(22) << "serial (1x2 threads)" << std::right << std::setw(10)
              << std::fixed << std::setprecision(2) << t1 << " s   1.00\n";
  for (const char* layout : {"ulysses", "ring"}) {
    nlohmann::json r = run_child("wan", res, dt, o, layout, 1);
    const double t = r["seconds"].get<double>();
    r["speedup"] = t1 / t;
    r["efficiency"] = t1 / t;  // the same two cores either way
    if (o.json) {
      std::cout << r.dump() << std::endl;
      continue;
    }
    std::cout << std::left << std::setw(22) << (std::string(layout) + " 2 (2x1)") << std::right
              << std::setw(10) << t << " s   " << t1 / t << "  ("
              << human(r["comm_bytes_per_step"].get<double>(), "B") << " sent per rank)"
              << std::endl;
  }
  return 0;
}

}  // namespace xdit::app::bench
