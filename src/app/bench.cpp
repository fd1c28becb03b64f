// xdit bench [transformer|t5|vae|all]: full-size components with random
// weights made in memory, each against the GEMM peak measured in the same
// process:
//  - transformer: one denoising step of PixArt-α XL/2 (28 blocks, hidden
//    1152, 16 heads, 120 text tokens, CFG batch 2) at 512 and 1024 px;
//  - t5: the T5-XXL encoder (google/t5-v1_1-xxl) on 120 tokens, and the
//    PixArt pipeline's encoding of a 20-token prompt and "" under CFG;
//  - vae: the AutoencoderKL decoder (SD/PixArt VAE) to a 1024 px image;
//  - flux: a FLUX.1 forward at full width and reduced depth (2 double + 4
//    single blocks, 512 text tokens), per block and extrapolated to 19 + 38;
//  - sd3: an SD3.5-large step with CFG at full width (2432, 38 heads x 64,
//    333 text tokens) and reduced depth (3 blocks, the last context_pre_only),
//    per block and extrapolated to 38.
// Each row runs in its own child process so that its peak memory is its own.
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "app/commands.h"
#include "app/startup.h"
#include "core/error.h"
#include "core/rng.h"
#include "io/weights.h"
#include "kernels/kernels.h"
#include "kernels/linear.h"
#ifdef XDIT_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif
#include "models/flux.h"
#include "models/pixart.h"
#include "models/sd3.h"
#include "models/t5.h"
#include "models/vae.h"
#include "nn/attention.h"
#include "parallel/calibrate.h"
#include "parallel/config.h"
#include "parallel/gather.h"
#include "parallel/patch_attention.h"
#include "parallel/split.h"
#include "parallel/usp_attention.h"
#include "parallel/vae_bands.h"
#include "pipeline/pipeline.h"

namespace xdit::app {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kTextTokens = 120;
constexpr int64_t kPromptTokens = 20;  // bench t5's PixArt prompt row

struct BenchOptions {
  std::string what = "transformer";
  std::vector<int64_t> resolutions{512, 1024};
  std::vector<std::string> dtypes{"bf16", "f32"};
  bool json = false;
  int threads = 0, warmup = 1, repeat = 1;
  std::string row;                      // internal: "WHAT:RES:DTYPE" runs one row in this process
  std::string model;                    // serve: the model served
  int requests = 1000, clients = 8;     // serve: the load
  int ranks = 1;                        // serve: processes (mpirun when > 1)
  std::vector<std::string> serve_args;  // serve: flags for xdit serve
  std::string device = "cpu";           // transformer and flux rows: cpu or cuda[:N]
};

// Where the transformer and flux rows run (--device): their model is built
// under this device's scope, and the GEMM peak is measured there.
Device g_device;

void device_synchronize() {
#ifdef XDIT_HAVE_CUDA
  if (g_device.cuda()) cuda::synchronize();
#endif
}

// The name the rows report: oneDNN's ISA on the CPU, the GPU's name on CUDA.
std::string device_name() {
#ifdef XDIT_HAVE_CUDA
  if (g_device.cuda()) return cuda::device_info(g_device.index).name;
#endif
  return kernels::cpu_isa_name();
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int64_t peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

// The best rate of one GEMM shape (best of `runs`) through the same Linear
// the models use.
double gemm_rate(int64_t M, int64_t K, int64_t N, DType dtype, int runs) {
  const bool gpu = g_device.cuda();
  io::RandomWeights rw(7);
  DeviceScope scope(g_device);
  kernels::Linear lin(
      rw.get("w", {N, K}), Tensor(),
      gpu ? (dtype == DType::kF32 ? kernels::ComputeType::kF32 : kernels::ComputeType::kBF16)
          : kernels::resolve_compute_type(dtype));
  Tensor x = rw.get("x", {M, K}).to_device(g_device),
         y = Tensor::empty({M, N}, DType::kF32, g_device);
  lin.forward(x.data<float>(), M, y.data<float>());
  device_synchronize();
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    const auto t = Clock::now();
    lin.forward(x.data<float>(), M, y.data<float>());
    device_synchronize();
    best = std::min(best, seconds_since(t));
  }
  return 2.0 * M * N * K / best;
}

// The machine's GEMM peak. On a GPU: 8192³ (about 1 ms at Hopper's rate, so
// launch costs vanish), best of 10, cuBLASLt. On a CPU: the better of two
// shapes, best of 3 each, through the Linear the models use (oneDNN, or on
// AMX xdit's tile GEMM): 2048 × 4096 × 4096, and 2048 × 1152 × 4608 (a DiT's
// feed-forward shape), which oneDNN ran 1.2–1.3× faster on an AMX Xeon
// (K = 4096 costs it more): a peak from the slower shape alone made every
// ratio look that much better than it was.
double gemm_peak(DType dtype) {
  if (g_device.cuda()) return gemm_rate(8192, 8192, 8192, dtype, 10);
  return std::max(gemm_rate(2048, 4096, 4096, dtype, 3), gemm_rate(2048, 1152, 4608, dtype, 3));
}

// FLOPs of one PixArt forward (multiply-adds × 2) for batch B on an h×w latent.
double step_flops(const models::PixArtConfig& c, int64_t B, int64_t h, int64_t w, int64_t L) {
  const double d = static_cast<double>(c.hidden()),
               N = static_cast<double>((h / c.patch_size) * (w / c.patch_size));
  const double p2 = static_cast<double>(c.patch_size * c.patch_size);
  double f = 2.0 * N * d * c.in_channels * p2;                       // patch embedding
  f += 2.0 * L * d * (static_cast<double>(c.caption_channels) + d);  // caption projection
  double block = 2.0 * N * d * 3 * d + 2.0 * N * d * d;              // qkv, out
  block += 4.0 * N * N * d;                                          // self-attention QKᵀ and PV
  block += 2.0 * N * d * d + 2.0 * L * d * 2 * d + 2.0 * N * d * d;  // cross q, kv, out
  block += 4.0 * N * L * d;                                          // cross-attention
  block += 2.0 * N * d * 4 * d * 2;                                  // feed-forward
  f += c.num_layers * block + 2.0 * N * d * p2 * c.out_channels;
  return f * B;
}

// Times `run` (best of repeat after warmup) and fills the common fields.
// The GEMM peak is measured again after the timed runs (`peak_before` was
// taken before the model was built): the row divides by the better of the
// two and is flagged when they differ by more than 15 %, since a machine
// whose peak moves that much within one run makes any single ratio doubtful.
template <class F>
nlohmann::json timed_row(const std::string& name, int64_t res, const std::string& dt_name,
                         double flops, DType dtype, double peak_before, int warmup, int repeat,
                         F run) {
  for (int i = 0; i < warmup; ++i) run();
  double best = 1e30;
  for (int i = 0; i < std::max(1, repeat); ++i) {
    const auto t = Clock::now();
    run();
    best = std::min(best, seconds_since(t));
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);  // before the second peak measurement's buffers
  const double peak_after = gemm_peak(dtype);
  const double peak = std::max(peak_before, peak_after);
  return {{"name", name},
          {"resolution", res},
          {"dtype", dt_name},
          {"seconds", best},
          {"flops", flops},
          {"flops_per_s", flops / best},
          {"peak_flops_per_s", peak},
          {"peak_before", peak_before},
          {"peak_after", peak_after},
          {"peak_unstable", std::fabs(peak_before - peak_after) > 0.15 * peak},
          {"ratio", flops / best / peak},
          {"peak_rss_bytes", static_cast<int64_t>(ru.ru_maxrss) * 1024},
          {"threads", omp_get_max_threads()},
          {"isa", device_name()},
          {"device", g_device.str()}};
}

// `prompt_tokens` 0: the encoder on 120 real tokens. Otherwise the PixArt
// pipeline's encoding of a prompt of that many tokens (EOS included) and the
// empty negative prompt under CFG, as pipeline::encode_t5 runs it: one call,
// 2 texts × prompt_tokens positions, the negative masked after its EOS.
nlohmann::json run_t5_row(int64_t prompt_tokens, const std::string& dt_name, int warmup,
                          int repeat) {
  const DType dtype = parse_dtype(dt_name);
  const double peak = gemm_peak(dtype);
  const models::T5Config cfg = models::T5Config::xxl();
  io::RandomWeights weights(2);
  models::T5Encoder enc(cfg, weights, dtype);
  const bool pipeline = prompt_tokens > 0;
  const int64_t S = pipeline ? prompt_tokens : kTextTokens, B = pipeline ? 2 : 1;
  XDIT_CHECK(S <= kTextTokens, "bench t5: a PixArt-α prompt has at most ", kTextTokens,
             " tokens, not ", S);
  std::vector<int32_t> ids(static_cast<size_t>(B * S), 0);  // 0: T5's padding id
  std::vector<uint8_t> mask(static_cast<size_t>(B * S), 0);
  for (int64_t i = 0; i < S; ++i) {
    ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % 32000 + 3);
    mask[static_cast<size_t>(i)] = 1;
  }
  if (pipeline) {
    ids[static_cast<size_t>(S)] = 1;  // the negative "": EOS alone
    mask[static_cast<size_t>(S)] = 1;
  }
  nlohmann::json r = timed_row(pipeline ? "t5_xxl_pixart_cfg" : "t5_xxl_encoder", 0, dt_name,
                               cfg.encoder_flops(B, S), dtype, peak, warmup, repeat,
                               [&] { enc.encode(ids, mask, B, S); });
  r["tokens"] = S;
  r["weight_bytes_bf16"] = cfg.parameter_count() * 2;
  return r;
}

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

