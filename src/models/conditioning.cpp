#include "models/conditioning.h"

#include <cstring>

#include "core/error.h"

namespace xdit::models {

void Conditioning::set(const std::string& name, Tensor t) {
  if (!t.defined()) {
    tensors_.erase(name);
    return;
  }
  XDIT_CHECK(t.ndim() >= 1, "conditioning '", name, "' needs a batch dimension");
  tensors_[name] = std::move(t);
}

const Tensor* Conditioning::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const Tensor& Conditioning::at(const std::string& name) const {
  const Tensor* t = find(name);
  XDIT_CHECK(t != nullptr, "the conditioning has no '", name, "'");
  return *t;
}

int64_t Conditioning::batch() const {
  int64_t b = -1;
  for (const auto& [name, t] : tensors_) {
    XDIT_CHECK(b < 0 || t.dim(0) == b, "conditioning '", name, "' has ", t.dim(0),
               " batch items where the others have ", b);
    b = t.dim(0);
  }
  return b < 0 ? 0 : b;
}

Conditioning Conditioning::slice(int64_t b, int64_t e) const {
  Conditioning out;
  for (const auto& [name, t] : tensors_) {
    XDIT_CHECK(0 <= b && b <= e && e <= t.dim(0), "conditioning '", name, "': items [", b, ", ", e,
               ") of ", t.dim(0));
    const Tensor f = t.as(DType::kF32, Device{});
    Shape s = f.shape();
    const int64_t per = f.numel() / s[0];
    s[0] = e - b;
    Tensor part = Tensor::empty(s);
    std::memcpy(part.data<float>(), f.data<float>() + b * per,
                static_cast<size_t>((e - b) * per) * sizeof(float));
    out.tensors_[name] = std::move(part);
  }
  return out;
}

Conditioning Conditioning::concat(const Conditioning& a, const Conditioning& b) {
  XDIT_CHECK(a.tensors_.size() == b.tensors_.size(),
             "the two halves of a conditioning batch hold different names");
  Conditioning out;
  for (const auto& [name, ta] : a.tensors_) {
    const Tensor& tb = b.at(name);
    Shape s = ta.shape();
    Shape rest_a(s.begin() + 1, s.end()), rest_b(tb.shape().begin() + 1, tb.shape().end());
    XDIT_CHECK(rest_a == rest_b, "conditioning '", name, "': halves ", shape_str(ta.shape()),
               " and ", shape_str(tb.shape()), " do not stack");
    s[0] += tb.dim(0);
    Tensor both = Tensor::empty(s);
    const Tensor fa = ta.as(DType::kF32, Device{}), fb = tb.as(DType::kF32, Device{});
    std::memcpy(both.data<float>(), fa.data<float>(), fa.nbytes());
    std::memcpy(both.data<float>() + fa.numel(), fb.data<float>(), fb.nbytes());
    out.tensors_[name] = std::move(both);
  }
  return out;
}

Conditioning Conditioning::as(DType dtype, Device device) const {
  Conditioning out;
  for (const auto& [name, t] : tensors_) out.tensors_[name] = t.as(dtype, device);
  return out;
}

}  // namespace xdit::models
