#include "nn/layers.h"

#include <cstring>
#include <new>
#include <stdexcept>

#include "core/aligned.h"
#include "core/error.h"
#include "kernels/kernels.h"

namespace xdit::nn {

void Scratch::grow(size_t n) {
  try {
    grow_discarding(buf_, n);
  } catch (const std::bad_alloc&) {
    XDIT_FAIL("out of memory: cannot allocate ", human_size(static_cast<double>(n) * 4),
              " of activations (use a smaller size or fewer prompts)");
  } catch (const std::length_error&) {
    XDIT_FAIL("cannot allocate ", n, " floats of activations: too large");
  }
}

kernels::Linear load_linear(const io::WeightSource& w, const std::string& prefix, int64_t in,
                            int64_t out, bool bias, ComputeType ct, kernels::Activation act) {
  Tensor weight = w.get(prefix + ".weight", {out, in});
  Tensor b = bias ? w.get(prefix + ".bias", {out}) : Tensor();
  return kernels::Linear(weight, b, ct, act);
}

kernels::Linear load_fused_linear(const io::WeightSource& w,
                                  const std::vector<std::string>& prefixes, int64_t in,
                                  const std::vector<int64_t>& outs, bool bias, ComputeType ct) {
  int64_t total = 0;
  for (int64_t o : outs) total += o;
  Tensor weight = Tensor::empty({total, in});
  Tensor b = bias ? Tensor::empty({total}) : Tensor();
  int64_t row = 0;
  for (size_t i = 0; i < prefixes.size(); ++i) {
    Tensor part = w.get(prefixes[i] + ".weight", {outs[i], in}).to(DType::kF32);
    std::memcpy(weight.data<float>() + row * in, part.data<float>(), part.nbytes());
    if (bias) {
      Tensor pb = w.get(prefixes[i] + ".bias", {outs[i]}).to(DType::kF32);
      std::memcpy(b.data<float>() + row, pb.data<float>(), pb.nbytes());
    }
    row += outs[i];
  }
  return kernels::Linear(weight, b, ct);
}

Tensor load_param(const io::WeightSource& w, const std::string& name, const Shape& shape) {
  return w.get(name, shape).to(DType::kF32);
}

MlpSilu::MlpSilu(const io::WeightSource& w, const std::string& prefix, int64_t in, int64_t hidden,
                 int64_t out, ComputeType ct)
    : l1_(load_linear(w, prefix + ".linear_1", in, hidden, true, ct)),
      l2_(load_linear(w, prefix + ".linear_2", hidden, out, true, ct)) {}

void MlpSilu::forward(const float* x, int64_t m, float* y) const {
  AlignedVector<float> h(static_cast<size_t>(m * l1_.out_features()));
  l1_.forward(x, m, h.data());
  kernels::silu(h.data(), h.data(), static_cast<int64_t>(h.size()));
  l2_.forward(h.data(), m, y);
}

FeedForwardGelu::FeedForwardGelu(const io::WeightSource& w, const std::string& prefix, int64_t dim,
                                 int64_t inner, ComputeType ct)
    : fc1_(load_linear(w, prefix + ".net.0.proj", dim, inner, true, ct,
                       kernels::Activation::kGeluTanh)),
      fc2_(load_linear(w, prefix + ".net.2", inner, dim, true, ct)) {}

void FeedForwardGelu::forward(const float* x, int64_t m, float* y, float* hidden) const {
  // GELU(tanh) is fused into fc1. In bf16 the hidden activations stay bf16
  // (the largest activation of a block: no f32 copy written, reread and
  // converted for fc2); `hidden` has room for either.
  if (fc1_.is_bf16() && fc2_.is_bf16()) {
    uint16_t* hb = reinterpret_cast<uint16_t*>(hidden);
    fc1_.forward_to_bf16(x, m, hb);
    fc2_.forward_bf16(hb, m, y);
    return;
  }
  fc1_.forward(x, m, hidden);
  fc2_.forward(hidden, m, y);
}

}  // namespace xdit::nn