// bf16 weight bytes per rank when PipeFusion splits a model's blocks evenly
// over 2, 4 and 8 stages (the embedders and the output layer on every rank),
// into r["weight_bytes_per_rank_ppN"].
void add_pipefusion_weight_bytes(nlohmann::json& r, const io::WeightSpecs& specs) {
  int64_t all = 0, blocks = 0;
  for (const auto& [name, shape] : specs) {
    all += shape_numel(shape);
    if (name.rfind("transformer_blocks.", 0) == 0 ||
        name.rfind("single_transformer_blocks.", 0) == 0)
      blocks += shape_numel(shape);
  }
  for (const int pp : {2, 4, 8})
    r["weight_bytes_per_rank_pp" + std::to_string(pp)] =
        2 * (all - blocks + (blocks + pp - 1) / pp);
}

// FLOPs of one FLUX forward: batch 1, N image and L text tokens.
double flux_flops(const models::FluxConfig& c, int64_t N, int64_t L) {
  const double D = static_cast<double>(c.hidden()), S = static_cast<double>(N + L);
  double f = 2.0 * N * c.in_channels * D + 2.0 * L * c.joint_attention_dim * D;  // embedders
  const double attention = 4.0 * S * S * D;
  f += c.num_layers * (2.0 * S * D * 3 * D + 2.0 * S * D * D + attention + 2.0 * S * D * 8 * D);
  f += c.num_single_layers *
       (2.0 * S * D * 3 * D + 2.0 * S * D * 4 * D + attention + 2.0 * S * 5 * D * D);
  return f + 2.0 * N * D * c.in_channels;  // proj_out
}

// A FLUX.1 forward at full width (3072, 24 heads x 128, 512 T5 tokens,
// guidance embedding) at reduced depth: FLUX.1-dev's 19 + 38 blocks hold 11.9 B
// parameters (24 GB in bf16), so the row runs 2 double + 4 single blocks. A
// double and a single block have the same products (12·D² per token) and
// attention, so the time per block is the time over 6, and the full 19 + 38
// model is extrapolated by FLOPs (a second, smaller model timed alone to
// separate the two kinds was swamped by run-to-run noise on shared machines).
nlohmann::json run_flux_row(int64_t res, const std::string& dt_name, int warmup, int repeat,
                            bool tensor = false) {
  // `tensor`: the blocks split over the 2 ranks of this job (tensor parallel).
  std::optional<parallel::Mesh> mesh;
  models::DiTStage stage;
  if (tensor) {
    XDIT_CHECK(world().size() == 2, "the tensor-parallel FLUX row runs on 2 ranks");
    parallel::ParallelConfig pc;
    pc.tensor_parallel_degree = 2;
    mesh.emplace(pc, world());
    stage.tp = nn::TensorParallel::of(mesh->tp_group());
  }
  const DType dtype = parse_dtype(dt_name);
  const double peak = gemm_peak(dtype);
  models::FluxConfig cfg;  // FLUX.1's defaults
  cfg.guidance_embeds = true;
  const int64_t kFluxText = 512, h = res / 8, N = (h / 2) * (h / 2);
  TorchGenerator g(9);
  Tensor lat = g.randn({1, cfg.latent_channels(), h, h});
  Tensor text = g.randn({1, kFluxText, cfg.joint_attention_dim});
  Tensor pooled = g.randn({1, cfg.pooled_projection_dim});
  models::DiTInputs in;
  in.latents = &lat;
  in.text = &text;
  in.pooled = &pooled;
  in.timesteps = {0.5f};
  in.guidance = {3.5f};
  models::FluxConfig reduced = cfg;
  reduced.num_layers = 2;
  reduced.num_single_layers = 4;
  io::RandomWeights weights(4);
  XDIT_CHECK(!(tensor && g_device.cuda()), "bench flux: the tensor-parallel row runs on the CPU");
  // The weights go to the device as the layers are made.
  std::optional<DeviceScope> scope(std::in_place, g_device);
  models::FluxTransformer model(reduced, weights, dtype, stage);
  scope.reset();
  const double flops = flux_flops(reduced, N, kFluxText), full = flux_flops(cfg, N, kFluxText);
  comm::CommStats step_comm;  // the last timed step's all-reduces
  nlohmann::json r =
      timed_row("flux_2+4_blocks", res, dt_name, flops, dtype, peak, warmup, repeat, [&] {
        if (mesh) mesh->tp_group().stats() = {};
        model.forward(in);
        if (mesh) step_comm = mesh->tp_group().stats();
      });
  const double t = r["seconds"].get<double>();
  r["weight_bytes_bf16"] = weights.loaded().total / 2;  // this rank's, as bf16
  if (tensor) {
    r["layout"] = "tensor";
    r["ranks"] = 2;
    r["comm_seconds"] = step_comm.seconds;
    r["comm_bytes"] = step_comm.bytes_sent;
  }
  r["image_tokens"] = N;
  r["text_tokens"] = kFluxText;
  r["seconds_per_block"] = t / 6;
  r["full_model_flops"] = full;
  r["extrapolated_seconds_19_38"] = t * full / flops;
  // FLUX.1-dev's bf16 weights per PipeFusion rank (57 blocks).
  add_pipefusion_weight_bytes(r, cfg.weight_specs());
  return r;
}

