// ZImageTransformer2DModel's config (diffusers transformer_z_image.py), as
// Z-Image-Turbo's transformer/config.json holds it, bounded and checked, and
// the weights it implies. The model: an image-token embedder (2 × 2 patches),
// a caption embedder (RMSNorm → linear from the text encoder's width), a
// timestep MLP to an adaLN width of min(dim, 256), learned pad tokens for
// the image and the caption, n_refiner_layers modulated blocks over the image
// tokens (noise_refiner) and as many unmodulated ones over the caption
// (context_refiner), n_layers modulated blocks over both, the final layer.
// Blocks: RMSNorm'd attention (q/k RMSNorm per head, 3-axis RoPE of θ 256)
// and a SwiGLU of int(dim / 3 · 8) units, each output RMSNorm'd again.
#pragma once

#include <string>
#include <vector>

#include "io/json.h"
#include "io/weights.h"
#include "models/dit.h"

namespace xdit::models {

struct ZImageConfig {
  int64_t patch = 2, frame_patch = 1;  // all_patch_size[0], all_f_patch_size[0]
  int64_t in_channels = 16;
  int64_t dim = 3840;
  int64_t n_layers = 30;
  int64_t n_refiner_layers = 2;
  int64_t n_heads = 30;
  double norm_eps = 1e-5;
  bool qk_norm = true;
  int64_t cap_feat_dim = 2560;
  double rope_theta = 256.0;
  double t_scale = 1000.0;
  std::vector<int64_t> axes_dims{32, 48, 48};
  std::vector<int64_t> axes_lens{1024, 512, 512};

  static constexpr int64_t kAdaLnMax = 256;     // ADALN_EMBED_DIM
  static constexpr int64_t kTimeHidden = 1024;  // the timestep MLP's hidden width
  static constexpr int64_t kSeqMultiple = 32;   // SEQ_MULTI_OF: each part's padded length

  // Reads diffusers' transformer/config.json; refuses what this model does
  // not cover (several patch sizes, SigLIP's Omni variant) by name; throws
  // one line naming `where` and the key.
  static ZImageConfig from_json(const io::Json& j, const std::string& where);
  static ZImageConfig turbo();  // Z-Image-Turbo's (6B)
  int64_t head_dim() const { return dim / n_heads; }
  int64_t adaln_dim() const { return dim < kAdaLnMax ? dim : kAdaLnMax; }
  // int(dim / 3 * 8), in Python's float arithmetic.
  int64_t ffn_dim() const { return static_cast<int64_t>(static_cast<double>(dim) / 3.0 * 8.0); }
  // Tokens after padding n to the sequence multiple.
  static int64_t padded(int64_t n) { return n + (kSeqMultiple - n % kSeqMultiple) % kSeqMultiple; }
  // The flat blocks: the noise refiner's, then the main layers.
  int64_t blocks() const { return n_refiner_layers + n_layers; }
  // The weights the model, or a stage of it, reads (the context refiner and
  // the embedders with the first stage, the final layer with the last).
  io::WeightSpecs weight_specs(const DiTStage& stage = {}) const;
  int64_t parameter_count() const;
  // What the loop and the parallel layer need to know (models/dit.h).
  DiTSpec spec() const;
};

}  // namespace xdit::models
