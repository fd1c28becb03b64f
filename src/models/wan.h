// WanTransformer3DModel (diffusers models/transformers/transformer_wan.py),
// the text-to-video transformer of Wan2.1 and Wan2.2: a (1, 2, 2) patch
// embedding of [B, 16, F, H, W] latents, 3-D rotary positions over frames ×
// rows × columns, sinusoidal timestep + MLP with a 6-way modulation table per
// block, blocks of modulated LayerNorm → self-attention (q/k RMSNorm across
// heads, RoPE) → gated residual, affine LayerNorm → cross-attention to the
// text (q/k RMSNorm, no mask) → residual, modulated LayerNorm → GELU(tanh)
// FFN → gated residual; then the 2-way output modulation, projection and
// unpatchify. The image-embedding path (I2V) is left out. Weight names are
// diffusers' state-dict keys.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/json.h"
#include "io/weights.h"
#include "models/dit.h"
#include "nn/attention.h"
#include "nn/layers.h"

namespace xdit::models {

struct WanConfig {
  int64_t patch_t = 1, patch_h = 2, patch_w = 2;
  int64_t num_attention_heads = 40;
  int64_t attention_head_dim = 128;
  int64_t in_channels = 16;
  int64_t out_channels = 16;
  int64_t text_dim = 4096;
  int64_t freq_dim = 256;
  int64_t ffn_dim = 13824;
  int64_t num_layers = 40;
  bool cross_attn_norm = true;
  double eps = 1e-6;
  int64_t rope_max_seq_len = 1024;

  int64_t hidden() const { return num_attention_heads * attention_head_dim; }
  // The head dimension's rotary split: frames get the rest of h = w = 2·⌊d/6⌋.
  std::vector<int64_t> rope_axes() const;
  // Reads diffusers' transformer/config.json (defaults as diffusers applies
  // them), bounds every size and refuses what this implementation does not
  // cover (image conditioning, a temporal patch, another qk_norm); throws one
  // line naming `where` and the key.
  static WanConfig from_json(const io::Json& j, const std::string& where);
  // Wan2.1-T2V-1.3B (the benchmark configuration).
  static WanConfig t2v_1_3b();
  io::WeightSpecs weight_specs(const DiTStage& stage = {}) const;
  int64_t parameter_count() const;
  DiTSpec spec() const;
};

class WanTransformer : public DiT {
 public:
  WanTransformer(const WanConfig& cfg, const io::WeightSource& weights, DType compute,
                 DiTStage stage = {});
  ~WanTransformer() override;

  const WanConfig& config() const { return cfg_; }
  DiTSpec spec() const override { return cfg_.spec(); }
  // The text is a condition (cross-attention); the streams hold the video's
  // tokens [B, tokens, hidden], frame-major.
  const char* name() const override { return "Wan"; }

 protected:
  Streams embed(const DiTInputs& in) override;
  void run_blocks(Streams& s, int64_t b0, int64_t b1) override;
  // [B, out_channels, rows · patch, W] over the frame-major latent rows F·H.
  Tensor finalize(const Streams& s) override;
  Tensor block_modulated_input(int64_t b, const Streams& s) override;

 private:
  struct Block;
  WanConfig cfg_;
  nn::ComputeType ct_;
  kernels::Linear patch_proj_;
  nn::MlpSilu time_embedder_;
  kernels::Linear time_proj_, text_1_, text_2_;
  std::vector<std::unique_ptr<Block>> blocks_;
  Tensor out_table_;  // scale_shift_table [2, hidden]
  kernels::Linear proj_out_;
  // The call's rotary tables [tokens, head_dim] on the host and where the ops run.
  std::vector<float> rope_cos_host_, rope_sin_host_;
  Tensor rope_cos_keep_, rope_sin_keep_;
  nn::RopeTables rope_;
  std::vector<int64_t> rope_key_;  // the grid and rows the tables are for
  // temb_ [B, d] and t6_ [B, 6d]: the embedded timestep and its 6-way projection.
  nn::Scratch temb_, t6_, mod_, fin_, tproj_, act_, slab_, cols_;
  nn::Scratch norm_, tmp_, ffh_, text_, text_tmp_;
  nn::AttentionScratch attn_scratch_;
};

}  // namespace xdit::models