// FLOPs of one SD3 forward: batch B, N image and L text tokens.
double sd3_flops(const models::SD3Config& c, int64_t B, int64_t N, int64_t L) {
  const double D = static_cast<double>(c.hidden()), S = static_cast<double>(N + L);
  const double p2 = static_cast<double>(c.patch_size * c.patch_size);
  double f = 2.0 * N * c.in_channels * p2 * D + 2.0 * L * c.joint_attention_dim * D;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const bool last = i == c.num_layers - 1;
    const double text = last ? 0.0 : static_cast<double>(L);  // to_add_out, ff_context
    f += 2.0 * S * D * 3 * D + 4.0 * S * S * D + 2.0 * (N + text) * D * D +
         2.0 * (N + text) * D * 8 * D;
    if (c.dual(i)) f += 2.0 * N * D * 4 * D + 4.0 * N * N * D;
  }
  return B * (f + 2.0 * N * D * p2 * c.out_channels);
}

// An SD3.5-large step with CFG (batch 2) at 1024 px: full width (2432 = 38
// heads x 64, qk RMSNorm, 77 + 256 text tokens) at reduced depth: its 38
// blocks hold 8.1 B parameters (16 GB in bf16), so the row runs 3 blocks (the
// last context_pre_only, as the model's last) and extrapolates to 38 by FLOPs.
nlohmann::json run_sd3_row(int64_t res, const std::string& dt_name, int warmup, int repeat) {
  const DType dtype = parse_dtype(dt_name);
  const double peak = gemm_peak(dtype);
  models::SD3Config cfg;  // SD3.5-large
  cfg.num_layers = 38;
  cfg.num_attention_heads = 38;
  cfg.attention_head_dim = 64;
  cfg.caption_projection_dim = 2432;
  cfg.pos_embed_max_size = 192;
  cfg.qk_norm = true;
  const int64_t kText = 77 + 256, h = res / 8, N = (h / 2) * (h / 2), B = 2;
  TorchGenerator g(9);
  Tensor lat = g.randn({B, cfg.in_channels, h, h});
  Tensor text = g.randn({B, kText, cfg.joint_attention_dim});
  Tensor pooled = g.randn({B, cfg.pooled_projection_dim});
  models::DiTInputs in;
  in.latents = &lat;
  in.text = &text;
  in.pooled = &pooled;
  in.timesteps = {500.0f, 500.0f};
  models::SD3Config reduced = cfg;
  reduced.num_layers = 3;
  io::RandomWeights weights(4);
  models::SD3Transformer model(reduced, weights, dtype);
  const double flops = sd3_flops(reduced, B, N, kText), full = sd3_flops(cfg, B, N, kText);
  nlohmann::json r = timed_row("sd35_large_3_blocks", res, dt_name, flops, dtype, peak, warmup,
                               repeat, [&] { model.forward(in); });
  const double t = r["seconds"].get<double>();
  r["image_tokens"] = N;
  r["text_tokens"] = kText;
  r["batch"] = B;
  r["seconds_per_block"] = t / 3;
  r["full_model_flops"] = full;
  r["extrapolated_seconds_38"] = t * full / flops;
  r["parameters"] = cfg.parameter_count();
  // SD3.5-large's bf16 weights per PipeFusion rank (38 blocks).
  add_pipefusion_weight_bytes(r, cfg.weight_specs());
  return r;
}

nlohmann::json run_vae_row(int64_t res, const std::string& dt_name, int warmup, int repeat) {
  const DType dtype = parse_dtype(dt_name);
  const double peak = gemm_peak(dtype);
  models::VaeConfig cfg;  // the SD / PixArt VAE: 128, 256, 512, 512 channels, 2 ResNets a block
  io::RandomWeights weights(3);
  models::VaeDecoder vae(cfg, weights, dtype);
  const int64_t h = res / cfg.scale_factor();
  TorchGenerator g(1);
  Tensor z = g.randn({1, cfg.latent_channels, h, h});
  const int64_t before = peak_rss_bytes();
  nlohmann::json r = timed_row("vae_decoder", res, dt_name, cfg.decoder_flops(1, h, h), dtype, peak,
                               warmup, repeat, [&] { vae.decode(z); });
  r["rss_before_decode_bytes"] = before;  // weights and runtime: the rest is activations
  return r;
}

// Random inputs of one PixArt step for batch B at res px: latents, 120 text
// tokens of which 100 valid, micro-conditions, timestep 500.
struct StepInputs {
  Tensor latents, text, mask, resolution, aspect;
  models::DiTInputs in;
  StepInputs(const models::PixArtConfig& cfg, int64_t B, int64_t res) {
    TorchGenerator g(0);
    latents = g.randn({B, cfg.in_channels, res / 8, res / 8});
    text = g.randn({B, kTextTokens, cfg.caption_channels});
    mask = Tensor::empty({B, kTextTokens});
    resolution = Tensor::empty({B, 2});
    aspect = Tensor::empty({B, 1});
    for (int64_t i = 0; i < mask.numel(); ++i)
      mask.data<float>()[i] = (i % kTextTokens) < 100 ? 1.0f : 0.0f;
    for (int64_t b = 0; b < B; ++b) {
      resolution.data<float>()[2 * b] = resolution.data<float>()[2 * b + 1] =
          static_cast<float>(res);
      aspect.data<float>()[b] = 1.0f;
    }
    in.latents = &latents;
    in.timesteps.assign(static_cast<size_t>(B), 500.0f);
    in.text = &text;
    in.text_mask = &mask;
    in.resolution = &resolution;
    in.aspect_ratio = &aspect;
  }
  StepInputs(const StepInputs&) = delete;  // `in` points into this object
};

