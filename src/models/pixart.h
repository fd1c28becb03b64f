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
#include "models/dit.h"
#include "nn/attention.h"
#include "nn/layers.h"

namespace xdit::models {

// PixArt-α's micro-conditions in the conditioning (conditioning.h): the
// image size in pixels [B, 2] (height, width) and its aspect ratio [B, 1].
inline constexpr const char* kResolution = "resolution";
inline constexpr const char* kAspectRatio = "aspect_ratio";

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
  io::WeightSpecs weight_specs(const DiTStage& stage = {}) const;
  // Parameter count implied by the config.
  int64_t parameter_count() const;
  // What the loop and the parallel layer need to know (models/dit.h).
  DiTSpec spec() const;
};

class PixArtTransformer : public DiT {
 public:
  PixArtTransformer(const PixArtConfig& cfg, const io::WeightSource& weights, DType compute,
                    DiTStage stage = {});
  ~PixArtTransformer() override;

  const PixArtConfig& config() const { return cfg_; }
  DiTSpec spec() const override { return cfg_.spec(); }
  // The text is a condition here (cross-attention), not a stream: the streams
  // hold the image tokens [B, tokens, hidden] only.
  const char* name() const override { return "PixArt"; }

 protected:
  Streams embed(const DiTInputs& in) override;
  void run_blocks(Streams& s, int64_t b0, int64_t b1) override;
  // [B, out_channels, rows · patch, W].
  Tensor finalize(const Streams& s) override;
  Tensor block_modulated_input(int64_t b, const Streams& s) override;

 private:
  struct Block;
  // run_blocks with the layers' inputs in T: float, or uint16_t (bf16) for
  // bf16 layers.
  template <class T>
  void run_blocks_as(Streams& s, int64_t b0, int64_t b1);
  PixArtConfig cfg_;
  nn::ComputeType ct_;
  kernels::Linear patch_proj_;
  nn::MlpSilu t_embedder_, res_embedder_, ar_embedder_;
  kernels::Linear adaln_linear_;
  kernels::Linear caption_1_, caption_2_;
  std::vector<std::unique_ptr<Block>> blocks_;
  Tensor out_table_;  // scale_shift_table [2, hidden]
  kernels::Linear proj_out_;
  // The current call (set by embed): batch, text length, patch rows and grid
  // width, latent width, the embedded timestep [B, d], its 6 modulations
  // [B, 6d], the key mask and the projected caption (in text_).
  // Host-side key mask and its copy where the ops run (a CUDA device).
  std::vector<uint8_t> mask_;
  Tensor mask_device_;
  const uint8_t* mask_ptr_ = nullptr;
  // emb_ [B, d] and t6_ [B, 6d]: the embedded timestep and AdaLN's projection.
  nn::Scratch emb_, t6_, mod_, fin_, pos_, slab_, tproj_, act_;
  nn::Scratch cols_, norm_, tmp_, ffh_, text_, text_tmp_;
  nn::AttentionScratch attn_scratch_;
};

}  // namespace xdit::models
