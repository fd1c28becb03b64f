// PixArtTransformer2DModel (diffusers models/transformers/pixart_transformer_2d.py):
// PatchEmbed + 2-D sin-cos positions, AdaLayerNormSingle on the timestep (with
// PixArt-α's resolution / aspect-ratio micro-conditions), caption projection,
// BasicTransformerBlocks (ada_norm_single), final modulation, unpatchify.
// Weight names are diffusers' state-dict keys.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/json.h"
#include "io/weights.h"
#include "nn/attention.h"
#include "nn/layers.h"

namespace xdit::models {

// A pipeline stage: blocks [block_begin, block_end) of the model; the first
// stage also embeds the patches, the last also has the output layer. Every
// stage keeps the small timestep and caption embedders (each needs them).
struct PixArtStage {
  int64_t block_begin = 0;
  int64_t block_end = -1;  // -1: to the last block
  bool first = true, last = true;
};

struct PixArtConfig {
  // Timesteps(num_channels=256) in AdaLayerNormSingle.
  static constexpr int64_t kTimeProjDim = 256;
  int64_t sample_size = 128;
  int64_t in_channels = 4;
  int64_t out_channels = 8;
  int64_t num_layers = 28;
  int64_t num_attention_heads = 16;
  int64_t attention_head_dim = 72;
  int64_t cross_attention_dim = 1152;
  int64_t caption_channels = 4096;
  int64_t patch_size = 2;
  double norm_eps = 1e-6;
  bool norm_elementwise_affine = false;
  bool attention_bias = true;
  bool use_additional_conditions = true;
  double interpolation_scale = 2.0;

  int64_t hidden() const { return num_attention_heads * attention_head_dim; }
  // Reads diffusers' transformer/config.json (defaults as diffusers applies
  // them), bounds every size and rejects configurations this implementation
  // does not cover; throws one line naming `where` and the key.
  static PixArtConfig from_json(const io::Json& j, const std::string& where);
  // PixArt-α XL/2 at 1024 px (the benchmark configuration).
  static PixArtConfig alpha_xl_1024();
  // The weights (state-dict keys and shapes) the model, or a stage of it, reads.
  io::WeightSpecs weight_specs(const PixArtStage& stage = {}) const;
  // Parameter count implied by the config.
  int64_t parameter_count() const;
};

struct PixArtInputs {
  const Tensor* latents = nullptr;       // [B, in_channels, H, W]
  std::vector<float> timesteps;          // B values
  const Tensor* text = nullptr;          // [B, L, caption_channels]
  const Tensor* text_mask = nullptr;     // [B, L] (1 = token, 0 = padding) or null
  const Tensor* resolution = nullptr;    // [B, 2] (height, width in pixels) when micro-conditioned
  const Tensor* aspect_ratio = nullptr;  // [B, 1]
  // Sequence parallelism: compute only the patch rows [begin, end) of the
  // image (end 0 = all). Positions stay global; attention over the other rows
  // is the attention backend's job. The output then holds those rows only.
  int64_t patch_row_begin = 0, patch_row_end = 0;
};

class PixArtTransformer {
 public:
  PixArtTransformer(const PixArtConfig& cfg, const io::WeightSource& weights, DType compute,
                    PixArtStage stage = {});
  ~PixArtTransformer();

  const PixArtConfig& config() const { return cfg_; }
  const PixArtStage& stage() const { return stage_; }
  // The whole model (or a stage of it): returns [B, out_channels, H, W] (or
  // the computed rows' part) from the last stage, and the hidden states
  // [B, tokens, hidden] from other stages. A stage that is not the first takes
  // the previous stage's hidden states in `hidden`.
  Tensor forward(const PixArtInputs& in, const Tensor* hidden = nullptr);
  void set_attention_backend(nn::AttentionBackend* b) { backend_ = b; }

 private:
  struct Block;
  PixArtConfig cfg_;
  PixArtStage stage_;
  nn::ComputeType ct_;
  kernels::Linear patch_proj_;
  nn::MlpSilu t_embedder_, res_embedder_, ar_embedder_;
  kernels::Linear adaln_linear_;
  kernels::Linear caption_1_, caption_2_;
  std::vector<std::unique_ptr<Block>> blocks_;
  Tensor out_table_;  // scale_shift_table [2, hidden]
  kernels::Linear proj_out_;
  nn::AttentionBackend* backend_;
  nn::Scratch cols_, h_, norm_, tmp_, ffh_, text_, text_tmp_;
  nn::AttentionScratch attn_scratch_;
};

}  // namespace xdit::models