nlohmann::json run_row(int64_t res, const std::string& dt_name, int warmup, int repeat) {
  const DType dtype = parse_dtype(dt_name);
  const double peak = gemm_peak(dtype);
  const models::PixArtConfig cfg = models::PixArtConfig::alpha_xl_1024();
  io::RandomWeights weights(1);
  // The weights go to the device as the layers are made.
  std::optional<DeviceScope> scope(std::in_place, g_device);
  models::PixArtTransformer model(cfg, weights, dtype);
  scope.reset();
  const int64_t B = 2, h = res / 8, w = res / 8;
  StepInputs step(cfg, B, res);
  models::DiTInputs& in = step.in;
  nlohmann::json r =
      timed_row("pixart_alpha_step_cfg", res, dt_name, step_flops(cfg, B, h, w, kTextTokens), dtype,
                peak, warmup, repeat, [&] { model.forward(in); });
  r["weight_bytes_bf16"] = cfg.parameter_count() * 2;
  return r;
}

// One step of the full-size transformer over two ranks with one layout
// ("ulysses", "ring", "cfg", "displaced" or "naive"), as the pipeline runs
// it: CFG halves or patch rows per rank, then the gathers. A "-slow" suffix
// slows rank 1 by a busy thread on its core (the child runs with
// --bind-to core): a co-tenant taking half of one device; "-slow-auto" then
// sets the bands from one calibration step (--patch_weights auto). Rank 0
// returns the row.
nlohmann::json run_parallel_row(int64_t res, const std::string& dt_name, const std::string& name,
                                int warmup, int repeat) {
  comm::Communicator& w = world();
  XDIT_CHECK(w.size() == 2, "bench parallel rows run on 2 ranks (got ", w.size(), ")");
  const bool auto_weights = name.size() > 10 && name.substr(name.size() - 10) == "-slow-auto";
  const bool slow = auto_weights || (name.size() > 5 && name.substr(name.size() - 5) == "-slow");
  const std::string layout = name.substr(0, name.find('-'));
  parallel::ParallelConfig pc;
  if (layout == "ulysses")
    pc.ulysses_degree = 2;
  else if (layout == "ring")
    pc.ring_degree = 2;
  else if (layout == "cfg")
    pc.use_cfg_parallel = true;
  else if (layout == "displaced" || layout == "naive") {
    pc.patch_parallel_degree = 2;
    pc.patch_mode = layout;
  } else if (layout == "tensor") {
    pc.tensor_parallel_degree = 2;
  } else {
    XDIT_FAIL("unknown layout '", layout, "': ulysses, ring, cfg, displaced, naive or tensor");
  }
  XDIT_CHECK(!slow || pc.sp() > 1, "a slowed rank needs a layout that splits rows");
  parallel::Mesh mesh(pc, w);
  // The co-tenant: a busy thread on rank 1's core for the whole row.
  std::atomic<bool> stop{false};
  std::thread spinner;
  if (slow && w.rank() == 1)
    spinner = std::thread([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  const DType dtype = parse_dtype(dt_name);
  const double peak = gemm_peak(dtype);
  const models::PixArtConfig cfg = models::PixArtConfig::alpha_xl_1024();
  io::RandomWeights weights(1);
  models::DiTStage stage;
  stage.tp = nn::TensorParallel::of(mesh.tp_group());
  models::PixArtTransformer model(cfg, weights, dtype, stage);
  parallel::UspAttention usp(mesh.ulysses_group(), mesh.ring_group());
  // Patch parallelism: the warm-up step exchanges fresh K/V; the timed steps
  // run DistriFusion's stale-K/V steps (or naive bands).
  parallel::PatchAttention patch(mesh.sp_group(), pc.patch_mode == "displaced", false);
  nn::AttentionBackend* backend = nullptr;
  if (pc.patch_parallel_degree > 1)
    backend = &patch;
  else if (pc.sp() > 1)
    backend = &usp;
  if (backend != nullptr) model.set_attention_backend(backend);
  int64_t step_no = 0;
  const int64_t B = pc.use_cfg_parallel ? 1 : 2, h = res / 8, w8 = res / 8, p = cfg.patch_size;
  StepInputs step_in(cfg, B, res);
  models::DiTInputs& in = step_in.in;
  // This rank's patch rows of the split (even, or by the mesh's weights),
  // told to the attention backend.
  std::vector<int64_t> counts;
  const auto set_rows = [&] {
    counts = mesh.config().row_split(h / p);
    std::vector<int64_t> tokens;
    for (int64_t c : counts) tokens.push_back(c * (w8 / p));
    const bool even =
        std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts.front(); });
    if (backend != nullptr) backend->set_sequence_split(even ? std::vector<int64_t>{} : tokens);
    const auto [b, e] = parallel::row_share(0, counts, mesh.coord().sp);
    in.patch_row_begin = b;
    in.patch_row_end = e;
  };
  set_rows();
  std::string calibration;
  if (auto_weights) {
    const parallel::Calibration c = parallel::calibrate_weights(mesh, h / p, [&](int64_t, int64_t) {
      patch.begin_step(0, 1, true);
      model.forward(in);
    });
    mesh.set_patch_weights(c.weights);
    calibration = c.describe();
    set_rows();
  }
  auto step = [&] {
    patch.begin_step(step_no, int64_t{1} << 40, step_no == 0);
    ++step_no;
    Tensor out = model.forward(in);
    std::vector<int64_t> latent_rows;
    for (int64_t c : counts) latent_rows.push_back(c * p);
    out = parallel::gather_rows(mesh.sp_group(), out, latent_rows);
    if (pc.use_cfg_parallel) out = parallel::gather_batch(mesh.cfg_group(), out);
  };
  comm::Communicator* groups[] = {&mesh.sp_group(), &mesh.ulysses_group(), &mesh.ring_group(),
                                  &mesh.cfg_group(), &mesh.tp_group()};
  for (int i = 0; i < warmup; ++i) step();
  double best = 1e30, comm_s = 0;
  uint64_t comm_bytes = 0;
  for (int i = 0; i < std::max(1, repeat); ++i) {
    for (auto* c : groups) c->stats() = {};
    w.barrier();
    const auto t = Clock::now();
    step();
    const double s = seconds_since(t);
    if (s < best) {
      best = s;
      comm_s = 0;
      comm_bytes = 0;
      for (auto* c : groups) comm_s += c->stats().seconds, comm_bytes += c->stats().bytes_sent;
    }
  }
  stop = true;
  if (spinner.joinable()) spinner.join();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double flops = step_flops(cfg, 2, h, w8, kTextTokens);
  nlohmann::json r = {{"name", "pixart_alpha_step_cfg_parallel"},
                      {"layout", name},
                      {"ranks", 2},
                      {"resolution", res},
                      {"dtype", dt_name},
                      {"seconds", best},
                      {"comm_seconds", comm_s},
                      {"comm_bytes", comm_bytes},
                      {"flops", flops},
                      {"flops_per_s", flops / best},
                      {"peak_flops_per_s", peak},
                      {"peak_rss_bytes", static_cast<int64_t>(ru.ru_maxrss) * 1024},
                      {"patch_rows", counts},
                      // the weights this rank loaded, as bf16 (random weights come as f32)
                      {"weight_bytes_bf16", weights.loaded().total / 2},
                      {"threads", omp_get_max_threads()}};
  if (!calibration.empty()) r["calibration"] = calibration;
  return r;
}

