// SD3Transformer2DModel (diffusers models/transformers/transformer_sd3.py),
// Stable Diffusion 3 / 3.5: PatchEmbed with the stored sin-cos table
// centre-cropped to the latent grid (pos_embed_max_size); the timestep +
// pooled-text embedding; context_embedder; JointTransformerBlocks (AdaLN-Zero
// per stream, optional per-head RMSNorm on q and k, joint attention over
// image and text, gated residuals, a GELU-tanh MLP per stream; the last block
// context_pre_only: AdaLN-continuous on the text and no text output); SD3.5's
// dual-attention blocks (SD35AdaLayerNormZeroX and a second, image-only
// attention); norm_out (AdaLN-continuous, [scale, shift]), proj_out and
// unpatchify in SD3's (p, q, c) order. Weight names are diffusers' keys.
//
// diffusers orders the joint sequence image then text; attention does not
// depend on the order of its keys, so the streams here keep the text in front
// as every model's streams do (models/dit.h).
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

struct SD3Config {
  static constexpr int64_t kTimeProjDim = 256;
  int64_t sample_size = 128;
  int64_t patch_size = 2;
  int64_t in_channels = 16;
  int64_t out_channels = 16;
  int64_t num_layers = 18;
  int64_t attention_head_dim = 64;
  int64_t num_attention_heads = 18;
  int64_t joint_attention_dim = 4096;
  int64_t caption_projection_dim = 1152;
  int64_t pooled_projection_dim = 2048;
  int64_t pos_embed_max_size = 96;
  std::vector<int64_t> dual_attention_layers;  // SD3.5-medium: 0 … 12
  bool qk_norm = false;                        // "rms_norm" (SD3.5)

  int64_t hidden() const { return num_attention_heads * attention_head_dim; }
  bool dual(int64_t block) const;
  // Reads diffusers' transformer/config.json, bounding every size; throws one
  // line naming `where` and the key.
  static SD3Config from_json(const io::Json& j, const std::string& where);
  io::WeightSpecs weight_specs(const DiTStage& stage = {}) const;
  int64_t parameter_count() const;
  DiTSpec spec() const;
};

// Inputs (DiTInputs): latents [B, in_channels, H, W]; per batch item the
// timestep as StableDiffusion3Pipeline passes it (t, not t / 1000); text
// [B, L, joint_attention_dim] (CLIP-L ⊕ CLIP-G features zero-padded, then
// T5); pooled [B, pooled_projection_dim]; skip_blocks: blocks to skip
// (skip-layer guidance).
class SD3Transformer : public DiT {
 public:
  SD3Transformer(const SD3Config& cfg, const io::WeightSource& weights, DType compute,
                 DiTStage stage = {});
  ~SD3Transformer() override;
  const SD3Config& config() const { return cfg_; }
  DiTSpec spec() const override { return cfg_.spec(); }
  const char* name() const override { return "SD3"; }

 protected:
  Streams embed(const DiTInputs& in) override;
  void run_blocks(Streams& s, int64_t b0, int64_t b1) override;
  // [B, out_channels, rows · patch, W].
  Tensor finalize(const Streams& s) override;
  Tensor block_modulated_input(int64_t b, const Streams& s) override;

 private:
  struct Block;
  void block(Block& blk, float* x, int64_t index);

  SD3Config cfg_;
  nn::ComputeType ct_;
  kernels::Linear patch_proj_, context_embedder_;
  Tensor pos_table_;  // [max, max, D]
  nn::MlpSilu timestep_embedder_, text_embedder_;
  std::vector<std::unique_ptr<Block>> blocks_;  // this stage's, in order
  nn::AdaLayerNormContinuous norm_out_;
  kernels::Linear proj_out_;
  // The current call (set by embed).
  nn::Scratch st_, tproj_, temb_, part_, slab_;  // st_: SiLU(conditioning) [B, D]
  nn::Scratch n_, n2_, tmp_, ff_, mod_, cols_;
  nn::AttentionScratch attn_;  // every attention's q|k|v and output (then the image MLP's)
};

}  // namespace xdit::models
