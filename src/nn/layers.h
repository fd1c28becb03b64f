// Reusable layers built on the kernels, loaded by diffusers state-dict prefix.
#pragma once

#include <string>
#include <vector>

#include "core/aligned.h"
#include "core/tensor.h"
#include "io/weights.h"
#include "kernels/linear.h"
#include "nn/tensor_parallel.h"

namespace xdit::nn {

using kernels::ComputeType;

// A growable scratch buffer on this thread's current device: reallocates
// only when asked for more than it has (or on another device), so after the
// first step at a resolution forwards allocate nothing — the activation
// arena of each layer, sized once per resolution.
class Scratch {
 public:
  float* get(size_t n) {
    if (current_device().cuda()) return get_device(n);
    if (buf_.size() < n) grow(n);
    return buf_.data();
  }
  // `bytes` bytes (the buffer in any element type).
  void* bytes(size_t bytes) { return get((bytes + 3) / 4); }
  // Frees the buffer (the next get allocates again).
  void release() {
    AlignedVector<float>().swap(buf_);
    device_buf_ = Tensor();
  }

 private:
  void grow(size_t n);  // throws one line with the size when memory runs out
  float* get_device(size_t n);
  AlignedVector<float> buf_;
  Tensor device_buf_;  // under a CUDA DeviceScope
};

// While one is alive on this thread, load_row_linear (a share of columns
// of several input parts), and load_fused_linear
// where its layer cannot pack each part from the file (kernels::Linear from
// parts: f32 layers, layouts not blocked by outputs), assemble their weight
// matrix in one buffer reused from layer to layer instead of a fresh
// allocation per layer, whose pages the kernel would fault in and zero each
// time (13 GB of them for T5-XXL's 24 blocks before this buffer).
// A model's constructor holds one; an inner one shares the outer one's
// buffer, which is freed when the outermost ends, so no memory outlives the
// load. The layers never keep the matrix: they pack it into their own layout.
class LoadStaging {
 public:
  LoadStaging();
  ~LoadStaging();
  LoadStaging(const LoadStaging&) = delete;
  LoadStaging& operator=(const LoadStaging&) = delete;

 private:
  bool outermost_;
};

// "<prefix>.weight" [out, in] and, when `bias`, "<prefix>.bias" [out].
kernels::Linear load_linear(const io::WeightSource& w, const std::string& prefix, int64_t in,
                            int64_t out, bool bias, ComputeType ct,
                            kernels::Activation act = kernels::Activation::kNone);

// Several linears over the same input fused into one (outputs concatenated in
// order), e.g. to_q/to_k/to_v → one [3·d, in] GEMM. Column-parallel under
// `tp`: this rank's share of each part's outputs (its heads of q, k and v),
// read as slices of the file.
kernels::Linear load_fused_linear(const io::WeightSource& w,
                                  const std::vector<std::string>& prefixes, int64_t in,
                                  const std::vector<int64_t>& outs, bool bias, ComputeType ct,
                                  const TensorParallel& tp = {},
                                  kernels::Activation act = kernels::Activation::kNone);

// A row-parallel linear: "<prefix>.weight" [out, Σ ins] over an input that
// is the concatenation of parts of widths `ins` (one part for a plain
// linear; FLUX's proj_out: attention | MLP), each column-split by the layer
// before it. This rank keeps its share of every part's columns, so its
// output is a partial sum for TensorParallel::all_reduce; the bias is on
// rank 0 only (added once). Under T = 1 the whole layer. `only` ≥ 0: the
// columns of that part alone (a product over one column block, e.g. FLUX's
// proj_out on the MLP half, kept in bf16, without concatenating the input).
kernels::Linear load_row_linear(const io::WeightSource& w, const std::string& prefix,
                                const std::vector<int64_t>& ins, int64_t out, bool bias,
                                ComputeType ct, const TensorParallel& tp, int only = -1);

// A row-parallel linear (load_row_linear over one input part) whose product
// joins a residual stream: it completes its own partial sums. T5's o and wo.
class RowParallelLinear {
 public:
  RowParallelLinear() = default;
  RowParallelLinear(const io::WeightSource& w, const std::string& prefix, int64_t in, int64_t out,
                    bool bias, ComputeType ct, const TensorParallel& tp = {});
  // y[m, out] += W·x[m, in] summed over the group: one accumulating product
  // under T = 1; else this rank's product in `part` (m · out floats), the
  // all-reduce, then the add.
  void forward_add(const float* x, int64_t m, float* y, Scratch& part) const;

