// Reusable layers built on the kernels, loaded by diffusers state-dict prefix.
#pragma once

#include <string>
#include <vector>

#include "core/aligned.h"
#include "core/tensor.h"
#include "io/weights.h"
#include "kernels/linear.h"

namespace xdit::nn {

using kernels::ComputeType;

// A growable scratch buffer: reallocates only when asked for more than it has,
// so steady-state forwards allocate nothing.
class Scratch {
 public:
  float* get(size_t n) {
    if (buf_.size() < n) grow(n);
    return buf_.data();
  }

 private:
  void grow(size_t n);  // throws one line with the size when memory runs out
  AlignedVector<float> buf_;
};

// "<prefix>.weight" [out, in] and, when `bias`, "<prefix>.bias" [out].
kernels::Linear load_linear(const io::WeightSource& w, const std::string& prefix, int64_t in,
                            int64_t out, bool bias, ComputeType ct,
                            kernels::Activation act = kernels::Activation::kNone);

// Several linears over the same input fused into one (outputs concatenated in
// order), e.g. to_q/to_k/to_v → one [3·d, in] GEMM.
kernels::Linear load_fused_linear(const io::WeightSource& w,
                                  const std::vector<std::string>& prefixes, int64_t in,
                                  const std::vector<int64_t>& outs, bool bias, ComputeType ct);

// An f32 copy of a parameter tensor (tables, norms) with its shape checked.
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
class FeedForwardGelu {
 public:
  FeedForwardGelu() = default;
  FeedForwardGelu(const io::WeightSource& w, const std::string& prefix, int64_t dim, int64_t inner,
                  ComputeType ct);
  // y[m, dim] = ff(x[m, dim]); `hidden` is scratch of m·inner floats.
  void forward(const float* x, int64_t m, float* y, float* hidden) const;
  int64_t inner() const { return fc1_.out_features(); }

 private:
  kernels::Linear fc1_, fc2_;
};

}  // namespace xdit::nn
