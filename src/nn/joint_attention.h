// Joint attention as FLUX.1's and SD3's blocks run it (diffusers Attention
// with FluxAttnProcessor2_0 / JointAttnProcessor2_0): the text and the image
// stream each project their own q/k/v (add_q_proj | add_k_proj | add_v_proj,
// to_q | to_k | to_v), optionally norm q and k per head (norm_added_q/k,
// norm_q/k: RMSNorm, eps 1e-6) and rotate them (FLUX's rotary table), attend
// together over [text | image] through the AttentionBackend seam, and each
// projects its share of the output (to_add_out, to_out.0). The same module
// without the text's projections is a one-stream attention over every token
// (FLUX's single-stream blocks, SD3.5's image-only attn2).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "io/weights.h"
#include "kernels/linear.h"
#include "nn/attention.h"
#include "nn/layers.h"
#include "nn/tensor_parallel.h"

namespace xdit::nn {

// The module's shape, in diffusers Attention's terms.
struct JointAttentionConfig {
  int64_t dim = 0;  // the streams' width (query_dim)
  int64_t heads = 0;
  int64_t head_dim = 0;
  // The text stream has its own projections (added_kv_proj_dim); false: one
  // set of to_q | to_k | to_v over every token of the sequence.
  bool context = true;
  // No to_add_out: the text's output is not needed (SD3's last block).
  bool context_pre_only = false;
  // No to_out.0: the caller projects attend()'s output itself (FLUX's
  // single-stream proj_out over [attention | MLP]).
  bool pre_only = false;
  bool qk_norm = false;  // norm_q / norm_k (and norm_added_q / norm_added_k)
  float qk_eps = 1e-6f;  // their RMSNorm's eps (FLUX, SD3: 1e-6; Z-Image: 1e-5)
  bool bias = true;      // the projections' biases (Z-Image: none)
};

// One call's sequence: per batch item `text` text tokens, then `image`
// image tokens (the rows of x, text first; `text` is what the backend's
// AttentionSite::text_tokens says, 0 for image-only self-attention).
struct JointCall {
  int64_t batch = 0, text = 0, image = 0;
  int layer = 0;  // AttentionSite::layer
  // The rotary table [text + image, head_dim] on the current device (null:
  // no rotation; needs qk_norm, which the rotation is fused with); with
  // rope_per_item, one such table per batch item ([batch, seq, head_dim]:
  // Z-Image's image positions follow each item's caption length).
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
  bool rope_per_item = false;
  // The text tokens that are keys (AttentionSite::text_mask): [batch, text]
  // on the host; null: all.
  const uint8_t* text_mask = nullptr;
  int64_t seq() const { return text + image; }
};

class JointAttention {
 public:
  JointAttention() = default;
  // Under tensor parallelism this rank holds heads/T heads (q, k, v
  // column-split per stream) and its share of the output projections'
  // columns; forward all-reduces y over the group.
  JointAttention(const io::WeightSource& w, const std::string& prefix,
                 const JointAttentionConfig& cfg, ComputeType ct, const TensorParallel& tp = {});

  // y [batch, seq, dim] = the output projections of the attention over x
  // [batch, seq, dim] (both streams normed by the caller), the partial sums
  // all-reduced. A context_pre_only layer writes only the image rows of y.
  // y may be x. Not for pre_only layers.
  void forward(const float* x, const JointCall& call, float* y, AttentionBackend& backend,
               AttentionScratch& scratch) const;
  // The attention output before the output projections: [batch, seq,
  // width()] in scratch.out.
  const float* attend(const float* x, const JointCall& call, AttentionBackend& backend,
                      AttentionScratch& scratch) const;
  int64_t width() const { return heads_ * head_dim_; }  // this rank's heads × head_dim

 private:
  // Norms (and rotates) q and k of `rows` tokens from `row_begin` of each
  // batch item's sequence in the fused [q | k | v] buffer.
  void norm_rope(float* qkv, const JointCall& call, int64_t row_begin, int64_t rows,
                 const Tensor& wq, const Tensor& wk) const;

  int64_t dim_ = 0, heads_ = 0, head_dim_ = 0;  // heads_: this rank's
  bool context_ = false, context_out_ = false, pre_only_ = false, bf16_ = false;
  kernels::Linear qkv_, qkv_context_, to_out_, to_add_out_;
  Tensor nq_, nk_, nq_context_, nk_context_;  // undefined without qk_norm
  TensorParallel tp_;
  float qk_eps_ = 1e-6f;
};

// The rest of a single-stream block (FLUX's FluxSingleTransformerBlock),
// beside a pre_only JointAttention over the same normed input: y =
// proj_out([attention | GELU(tanh)(proj_mlp(x))]), run as two products over
// proj_out's column blocks, so the two never need concatenating and in bf16
// the MLP's hidden activations stay bf16. Under tensor parallelism proj_mlp
// is column-split and proj_out row-split over both halves (this rank's share
// of each), and forward all-reduces y once for both.
class SingleStreamMlp {
 public:
  SingleStreamMlp() = default;
  // "<prefix>.proj_mlp" [inner, dim], "<prefix>.proj_out" [dim, attention + inner].
  SingleStreamMlp(const io::WeightSource& w, const std::string& prefix, int64_t dim,
                  int64_t attention, int64_t inner, ComputeType ct, const TensorParallel& tp = {});
  // y[m, dim] from x[m, dim] and the attention output [m, this rank's
  // attention width]; `hidden` is scratch of m · this rank's inner floats.
  void forward(const float* x, const float* attention, int64_t m, float* y, float* hidden) const;

 private:
  kernels::Linear mlp_, out_attn_, out_mlp_;
  TensorParallel tp_;
};

}  // namespace xdit::nn