// PipeFusion on two ranks (two stages of 14 blocks, M patches): the full
// pipeline loop for one prompt with CFG, one warm-up step then one patch step;
// the patch step is timed. Rank 0 returns the row with both ranks' memory.
nlohmann::json run_pipefusion_row(int64_t res, const std::string& dt_name, int64_t m) {
  comm::Communicator& w = world();
  XDIT_CHECK(w.size() == 2, "bench PipeFusion rows run on 2 ranks (got ", w.size(), ")");
  parallel::ParallelConfig pc;
  pc.pipefusion_parallel_degree = 2;
  pc.num_pipeline_patch = static_cast<int>(m);
  pc.warmup_steps = 1;
  parallel::Mesh mesh(pc, w);
  const models::PixArtConfig cfg = models::PixArtConfig::alpha_xl_1024();
  pipeline::Pipeline pipe(pipeline::ModelFamily::pixart(cfg), schedulers::SchedulerConfig{},
                          std::make_unique<io::RandomWeights>(1), parse_dtype(dt_name));
  pipe.set_mesh(&mesh);
  TorchGenerator g(0);
  pipeline::LatentRequest r;
  r.prompt_embeds = g.randn({1, kTextTokens, cfg.caption_channels});
  r.negative_embeds = g.randn({1, kTextTokens, cfg.caption_channels});
  r.height = r.width = res;
  r.num_inference_steps = 2;
  r.guidance_scale = 4.5;
  comm::Communicator& pp = mesh.pp_group();
  double step_s = 0, comm_s = 0;
  uint64_t bytes = 0;
  pipe.generate_latents(r, [&](const pipeline::StepEvent& e) {
    if (e.step == 1) {  // the warm-up: start counting the patch step from here
      pp.stats() = {};
      return;
    }
    step_s = e.seconds;
    comm_s = pp.stats().seconds;
    bytes = pp.stats().bytes_sent;
  });
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  int64_t rss[2] = {static_cast<int64_t>(ru.ru_maxrss) * 1024, 0}, all[4];
  w.allgather(rss, all, sizeof rss, comm::Type::kByte);
  return {{"name", "pixart_alpha_step_cfg_pipefusion"},
          {"layout", "pipefusion"},
          {"ranks", 2},
          {"patches", m},
          {"resolution", res},
          {"dtype", dt_name},
          {"seconds", step_s},
          {"comm_seconds", comm_s},
          {"comm_bytes", bytes},
          {"peak_rss_bytes", all[0]},
          {"peak_rss_bytes_rank1", all[2]},
          {"threads", omp_get_max_threads()}};
}

// The patch-parallel VAE decoder on two ranks (a band of latent rows each):
// the decode to a res px image is timed; rank 0 returns the row with both
// ranks' memory.
nlohmann::json run_parallel_vae_row(int64_t res, const std::string& dt_name, int warmup,
                                    int repeat) {
  comm::Communicator& w = world();
  XDIT_CHECK(w.size() == 2, "bench parallel VAE rows run on 2 ranks (got ", w.size(), ")");
  models::VaeConfig cfg;  // the SD / PixArt VAE
  io::RandomWeights weights(3);
  models::VaeDecoder vae(cfg, weights, parse_dtype(dt_name));
  const int64_t h = res / cfg.scale_factor();
  TorchGenerator g(1);
  Tensor z = g.randn({1, cfg.latent_channels, h, h});
  parallel::VaeBands bands(w, parallel::row_counts(h, 2));
  const int64_t before = peak_rss_bytes();
  for (int i = 0; i < warmup; ++i) vae.decode(z, &bands);
  double best = 1e30, comm_s = 0;
  uint64_t bytes = 0;
  for (int i = 0; i < std::max(1, repeat); ++i) {
    w.barrier();
    w.stats() = {};
    const auto t = Clock::now();
    vae.decode(z, &bands);
    const double s = seconds_since(t);
    if (s < best) best = s, comm_s = w.stats().seconds, bytes = w.stats().bytes_sent;
  }
  int64_t rss[2] = {peak_rss_bytes(), before}, all[4];
  w.allgather(rss, all, sizeof rss, comm::Type::kByte);
  return {{"name", "vae_decoder_parallel"},
          {"rss_before_decode_bytes", all[1]},
          {"rss_before_decode_bytes_rank1", all[3]},
          {"layout", "vae_bands"},
          {"ranks", 2},
          {"resolution", res},
          {"dtype", dt_name},
          {"seconds", best},
          {"comm_seconds", comm_s},
          {"comm_bytes", bytes},
          {"flops", cfg.decoder_flops(1, h, h)},
          {"peak_rss_bytes", all[0]},
          {"peak_rss_bytes_rank1", all[2]},
          {"threads", omp_get_max_threads()}};
}

// Runs one row in a child process (this binary with --row) and parses its JSON.
// A layout runs the row on two ranks under mpirun.
nlohmann::json run_child(const std::string& what, int64_t res, const std::string& dt,
                         const BenchOptions& o, const std::string& layout = "", int threads = 0) {
  std::ostringstream cmd;
  // A slowed rank shares its core with a busy thread: bind each rank to one.
  const bool bind = layout.find("-slow") != std::string::npos;
  if (!layout.empty())
    cmd << "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe "
        << (bind ? "--bind-to core " : "--bind-to none ");
  cmd << "'/proc/" << ::getpid() << "/exe' bench " << what << " --row " << what << ":" << res << ":"
      << dt << (layout.empty() ? "" : ":" + layout) << " --warmup " << o.warmup << " --repeat "
      << o.repeat << " --device " << o.device;
  if (threads > 0)
    cmd << " --threads " << threads;
  else if (o.threads > 0)
    cmd << " --threads " << o.threads;
  FILE* f = ::popen(cmd.str().c_str(), "r");
  XDIT_CHECK(f != nullptr, "bench: cannot start a child process");
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  const int rc = ::pclose(f);
  XDIT_CHECK(rc == 0, "bench ", what, " ", res, " ", dt, " failed (exit status ", rc, ")");
  return nlohmann::json::parse(out);
}

std::string human(double v, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (v >= 1000 && i < 5) v /= 1000, ++i;
  std::ostringstream s;
  s << std::fixed << std::setprecision(v < 10 ? 2 : 1) << v << " " << prefixes[i] << unit;
  return s.str();
}

