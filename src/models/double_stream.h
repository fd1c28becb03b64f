// The double-stream block FLUX.1 and Qwen-Image share (diffusers
// FluxTransformerBlock, QwenImageTransformerBlock): per stream AdaLN-Zero —
// a linear of SiLU(temb) giving shift, scale and gate for the attention and
// for the MLP, over a LayerNorm without affine weights (eps 1e-6) —, the
// joint attention over [text | image] (qk RMSNorm, the rotation, the text's
// padding masked where the call says), gated residuals, and a GELU(tanh)
// MLP per stream. Only the weights' names differ between the models.
#pragma once

#include <functional>
#include <string>

#include "core/tensor.h"
#include "io/weights.h"
#include "kernels/linear.h"
#include "nn/joint_attention.h"
#include "nn/layers.h"

namespace xdit::models {

// Where a block's modules sit under its prefix ("<prefix>.<name>").
struct DoubleStreamNames {
  std::string mod;          // the image stream's AdaLN linear (FLUX: norm1.linear)
  std::string mod_context;  // the text stream's (FLUX: norm1_context.linear)
  std::string attn;         // the joint attention
  std::string ff;           // the image stream's MLP (net.0.proj, net.2)
  std::string ff_context;   // the text stream's
};

class DoubleStreamBlock {
 public:
  DoubleStreamBlock(const io::WeightSource& w, const std::string& prefix,
                    const DoubleStreamNames& names, const nn::JointAttentionConfig& joint,
                    nn::ComputeType ct, const nn::TensorParallel& tp);

  // The attention of the normed streams `x` into `out` (the model's call:
  // its backend, scratch and attention hook).
  using Attend = std::function<void(const float* x, float* out)>;
  // Streams X [B, L + N, D] (per batch item the text, then the image) through
  // the block, in place; `st` = SiLU(temb) [B, D]. Scratch: the model's.
  void forward(float* X, const float* st, int64_t B, int64_t L, int64_t N, const Attend& attend,
               nn::Scratch& mod, nn::Scratch& normed, nn::Scratch& tmp, nn::Scratch& hidden) const;
  // The image stream's modulated attention input, norm1(x)·(1 + scale) +
  // shift, into out [B, N, D] (BlockHook::modulated_input).
  void modulated_image(const float* X, const float* st, int64_t B, int64_t L, int64_t N, float* out,
                       nn::Scratch& mod) const;
  const nn::JointAttention& attention() const { return attn_; }

 private:
  int64_t dim_ = 0;
  kernels::Linear mod_, mod_context_;
  nn::JointAttention attn_;
  nn::FeedForwardGelu ff_, ff_context_;
};

// The output layer FLUX.1 and Qwen-Image share: norm_out (AdaLN-continuous
// on `st` = SiLU(temb) [B, D]) over the image rows of streams `x` [B, L + N,
// D], proj_out to the 2×2-packed channels, unpacked into [B, C, 2·rows, W]
// (`rows` patch rows, W latent columns). Scratch: the model's.
Tensor packed_output(const nn::AdaLayerNormContinuous& norm_out, const kernels::Linear& proj_out,
                     const float* st, const float* x, int64_t B, int64_t L, int64_t N, int64_t D,
                     int64_t C, int64_t rows, int64_t W, nn::Scratch& normed, nn::Scratch& mod,
                     nn::Scratch& packed);

}  // namespace xdit::models
