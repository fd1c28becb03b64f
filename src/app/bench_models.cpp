// xdit bench transformer, t5, vae, flux and sd3: full-size components with
// random weights made in memory, each against the GEMM peak measured in the
// same process:
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
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "app/bench_util.h"
#include "app/startup.h"
#include "core/error.h"
#include "core/rng.h"
#include "io/gguf_quants.h"
#include "io/weights.h"
#include "kernels/cpu/q8_0_gemm.h"
#include "kernels/linear.h"
#include "models/flux.h"
#include "models/pixart.h"
#include "models/sd3.h"
#include "models/t5.h"
#include "models/vae.h"
#include "nn/lora_side.h"
#include "parallel/config.h"

namespace xdit::app::bench {

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

namespace {

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

// Random weights whose matrices of whole blocks are handed over as blocks:
// Q8_0 (ggml's quantizer of the values) or Q4_K / Q5_K (random blocks with finite
// scales: a speed row's values need not mean anything) — a GGUF
// checkpoint's layers.
class RandomBlockWeights : public io::WeightSource {
 public:
  RandomBlockWeights(uint64_t seed, io::GgmlType type) : base_(seed), type_(type) {}
  bool has(const std::string&) const override { return true; }
  size_t stored_bytes() const override { return loaded().total; }

 protected:
  Tensor read(const std::string& name, const Shape& expected) const override {
    return base_.get(name, expected);
  }
  std::optional<io::QuantizedRows> read_quantized(const std::string& name, const Shape& expected,
                                                  const Shape& /*share*/) const override {
    const int64_t values = io::ggml_block_values(type_), bytes_per = io::ggml_block_bytes(type_);
    if (expected.size() != 2 || expected[1] % values != 0) return std::nullopt;
    const int64_t blocks = expected[0] * expected[1] / values;
    auto bytes = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(blocks * bytes_per));
    if (type_ == io::GgmlType::kQ8_0) {
      const Tensor f = base_.get(name, expected).to(DType::kF32);
      io::quantize_q8_0(f.data<float>(), blocks, bytes->data());
    } else {
      std::mt19937_64 rng(std::hash<std::string>{}(name));
      for (auto& b : *bytes) b = static_cast<uint8_t>(rng());
      const uint16_t d = f32_to_f16(1e-3f);  // d and dmin of every block
      for (int64_t i = 0; i < blocks; ++i) {
        std::memcpy(bytes->data() + i * bytes_per, &d, 2);
        std::memcpy(bytes->data() + i * bytes_per + 2, &d, 2);
      }
    }
    return io::QuantizedRows{type_,
                             expected[0],
                             expected[1],
                             bytes->data(),
                             static_cast<size_t>(expected[1] / values * bytes_per),
                             bytes};
  }

 private:
  io::RandomWeights base_;
  io::GgmlType type_;
};

}  // namespace