// 1 rank x 2 threads against 2 ranks x 1 thread for Ulysses, Ring and CFG parallel.
int run_parallel_bench(const BenchOptions& o) {
  XDIT_CHECK(world().size() == 1,
             "run `xdit bench parallel` itself without mpirun: it starts mpirun for its rows");
  const int64_t res = *std::max_element(o.resolutions.begin(), o.resolutions.end());
  const std::string dt = o.dtypes.front();
  nlohmann::json base = run_child("transformer", res, dt, o, "", 2);
  const double t1 = base["seconds"].get<double>();
  if (o.json)
    std::cout << base.dump() << std::endl;
  else
    std::cout << "PixArt-alpha XL/2 step with CFG at " << res << " px, " << dt
              << ": 1 rank x 2 threads against 2 ranks x 1 thread\n"
              << std::left << std::setw(22) << "layout" << std::right << std::setw(10) << "s/step"
              << std::setw(12) << "comm s" << std::setw(14) << "sent/rank" << std::setw(10)
              << "speed-up" << std::setw(12) << "efficiency" << std::setw(11) << "peak RSS"
              << "\n"
              << std::left << std::setw(22) << "serial (1x2 threads)" << std::right << std::setw(10)
              << std::fixed << std::setprecision(2) << t1 << std::setw(12) << "-" << std::setw(14)
              << "-" << std::setw(10) << "1.00" << std::setw(12) << "1.00" << std::setw(11)
              << human(static_cast<double>(base["peak_rss_bytes"].get<int64_t>()), "B")
              << std::endl;
  for (const char* layout : {"ulysses", "ring", "cfg", "displaced", "naive", "pipefusion-2",
                             "pipefusion-4", "pipefusion-8", "displaced-slow",
                             "displaced-slow-auto", "ulysses-slow", "ulysses-slow-auto"}) {
    nlohmann::json r = run_child("parallel", res, dt, o, layout, 1);
    const double t = r["seconds"].get<double>();
    r["speedup"] = t1 / t;
    r["efficiency"] = t1 / t;  // the same two cores either way
    if (o.json) {
      std::cout << r.dump() << std::endl;
      continue;
    }
    std::cout << std::left << std::setw(22) << (std::string(layout) + " (2x1)") << std::right
              << std::setw(10) << std::fixed << std::setprecision(2) << t << std::setw(12)
              << r["comm_seconds"].get<double>() << std::setw(14)
              << human(static_cast<double>(r["comm_bytes"].get<uint64_t>()), "B") << std::setw(10)
              << t1 / t << std::setw(12) << t1 / t << std::setw(11)
              << human(static_cast<double>(r["peak_rss_bytes"].get<int64_t>()), "B");
    if (r.contains("peak_rss_bytes_rank1"))  // PipeFusion: each rank holds its stage
      std::cout << " / "
                << human(static_cast<double>(r["peak_rss_bytes_rank1"].get<int64_t>()), "B");
    if (r.contains("patch_rows") && std::string(layout).find("-slow") != std::string::npos)
      std::cout << "  patch rows " << r["patch_rows"].dump()
                << (r.contains("calibration") ? ", " + r["calibration"].get<std::string>() : "");
    std::cout << std::endl;
  }
  // The patch-parallel VAE decoder (--use_parallel_vae) on the same two cores.
  nlohmann::json vb = run_child("vae", res, dt, o, "", 2);
  nlohmann::json vp = run_child("parallel", res, dt, o, "vae", 1);
  const double v1 = vb["seconds"].get<double>(), v2 = vp["seconds"].get<double>();
  vp["speedup"] = v1 / v2;
  if (o.json) {
    std::cout << vb.dump() << std::endl << vp.dump() << std::endl;
    return 0;
  }
  // Peak RSS, and in brackets what decoding added (activations) over the
  // weights and runtime held before it.
  const auto mem = [](const nlohmann::json& r, const std::string& suffix) {
    const auto peak = static_cast<double>(r["peak_rss_bytes" + suffix].get<int64_t>());
    const auto before = static_cast<double>(r["rss_before_decode_bytes" + suffix].get<int64_t>());
    return human(peak, "B") + " (+" + human(peak - before, "B") + ")";
  };
  std::cout << "\nVAE decoder to " << res << " px, " << dt
            << ": 1 rank x 2 threads against 2 ranks x 1 thread (row bands); peak RSS "
               "(+ decoding's own)\n"
            << std::left << std::setw(22) << "serial (1x2 threads)" << std::right << std::setw(10)
            << std::fixed << std::setprecision(2) << v1 << std::setw(12) << "-" << std::setw(14)
            << "-" << std::setw(10) << "1.00" << std::setw(12) << "1.00"
            << "  " << mem(vb, "") << "\n"
            << std::left << std::setw(22) << "vae bands (2x1)" << std::right << std::setw(10) << v2
            << std::setw(12) << vp["comm_seconds"].get<double>() << std::setw(14)
            << human(static_cast<double>(vp["comm_bytes"].get<uint64_t>()), "B") << std::setw(10)
            << v1 / v2 << std::setw(12) << v1 / v2 << "  " << mem(vp, "") << " / "
            << mem(vp, "_rank1") << std::endl;
  return 0;
}

// Which share of each weight a tensor-parallel rank reads, by state-dict
// key: 1 whole, 1/T for a slice (summed over several slices of one weight).
// Learnt from the loaders on a narrow model of the same structure, then
// applied to the full-size shapes: the memory of layouts larger than this
// machine, measured from the code that loads them.
class ShareRecorder : public io::WeightSource {
 public:
  bool has(const std::string&) const override { return true; }
  size_t stored_bytes() const override { return 0; }
  // bf16 bytes of the weights `specs` at these shares (throws on a weight
  // the narrow model did not read: the two would not share a structure).
  double bf16_bytes(const io::WeightSpecs& specs) const {
    double b = 0;
    for (const auto& [name, shape] : specs) {
      auto it = share_.find(name);
      XDIT_CHECK(it != share_.end(), "bench: '", name, "' was not read by the narrow model");
      b += static_cast<double>(shape_numel(shape)) * it->second * 2.0;
    }
    return b;
  }

 protected:
  Tensor read(const std::string& name, const Shape& shape) const override {
    share_[name] += 1.0;
    return random_.get(name, shape);
  }
  Tensor read_slice(const std::string& name, const Shape& shape, int dim, int64_t begin,
                    int64_t count) const override {
    share_[name] +=
        static_cast<double>(count) / static_cast<double>(shape[static_cast<size_t>(dim)]);
    return random_.get_slice(name, shape, dim, begin, count);
  }

 private:
  io::RandomWeights random_{3};
  mutable std::map<std::string, double> share_;
};

