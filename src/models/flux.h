// FluxTransformer2DModel (diffusers models/transformers/transformer_flux.py),
// FLUX.1 [schnell] and [dev]: x_embedder / context_embedder; the timestep
// (+ guidance for dev) + pooled-CLIP embedding; a 3-axis rotary embedding
// (text positions 0, image positions (0, row, col)); double-stream blocks
// (AdaLN-Zero per stream, per-head RMSNorm on q and k, joint attention over
// text then image, gated residuals, a GELU-tanh MLP per stream);
// single-stream blocks (AdaLN-Zero-single, attention and MLP from the same
// input, proj_out on their concatenation); norm_out (AdaLN-continuous,
// [scale, shift]) and proj_out. The 2×2 packing of the latents into
// 4·channels and back happens here, so callers keep [B, C, H, W] latents.
// Weight names are diffusers' state-dict keys.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/json.h"
#include "io/weights.h"
#include "models/dit.h"
#include "models/double_stream.h"
#include "nn/attention.h"
#include "nn/joint_attention.h"
#include "nn/layers.h"

namespace xdit::models {

// FLUX.1 [dev]'s embedded guidance scale in the conditioning
// (conditioning.h): [B], one per batch item.
inline constexpr const char* kGuidance = "guidance";

struct FluxConfig {
  static constexpr int64_t kTimeProjDim = 256;  // Timesteps(num_channels=256)
  int64_t in_channels = 64;                     // packed: 4 × the latent channels
  int64_t num_layers = 19;                      // double-stream blocks
  int64_t num_single_layers = 38;
  int64_t attention_head_dim = 128;
  int64_t num_attention_heads = 24;
  int64_t joint_attention_dim = 4096;   // T5's width
  int64_t pooled_projection_dim = 768;  // CLIP-L's
  bool guidance_embeds = false;         // dev: true
  std::vector<int64_t> axes_dims_rope{16, 56, 56};

  int64_t hidden() const { return num_attention_heads * attention_head_dim; }
  int64_t latent_channels() const { return in_channels / 4; }
  int64_t blocks() const { return num_layers + num_single_layers; }
  // Reads diffusers' transformer/config.json, bounding every size; throws one
  // line naming `where` and the key.
  static FluxConfig from_json(const io::Json& j, const std::string& where);
  // The weights the model, or a stage of it (blocks by flat index: double
  // then single), reads.
  io::WeightSpecs weight_specs(const DiTStage& stage = {}) const;
  int64_t parameter_count() const;
  // What the loop and the parallel layer need to know (models/dit.h).
  DiTSpec spec() const;
};

// Inputs (DiTInputs): latents [B, latent_channels, H, W] with H and W even;
// per batch item the timestep t / 1000 and (dev models) the guidance scale, as
// FluxPipeline passes them; text [B, L, joint_attention_dim] (T5, unmasked);
// pooled [B, pooled_projection_dim] (CLIP). The streams are [B, L + tokens, D]:
// the text stream, then the image tokens, per batch item; the double-stream
// blocks update both, the single-stream blocks run on their concatenation.
class FluxTransformer : public DiT {
 public:
  FluxTransformer(const FluxConfig& cfg, const io::WeightSource& weights, DType compute,
                  DiTStage stage = {});
  ~FluxTransformer() override;
  const FluxConfig& config() const { return cfg_; }
  DiTSpec spec() const override { return cfg_.spec(); }
  const char* name() const override { return "FLUX"; }

 protected:
  Streams embed(const DiTInputs& in) override;
  void run_blocks(Streams& s, int64_t b0, int64_t b1) override;
  // The velocity [B, latent_channels, rows · 2, W].
  Tensor finalize(const Streams& s) override;
  Tensor block_modulated_input(int64_t b, const Streams& s) override;

 private:
  struct SingleBlock;
  // The joint attention's call at flat block `layer`: this call's geometry
  // and rotary tables.
  nn::JointCall joint_call(int layer) const;
  void single_block(SingleBlock& blk, float* x, int layer);

  FluxConfig cfg_;
  nn::ComputeType ct_;
  kernels::Linear x_embedder_, context_embedder_;
  nn::MlpSilu timestep_embedder_, guidance_embedder_, text_embedder_;
  std::vector<std::unique_ptr<DoubleStreamBlock>> double_;  // this stage's, in order
  std::vector<std::unique_ptr<SingleBlock>> single_;
  nn::AdaLayerNormContinuous norm_out_;
  kernels::Linear proj_out_;
  // The current call (set by embed): batch, text tokens, patch rows, grid
  // width, latent width, SiLU(conditioning vector) [B, D], and the rotary
  // tables [L + tokens, head_dim] (text positions, then this call's rows').
  nn::Scratch st_;  // SiLU(conditioning) [B, D]
  // Rotary tables [S, head_dim] (made on the host, copied where the ops run).
  std::vector<float> rope_cos_host_, rope_sin_host_;
  Tensor rope_cos_keep_, rope_sin_keep_;                   // their copies on a CUDA device
  const float *rope_cos_ = nullptr, *rope_sin_ = nullptr;  // where the ops read them
  nn::Scratch tproj_, temb_, part_;
  nn::Scratch x_, n_, tmp_, ff_, mod_;
  nn::Scratch att_;  // a single block's attention output, where a hook keeps or supplies it
  nn::AttentionScratch attn_;  // every block's attention: q|k|v, output
};

}  // namespace xdit::models