// A FLUX.1 forward at full width (3072, 24 heads x 128, 512 T5 tokens,
// guidance embedding) at reduced depth: FLUX.1-dev's 19 + 38 blocks hold 11.9 B
// parameters (24 GB in bf16), so the row runs 2 double + 4 single blocks. A
// double and a single block have the same products (12·D² per token) and
// attention, so the time per block is the time over 6, and the full 19 + 38
// model is extrapolated by FLOPs (a second, smaller model timed alone to
// separate the two kinds was swamped by run-to-run noise on shared machines).
nlohmann::json run_flux_row(int64_t res, const std::string& dt_name, int warmup, int repeat,
                            bool tensor, const std::string& weights_kind) {
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
  Tensor lat = g.randn({1, cfg.latent_channels(), 1, h, h});
  Tensor text = g.randn({1, kFluxText, cfg.joint_attention_dim});
  Tensor pooled = g.randn({1, cfg.pooled_projection_dim});
  models::DiTInputs in;
  models::Conditioning cond;
  cond.set(models::kText, text);
  cond.set(models::kPooled, pooled);
  cond.set(models::kGuidance, Tensor::from_vector({3.5f}, {1}));
  in.latents = &lat;
  in.cond = &cond;
  in.timesteps = {0.5f};
  models::FluxConfig reduced = cfg;
  reduced.num_layers = 2;
  reduced.num_single_layers = 4;
  io::RandomWeights random(4);
  // q8_0, q4_k, q5_k: as a bf16 layer runs them (kernels/cpu/q8_0_gemm.h:
  // integers on AVX-512-VNNI without AMX); *_decoded: decoded into bf16.
  const bool decoded =
      weights_kind.size() > 8 && weights_kind.compare(weights_kind.size() - 8, 8, "_decoded") == 0;
  const std::string block_kind =
      decoded ? weights_kind.substr(0, weights_kind.size() - 8) : weights_kind;
  const bool blocks = block_kind == "q8_0" || block_kind == "q4_k" || block_kind == "q5_k";
  kernels::cpu::set_block_int8_dot(!decoded);
  RandomBlockWeights block_weights(4, block_kind == "q4_k"   ? io::GgmlType::kQ4_K
                                      : block_kind == "q5_k" ? io::GgmlType::kQ5_K
                                                             : io::GgmlType::kQ8_0);
  const io::WeightSource& weights =
      blocks ? static_cast<const io::WeightSource&>(block_weights) : random;
  XDIT_CHECK(!(tensor && g_device.cuda()), "bench flux: the tensor-parallel row runs on the CPU");
  XDIT_CHECK(weights_kind == "bf16" || !g_device.cuda(), "bench flux --weights ", weights_kind,
             ": the CPU only so far");
  // The weights go to the device as the layers are made.
  std::optional<DeviceScope> scope(std::in_place, g_device);
  std::optional<kernels::WeightFormatScope> format;
  if (!blocks) format.emplace(kernels::parse_weight_format(weights_kind));
  nn::LinearRegistry layers;
  std::optional<nn::LinearRegistry::Recording> recording(std::in_place, layers);
  models::FluxTransformer model(reduced, weights, dtype, stage);
  recording.reset();
  format.reset();
  scope.reset();
  kernels::cpu::set_block_int8_dot(true);
  size_t layer_bytes = 0;
  for (const nn::LinearOrigin& l : layers.layers()) layer_bytes += l.weight_bytes;
  const double flops = flux_flops(reduced, N, kFluxText), full = flux_flops(cfg, N, kFluxText);
  comm::CommStats step_comm;  // the last timed step's all-reduces
  nlohmann::json r =
      timed_row(weights_kind == "bf16" ? "flux_2+4_blocks" : "flux_2+4_blocks_" + weights_kind, res,
                dt_name, flops, dtype, peak, warmup, repeat, [&] {
                  if (mesh) mesh->tp_group().stats() = {};
                  model.forward(in);
                  if (mesh) step_comm = mesh->tp_group().stats();
                });
  const double t = r["seconds"].get<double>();
  // This rank's weights as bf16 (RandomWeights makes f32 values; the Q8_0
  // rows' whole model, a row-parallel weight read once per part).
  double elements = 0;
  for (const auto& [name, shape] : reduced.weight_specs())
    elements += static_cast<double>(shape_numel(shape));
  r["weight_bytes_bf16"] = blocks ? 2 * elements : static_cast<double>(random.loaded().total / 2);
  r["weights"] = weights_kind;
  r["linear_weight_bytes"] = layer_bytes;  // what the layers keep
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

namespace {

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

}  // namespace

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
  Tensor lat = g.randn({B, cfg.in_channels, 1, h, h});
  Tensor text = g.randn({B, kText, cfg.joint_attention_dim});
  Tensor pooled = g.randn({B, cfg.pooled_projection_dim});
  models::DiTInputs in;
  models::Conditioning cond;
  cond.set(models::kText, text);
  cond.set(models::kPooled, pooled);
  in.latents = &lat;
  in.cond = &cond;
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

}  // namespace xdit::app::bench