// Tensor parallelism on the same two cores: 1 rank x 2 threads against 2
// ranks x 1 thread, for the PixArt-α step with CFG and FLUX's reduced-depth
// forward, with the bytes all-reduced, the time inside the all-reduces and
// each rank's weights; then rank 0's weights for real FLUX.1-dev + T5-XXL at
// T = 1, 2, 4, 8 (rank 0 also holds the row-parallel biases).
int run_tensor_bench(const BenchOptions& o) {
  XDIT_CHECK(world().size() == 1,
             "run `xdit bench tensor` itself without mpirun: it starts mpirun for its rows");
  const int64_t res = *std::max_element(o.resolutions.begin(), o.resolutions.end());
  const std::string dt = o.dtypes.front();
  if (!o.json)
    std::cout << "Tensor parallel 2 at " << res << " px, " << dt
              << ": 1 rank x 2 threads against 2 ranks x 1 thread\n"
              << std::left << std::setw(26) << "model" << std::right << std::setw(10) << "serial s"
              << std::setw(10) << "tp2 s" << std::setw(10) << "speed-up" << std::setw(10)
              << "comm s" << std::setw(14) << "all-reduced" << std::setw(16) << "weights 1 rank"
              << std::setw(16) << "weights/rank" << std::setw(15) << "peak RSS/rank"
              << "\n";
  for (const bool flux : {false, true}) {
    nlohmann::json base = run_child(flux ? "flux" : "transformer", res, dt, o, "", 2);
    nlohmann::json tp = run_child(flux ? "flux" : "parallel", res, dt, o, "tensor", 1);
    const double t1 = base["seconds"].get<double>(), t2 = tp["seconds"].get<double>();
    tp["speedup"] = t1 / t2;
    if (o.json) {
      std::cout << base.dump() << std::endl << tp.dump() << std::endl;
      continue;
    }
    const auto bytes = [](const nlohmann::json& r, const char* k) {
      return human(static_cast<double>(r[k].get<int64_t>()), "B");
    };
    std::cout << std::left << std::setw(26)
              << (flux ? "FLUX.1 2+4 blocks" : "PixArt-alpha step, CFG") << std::right << std::fixed
              << std::setprecision(2) << std::setw(10) << t1 << std::setw(10) << t2 << std::setw(10)
              << t1 / t2 << std::setw(10) << tp["comm_seconds"].get<double>() << std::setw(14)
              << human(static_cast<double>(tp["comm_bytes"].get<uint64_t>()), "B") << std::setw(16)
              << bytes(base, "weight_bytes_bf16") << std::setw(16) << bytes(tp, "weight_bytes_bf16")
              << std::setw(15) << bytes(tp, "peak_rss_bytes") << std::endl;
  }
  // Real FLUX.1-dev (guidance embedding) and T5-XXL, from narrow models of
  // their structure (8 heads, so that T = 8 splits).
  models::FluxConfig flux_dev;
  flux_dev.guidance_embeds = true;
  models::FluxConfig flux_narrow = flux_dev;
  flux_narrow.num_attention_heads = 8;
  flux_narrow.attention_head_dim = 8;
  flux_narrow.axes_dims_rope = {2, 2, 4};
  flux_narrow.joint_attention_dim = 16;
  models::T5Config t5_narrow = models::T5Config::xxl();
  t5_narrow.d_model = 16;
  t5_narrow.d_kv = 2;
  t5_narrow.num_heads = 8;
  t5_narrow.d_ff = 16;
  t5_narrow.vocab_size = 8;
  io::WeightSpecs t5_specs = models::T5Config::xxl().weight_specs();
  if (!o.json)
    std::cout << "\nWeights per rank (bf16) for FLUX.1-dev + T5-XXL under tensor parallelism\n"
              << std::left << std::setw(6) << "T" << std::right << std::setw(16) << "transformer"
              << std::setw(12) << "T5-XXL" << std::setw(12) << "together"
              << "\n";
  for (const int T : {1, 2, 4, 8}) {
    const nn::TensorParallel load_only{0, T, nullptr};
    ShareRecorder fr, tr;
    models::FluxTransformer f(flux_narrow, fr, DType::kF32,
                              models::DiTStage(0, -1, true, true, load_only));
    models::T5Encoder t(t5_narrow, tr, DType::kF32, load_only);
    const double fb = fr.bf16_bytes(flux_dev.weight_specs()), tb = tr.bf16_bytes(t5_specs);
    if (o.json) {
      std::cout << nlohmann::json{{"name", "tensor_parallel_weights"},
                                  {"tensor_parallel_degree", T},
                                  {"flux_dev_bytes_bf16", fb},
                                  {"t5_xxl_bytes_bf16", tb}}
                       .dump()
                << std::endl;
      continue;
    }
    std::cout << std::left << std::setw(6) << T << std::right << std::setw(16) << human(fb, "B")
              << std::setw(12) << human(tb, "B") << std::setw(12) << human(fb + tb, "B")
              << std::endl;
  }
  return 0;
}