 private:
  kernels::Linear linear_;
  TensorParallel tp_;
};

// Rows a model fills on the host (embedding lookups) for `dst`, n floats on
// the current device: data() is dst itself on the CPU, a host buffer on a
// CUDA device that upload() copies to dst.
class HostRows {
 public:
  HostRows(float* dst, size_t n) : dst_(dst), n_(n) {
    if (current_device().cuda()) host_.resize(n);
  }
  float* data() { return host_.empty() ? dst_ : host_.data(); }
  void upload();

 private:
  float* dst_;
  size_t n_;
  std::vector<float> host_;
};

// Values a model made on the host (key masks, bias and rotary tables) where
// this thread's ops read them: `host` itself on the CPU, a copy in `keep`
// on a CUDA device (`keep` reused while it is large enough); null when
// `host` is empty.
const void* on_current_device(const void* host, size_t bytes, Tensor& keep);
template <class T>
const T* on_current_device(const std::vector<T>& host, Tensor& keep) {
  return static_cast<const T*>(on_current_device(host.data(), host.size() * sizeof(T), keep));
}

// An f32 copy of a parameter tensor (tables, norms) with its shape checked,
// on this thread's current device.
Tensor load_param(const io::WeightSource& w, const std::string& name, const Shape& shape);

// linear_1 → SiLU → linear_2 (diffusers TimestepEmbedding, and the like).
class MlpSilu {
 public:
  MlpSilu() = default;
  MlpSilu(const io::WeightSource& w, const std::string& prefix, int64_t in, int64_t hidden,
          int64_t out, ComputeType ct);
  // x [m, in] → y [m, out]
  void forward(const float* x, int64_t m, float* y) const;
  int64_t out_features() const { return l2_.out_features(); }

 private:
  kernels::Linear l1_, l2_;
};

// diffusers FeedForward with GELU(tanh): net.0.proj → gelu → net.2.
// Under tensor parallelism net.0.proj is column-split, net.2 row-split, and
// forward all-reduces y over the group.
class FeedForwardGelu {
 public:
  FeedForwardGelu() = default;
  FeedForwardGelu(const io::WeightSource& w, const std::string& prefix, int64_t dim, int64_t inner,
                  ComputeType ct, const TensorParallel& tp = {});
  // y[m, dim] = ff(x[m, dim]); `hidden` is scratch of m·inner floats.
  void forward(const float* x, int64_t m, float* y, float* hidden) const;
  // The same with x already bf16 (bf16 layers only: see bf16_input()).
  void forward(const uint16_t* x, int64_t m, float* y, float* hidden) const;
  bool bf16_input() const { return fc1_.is_bf16() && fc2_.is_bf16(); }
  int64_t inner() const { return fc1_.out_features(); }  // this rank's share

 private:
  kernels::Linear fc1_, fc2_;
  TensorParallel tp_;
};

// A SwiGLU feed-forward without biases: down(silu(gate(x)) · up(x)) —
// Z-Image's FeedForward (w1, w3, w2), Qwen's MLP (gate_proj, up_proj,
// down_proj). gate and up run as one fused product; under tensor parallelism
// both are column-split, down row-split, and forward all-reduces y.
class FeedForwardSwiGlu {
 public:
  FeedForwardSwiGlu() = default;
  FeedForwardSwiGlu(const io::WeightSource& w, const std::string& gate, const std::string& up,
                    const std::string& down, int64_t dim, int64_t inner, ComputeType ct,
                    const TensorParallel& tp = {});
  // y[m, dim] = ff(x[m, dim]); `hidden` is scratch of m · 3 · inner() floats.
  void forward(const float* x, int64_t m, float* y, float* hidden) const;
  int64_t inner() const { return gate_up_.out_features() / 2; }  // this rank's share

 private:
  kernels::Linear gate_up_, down_;
  TensorParallel tp_;
};

// diffusers AdaLayerNormContinuous as FLUX.1 and SD3 end with it (norm_out):
// linear(SiLU(conditioning)) → [scale | shift] per batch item, then
// LayerNorm(x) · (1 + scale) + shift, without affine weights, eps 1e-6.
class AdaLayerNormContinuous {
 public:
  AdaLayerNormContinuous() = default;
  AdaLayerNormContinuous(const io::WeightSource& w, const std::string& prefix, int64_t dim,
                         ComputeType ct);
  // `cond` [B, dim] (already through SiLU); x holds per batch item `stride`
  // tokens of which `tokens` from `offset` are normed into y [B, tokens,
  // dim]; `mod` is scratch of B · 2 · dim floats.
  void forward(const float* cond, int64_t batch, const float* x, int64_t stride, int64_t offset,
               int64_t tokens, float* y, float* mod) const;

 private:
  kernels::Linear linear_;
  int64_t dim_ = 0;
};

}  // namespace xdit::nn
