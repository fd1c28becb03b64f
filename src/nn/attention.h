// diffusers' Attention module (to_q / to_k / to_v / to_out.0) and the single
// entry point every attention call goes through. The entry point is an
// AttentionBackend: serial by default; the parallel layer supplies Ulysses /
// Ring / PipeFusion strategies without the model files changing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/weights.h"
#include "kernels/kernels.h"
#include "nn/layers.h"

namespace xdit::nn {

// Where an attention call sits, for strategies that keep per-layer state.
struct AttentionSite {
  int layer = 0;
  bool cross = false;  // cross-attention to the text (keys not split)
  // Joint attention (FLUX, SD3): the first text_tokens of each batch item's
  // q/k/v are the text stream, the same on every rank; the rest are this
  // rank's image tokens. 0: self-attention over image tokens only.
  int64_t text_tokens = 0;
  // Which text tokens are keys, per batch item: [batch, text_tokens] bytes on
  // the host (0 = padding no query attends to; Z-Image's captions of
  // different lengths). Null: every text token. The call's AttentionArgs
  // then carry the same mask over the call's keys (key_mask [batch, kv_len]:
  // the text's, then every image key) for a backend that attends as called;
  // one that lays the keys out anew builds its own from this.
  const uint8_t* text_mask = nullptr;
};

// A key mask over keys laid out per batch item as the `text` text tokens,
// then `image` image tokens: the text's bytes from `text_mask` ([batch,
// text]), every image key 1. Empty when text_mask is null (no mask).
std::vector<uint8_t> text_key_mask(const uint8_t* text_mask, int64_t batch, int64_t text,
                                   int64_t image);

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual void attend(const kernels::AttentionArgs& args, const AttentionSite& site) = 0;
  // Sequence parallelism: the image tokens each rank of the SP group computes
  // in the next calls, in SP rank order (k = ring · ulysses_degree + ulysses);
  // empty (the default) when every rank computes the same number.
  virtual void set_sequence_split(std::vector<int64_t> /*tokens_per_rank*/) {}
  // The loop starts denoising step `step` of `steps`; `sync`: a warm-up (or
  // full-sync) step, where strategies with stale activations (DistriFusion)
  // exchange everything fresh.
  virtual void begin_step(int64_t /*step*/, int64_t /*steps*/, bool /*sync*/) {}
  // Frees the buffers kept between calls (the caller has no more calls for
  // a while, e.g. the VAE after its one attention).
  virtual void release_buffers() {}
  // Whether attend() takes AttentionArgs' bf16 operands (q_bf16, k_bf16,
  // v_bf16, out_bf16), so that bf16 layers around it hand over bf16 rows
  // with no f32 copies; else the caller passes f32 q/k/v and out.
  virtual bool takes_bf16() const { return false; }
};

// Attention arguments over a fused [q | k | v] buffer: `seq` tokens per batch
// item, each row 3·heads·head_dim wide; the output rows `out_stride` apart;
// scale 1/sqrt(head_dim).
kernels::AttentionArgs fused_qkv_args(const float* qkv, int64_t batch, int64_t seq, int64_t heads,
                                      int64_t head_dim, float* out, int64_t out_stride, bool bf16);

// Runs kernels::attention on the local tensors.
AttentionBackend& serial_attention();

// Scratch shared by every attention layer of a model: layers run one at a
// time, so one set of buffers (sized on the first step) serves them all.
struct AttentionScratch {
  Scratch proj, kv, out, sumsq;
  std::vector<uint8_t> mask_host;  // a call's key mask (text_key_mask)
  Tensor mask;                     // its copy on a CUDA device (on_current_device)
};

// Rotary tables for one call: cos/sin [seq, head_dim] (each angle repeated
// for its interleaved pair), row s for the call's s-th token of every batch
// item. Null: no rotation.
struct RopeTables {
  const float* cos = nullptr;
  const float* sin = nullptr;
};

class Attention {
 public:
  Attention() = default;
  // Self-attention when kv_dim == 0 (fused QKV), cross-attention otherwise
  // (fused KV over the context of width kv_dim). Under tensor parallelism
  // this rank holds heads/T heads (q, k, v column-split) and its share of
  // to_out's columns; forward all-reduces y over the group.
  Attention(const io::WeightSource& w, const std::string& prefix, int64_t dim, int64_t heads,
            int64_t head_dim, int64_t kv_dim, bool bias, ComputeType ct,
            const TensorParallel& tp = {});

  // Wan's q/k normalisation: RMSNorm across all heads ("<prefix>.norm_q" and
  // ".norm_k", weight [heads·head_dim]; under tensor parallelism the squares
  // of every rank's heads are summed over the group), applied to q and k
  // after the projections; self-attention then rotates them with the call's
  // RopeTables. q/k/v travel in f32 then.
  void set_qk_norm_across_heads(const io::WeightSource& w, const std::string& prefix, float eps);

  // x [B, S, dim] → y [B, S, dim]. Cross-attention reads context [B, L, kv_dim]
  // with an optional key mask [B, L] (0 = padding). `rope`: self-attention
  // with set_qk_norm_across_heads only.
  void forward(const float* x, int64_t batch, int64_t seq, const float* context, int64_t ctx_len,
               const uint8_t* ctx_mask, float* y, AttentionBackend& backend, AttentionSite site,
               AttentionScratch& scratch, const RopeTables& rope = {}) const;
  // The same with x already bf16 (bf16 layers only: see bf16_input()).
  void forward(const uint16_t* x, int64_t batch, int64_t seq, const float* context, int64_t ctx_len,
               const uint8_t* ctx_mask, float* y, AttentionBackend& backend, AttentionSite site,
               AttentionScratch& scratch, const RopeTables& rope = {}) const;
  // Whether the layers that read x compute in bf16, so that x may be bf16.
  bool bf16_input() const { return (cross_ ? q_ : qkv_).is_bf16(); }

 private:
  int64_t dim_ = 0, heads_ = 0, head_dim_ = 0;  // heads_: this rank's
  bool cross_ = false, bf16_ = false;
  kernels::Linear qkv_, q_, kv_, out_;
  TensorParallel tp_;
  Tensor norm_q_, norm_k_;  // this rank's heads' share; empty: no q/k norm
  float norm_eps_ = 1e-6f;

  void run(const void* x, bool x_bf16, int64_t batch, int64_t seq, const float* context,
           int64_t ctx_len, const uint8_t* ctx_mask, float* y, AttentionBackend& backend,
           AttentionSite site, AttentionScratch& scratch, const RopeTables& rope) const;
  // RMSNorm across heads (and rope) of `rows` rows of width heads_·head_dim,
  // `stride` apart.
  void norm_rows(float* x, int64_t rows, int64_t stride, int64_t seq, const Tensor& weight,
                 const RopeTables& rope, AttentionScratch& scratch) const;
};

}  // namespace xdit::nn