int run_bench(const BenchOptions& o) {
  if (o.what == "serve")
    return run_bench_serve(o.model, o.requests, o.clients, o.threads, o.ranks, o.serve_args);
  set_threads(o.threads);
  g_device = parse_device(o.device);
  check_device(g_device);  // one line where there is no GPU
  XDIT_CHECK(!g_device.cuda() || o.what == "transformer" || o.what == "flux", "bench ", o.what,
             ": --device ", g_device.str(),
             " runs the transformer and flux benchmarks only (the other rows have no GPU form "
             "yet)");
  XDIT_CHECK(o.what == "transformer" || o.what == "attention" || o.what == "t5" ||
                 o.what == "vae" || o.what == "flux" || o.what == "sd3" || o.what == "parallel" ||
                 o.what == "tensor" || o.what == "all",
             "unknown benchmark '", o.what,
             "': transformer, attention, t5, vae, flux, sd3, parallel, tensor, serve or all");
  if (!o.row.empty()) {  // child: WHAT:RES:DTYPE[:LAYOUT]
    std::vector<std::string> f;
    std::stringstream ss(o.row);
    for (std::string part; std::getline(ss, part, ':');) f.push_back(part);
    XDIT_CHECK(f.size() >= 3, "--row expects WHAT:RES:DTYPE[:LAYOUT]");
    const std::string& what = f[0];
    const std::string& dt = f[2];
    const int64_t res = std::stoll(f[1]);
    nlohmann::json r =
        what == "t5"          ? run_t5_row(res, dt, o.warmup, o.repeat)
        : what == "vae"       ? run_vae_row(res, dt, o.warmup, o.repeat)
        : what == "attention" ? run_attention_row(res, dt, o.warmup, o.repeat)
        : what == "flux"
            ? run_flux_row(res, dt, o.warmup, o.repeat, f.size() > 3 && f[3] == "tensor")
        : what == "sd3"                          ? run_sd3_row(res, dt, o.warmup, o.repeat)
        : what == "parallel" && f.at(3) == "vae" ? run_parallel_vae_row(res, dt, o.warmup, o.repeat)
        : what == "parallel" && f.at(3).rfind("pipefusion", 0) == 0
            ? run_pipefusion_row(res, dt, std::stoll(f.at(3).substr(11)))
        : what == "parallel" ? run_parallel_row(res, dt, f.at(3), o.warmup, o.repeat)
                             : run_row(res, dt, o.warmup, o.repeat);
    if (world().rank() == 0) std::cout << r.dump() << std::endl;
    return 0;
  }
  if (o.what == "parallel") return run_parallel_bench(o);
  if (o.what == "tensor") return run_tensor_bench(o);
  for (const auto& dt : o.dtypes) {
    const DType t = parse_dtype(dt);
    XDIT_CHECK(t != DType::kF16, "bench: --dtypes takes bf16 and/or f32");
  }
  // The rows: the transformer at each resolution; T5-XXL (120 tokens, and a
  // 20-token PixArt prompt with its empty negative as the pipeline encodes
  // them; bf16 unless only f32 is asked for: f32 XXL weights alone are
  // 19 GB); the VAE at the largest resolution.
  struct Row {
    std::string what;
    int64_t res;
    std::string dt;
  };
  std::vector<Row> rows;
  const bool all = o.what == "all";
  if (all || o.what == "transformer")
    for (int64_t res : o.resolutions)
      for (const auto& dt : o.dtypes) rows.push_back({"transformer", res, dt});
  if (all || o.what == "attention")
    for (int64_t res : o.resolutions)
      for (const auto& dt : o.dtypes) rows.push_back({"attention", res, dt});
  if (all || o.what == "t5")
    for (const auto& dt : o.dtypes)
      if (dt == "bf16" || o.dtypes.size() == 1)
        for (int64_t tokens : {int64_t{0}, kPromptTokens}) rows.push_back({"t5", tokens, dt});
  if (all || o.what == "vae")
    for (const auto& dt : o.dtypes)
      rows.push_back({"vae", *std::max_element(o.resolutions.begin(), o.resolutions.end()), dt});
  if (all || o.what == "flux")
    for (const auto& dt : o.dtypes)
      rows.push_back({"flux", *std::max_element(o.resolutions.begin(), o.resolutions.end()), dt});
  if (all || o.what == "sd3")
    for (const auto& dt : o.dtypes)
      rows.push_back({"sd3", *std::max_element(o.resolutions.begin(), o.resolutions.end()), dt});
  if (!o.json)
    std::cout << "full-size components, random weights; ratio = achieved FLOP/s / GEMM peak "
                 "measured in the same "
                 "process\n"
              << std::left << std::setw(24) << "benchmark" << std::setw(7) << "res" << std::setw(6)
              << "dtype" << std::right << std::setw(10) << "seconds" << std::setw(12) << "FLOPs"
              << std::setw(14) << "FLOP/s" << std::setw(14) << "GEMM peak" << std::setw(7)
              << "ratio" << std::setw(11) << "peak RSS" << std::endl;
  for (const Row& row : rows) {
    nlohmann::json r = run_child(row.what, row.res, row.dt, o);
    if (o.json) {
      std::cout << r.dump() << std::endl;
      continue;
    }
    const std::string res = row.what == "t5" ? std::to_string(r["tokens"].get<int64_t>()) + "t"
                                             : std::to_string(row.res);
    std::cout << std::left << std::setw(24) << r["name"].get<std::string>() << std::setw(7) << res
              << std::setw(6) << row.dt << std::right << std::setw(10) << std::fixed
              << std::setprecision(2) << r["seconds"].get<double>() << std::setw(12)
              << human(r["flops"].get<double>(), "") << std::setw(14)
              << human(r["flops_per_s"].get<double>(), "/s") << std::setw(14)
              << human(r["peak_flops_per_s"].get<double>(), "/s") << std::setw(7)
              << std::setprecision(2) << r["ratio"].get<double>() << std::setw(11)
              << human(static_cast<double>(r["peak_rss_bytes"].get<int64_t>()), "B");
    if (r.contains("extrapolated_seconds_19_38"))
      std::cout << "  " << std::setprecision(2) << r["seconds_per_block"].get<double>()
                << " s per block; 19 + 38 blocks ~ "
                << r["extrapolated_seconds_19_38"].get<double>() << " s";
    if (r.contains("extrapolated_seconds_38"))
      std::cout << "  " << std::setprecision(2) << r["seconds_per_block"].get<double>()
                << " s per block; 38 blocks ~ " << r["extrapolated_seconds_38"].get<double>()
                << " s";
    if (r.value("peak_unstable", false))
      std::cout << "  ! GEMM peak moved from " << human(r["peak_before"].get<double>(), "/s")
                << " to " << human(r["peak_after"].get<double>(), "/s")
                << " during the row: repeat it";
    std::cout << std::endl;
  }
  return 0;
}

}  // namespace

std::function<int()> add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* b =
      app.add_subcommand("bench", "benchmarks against the GEMM peak measured in the same run");
  b->add_option("what", o->what,
                "benchmark: transformer, attention, t5, vae, flux, sd3, parallel, tensor, serve "
                "(load on xdit serve) or all")
      ->capture_default_str();
  b->add_option("--resolutions", o->resolutions, "image sizes in pixels")
      ->delimiter(',')
      ->capture_default_str();
  b->add_option("--dtypes", o->dtypes, "bf16 and/or f32")->delimiter(',')->capture_default_str();
  b->add_flag("--json", o->json, "one JSON object per row");
  b->add_option("--device", o->device,
                "transformer and flux: cpu, or cuda[:N] (the GEMM peak is then cuBLASLt's)")
      ->capture_default_str();
  b->add_option("--threads", o->threads, "OpenMP threads, 1 … 4 x cores (default: all cores)")
      ->check(thread_count());
  b->add_option("--warmup", o->warmup, "untimed steps before timing")->capture_default_str();
  b->add_option("--repeat", o->repeat, "timed steps (the best is reported)")->capture_default_str();
  b->add_option("--model", o->model, "serve: the model served (default: the built-in tiny one)");
  b->add_option("--requests", o->requests, "serve: requests sent (a tenth is the warm-up)")
      ->capture_default_str();
  b->add_option("--clients", o->clients, "serve: concurrent clients")->capture_default_str();
  b->add_option("--ranks", o->ranks, "serve: processes, under mpirun when more than 1")
      ->capture_default_str();
  b->add_option("--serve_args", o->serve_args,
                "serve: flags for xdit serve, e.g. \"--data_parallel_degree 2\"")
      ->delimiter(' ');
  b->add_option("--row", o->row, "internal: run one row (WHAT:RES:DTYPE) in this process")
      ->group("");
  return [o] { return run_bench(*o); };
}

}  // namespace xdit::app
