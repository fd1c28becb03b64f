// QwenImageTransformer2DModel (diffusers transformers/transformer_qwenimage.py),
// Qwen-Image's dual-stream MMDiT: img_in over the 2×2-packed latents, the
// text RMSNorm'd (txt_norm) and projected (txt_in) from Qwen2.5-VL's width,
// the timestep's sinusoid (×1000 on the pipeline's t / 1000) through a
// TimestepEmbedding, num_layers double-stream blocks (models/double_stream.h,
// FLUX.1's block with Qwen-Image's names), norm_out (AdaLN-continuous) and
// proj_out. Its "MSRoPE": 3 axes (frame, row, column); image positions
// centred (rows −⌈h/2⌉ … ⌊h/2⌋ − 1, columns alike, frame 0), text token i at
// max(h/2, w/2) + i on every axis, in f32 as QwenEmbedRope makes them. The
// text's padding is masked as keys (encoder_hidden_states_mask).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/json.h"
#include "io/weights.h"
#include "models/dit.h"
#include "models/double_stream.h"
#include "nn/layers.h"

namespace xdit::models {

struct QwenImageConfig {
  static constexpr int64_t kTimeProjDim = 256;  // Timesteps(num_channels=256, scale=1000)
  int64_t in_channels = 64;                     // packed: 4 × the latent channels
  int64_t out_channels = 16;
  int64_t num_layers = 60;
  int64_t attention_head_dim = 128;
  int64_t num_attention_heads = 24;
  int64_t joint_attention_dim = 3584;  // Qwen2.5-VL-7B's width
  std::vector<int64_t> axes_dims_rope{16, 56, 56};

  int64_t hidden() const { return num_attention_heads * attention_head_dim; }
  int64_t latent_channels() const { return out_channels; }
  // Reads diffusers' transformer/config.json, bounding every size; refuses
  // the variants xdit does not run (guidance embedding, zero_cond_t, the
  // additional t condition, the layered 3-D RoPE) by name.
  static QwenImageConfig from_json(const io::Json& j, const std::string& where);
  io::WeightSpecs weight_specs(const DiTStage& stage = {}) const;
  int64_t parameter_count() const;
  DiTSpec spec() const;
};

// Inputs (DiTInputs): latents [B, out_channels, H, W] with H and W even; per
// batch item the pipeline's t / 1000; text [B, L, joint_attention_dim]
// (Qwen2.5-VL's last states) with text_mask [B, L] (1: a token; none: all).
// Streams [B, L + tokens, D]: the text stream, then the image tokens.
class QwenImageTransformer : public DiT {
 public:
  QwenImageTransformer(const QwenImageConfig& cfg, const io::WeightSource& weights, DType compute,
                       DiTStage stage = {});
  ~QwenImageTransformer() override;
  const QwenImageConfig& config() const { return cfg_; }
  DiTSpec spec() const override { return cfg_.spec(); }
  const char* name() const override { return "Qwen-Image"; }

 protected:
  Streams embed(const DiTInputs& in) override;
  void run_blocks(Streams& s, int64_t b0, int64_t b1) override;
  Tensor finalize(const Streams& s) override;  // [B, out_channels, rows · 2, W]
  Tensor block_modulated_input(int64_t b, const Streams& s) override;

 private:
  QwenImageConfig cfg_;
  nn::ComputeType ct_;
  kernels::Linear img_in_, txt_in_, proj_out_;
  Tensor txt_norm_;
  nn::MlpSilu timestep_embedder_;
  std::vector<std::unique_ptr<DoubleStreamBlock>> blocks_;  // this stage's
  nn::AdaLayerNormContinuous norm_out_;
  // The current call: SiLU(temb) [B, D], the rotary tables [L + N, head_dim]
  // (host, and where the ops read them), the text key mask [B, L] (empty:
  // every token a key).
  nn::Scratch st_, tproj_, temb_;
  std::vector<float> cos_host_, sin_host_;
  Tensor cos_keep_, sin_keep_;
  const float *cos_ = nullptr, *sin_ = nullptr;
  std::vector<uint8_t> text_mask_;
  nn::Scratch x_, n_, tmp_, ff_, mod_;
  nn::AttentionScratch attn_;
};

}  // namespace xdit::models
