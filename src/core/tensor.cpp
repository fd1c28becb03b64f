#include "core/tensor.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/buffer_pool.h"
#include "core/error.h"

namespace xdit {

std::string shape_str(const Shape& s) {
  std::ostringstream o;
  o << '[';
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << ']';
  return o.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string human_size(double b) {
  char buf[32];
  if (b >= 1e12)
    std::snprintf(buf, sizeof buf, "%.2f TB", b / 1e12);
  else if (b >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6)
    std::snprintf(buf, sizeof buf, "%.0f MB", b / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.0f KB", b / 1e3);
  return buf;
}

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  size_t count = 1;
  for (int64_t d : shape) {
    XDIT_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
    XDIT_CHECK(!__builtin_mul_overflow(count, static_cast<size_t>(d), &count),
               "cannot allocate a tensor of shape ", shape_str(shape),
               ": its size overflows 64 bits");
  }
  size_t bytes = 0;
  XDIT_CHECK(!__builtin_mul_overflow(count, dtype_size(dtype), &bytes) && bytes < (size_t{1} << 62),
             "cannot allocate a tensor of shape ", shape_str(shape), ": it is too large");
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  bytes = (bytes + 63) / 64 * 64;
  t.device_ = device;
  if (device.cuda()) {
    const DeviceRuntime* runtime = device_runtime();
    if (runtime == nullptr)
      XDIT_FAIL("cannot allocate a tensor on ", device.str(), ": built without the CUDA backend");
    DeviceAllocation a = runtime->allocate(bytes);  // throws one line when it cannot
    t.data_ = a.data;
    t.storage_ = std::move(a.owner);
    return t;
  }
  void* p = pool_alloc(bytes);
  XDIT_CHECK(p != nullptr, "out of memory: cannot allocate ",
             human_size(static_cast<double>(bytes)), " for a tensor of shape ",
             shape_str(t.shape_));
  t.storage_ = std::shared_ptr<void>(p, [bytes](void* q) { pool_free(q, bytes); });
  t.data_ = p;
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  if (device.cuda()) {
    device_runtime()->zero(t.data_, t.nbytes());  // empty() threw if there is none
  } else {
    std::memset(t.data_, 0, t.nbytes());
  }
  return t;
}

Tensor Tensor::view(std::shared_ptr<const void> keeper, const void* data, Shape shape,
                    DType dtype) {
  Tensor t;
  t.storage_ = std::move(keeper);
  t.data_ = const_cast<void*>(data);  // views of read-only maps are never written
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, Shape shape) {
  XDIT_CHECK(shape_numel(shape) == static_cast<int64_t>(values.size()),
             "from_vector: ", values.size(), " values do not fill shape ", shape_str(shape));
  Tensor t = empty(std::move(shape));
  std::memcpy(t.data_, values.data(), values.size() * 4);
  return t;
}

int64_t Tensor::dim(int i) const {
  const int n = ndim();
  if (i < 0) i += n;
  XDIT_CHECK(i >= 0 && i < n, "dimension index ", i, " out of range for shape ", shape_str(shape_));
  return shape_[i];
}

Tensor Tensor::reshape(Shape shape) const {
  XDIT_CHECK(shape_numel(shape) == numel(), "cannot reshape ", shape_str(shape_), " to ",
             shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::leading(Shape shape) const {
  XDIT_CHECK(shape_numel(shape) <= numel(), "cannot view ", shape_str(shape_), " as the larger ",
             shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t count) const {
  XDIT_CHECK(ndim() >= 1 && begin >= 0 && count >= 0 && begin + count <= dim(0), "rows [", begin,
             ", ", begin + count, ") lie outside ", shape_str(shape_));
  const size_t row_bytes = dim(0) == 0 ? 0 : nbytes() / static_cast<size_t>(dim(0));
  Tensor t = *this;
  t.shape_[0] = count;
  t.data_ = static_cast<char*>(data_) + static_cast<size_t>(begin) * row_bytes;
  return t;
}

Tensor Tensor::to_device(Device device) const {
  if (device == device_ || !defined()) return *this;
  Tensor out = empty(shape_, dtype_, device);
  // One side is a CUDA device, so there is a runtime (empty() or this
  // tensor's own allocation would have thrown otherwise).
  device_runtime()->copy(out.data_, data_, nbytes());
  return out;
}

Tensor Tensor::as(DType dtype, Device device) const {
  return (dtype_ == dtype ? *this : to(dtype)).to_device(device);
}

Tensor Tensor::to(DType dtype) const {
  if (!on_host()) return to_device({}).to(dtype).to_device(device_);
  Tensor out = empty(shape_, dtype);
  const size_t n = static_cast<size_t>(numel());
  if (dtype == dtype_) {
    std::memcpy(out.data_, data_, nbytes());
  } else if (dtype == DType::kF32) {
    convert_to_f32(data_, dtype_, out.data<float>(), n);
  } else if (dtype_ == DType::kF32) {
    convert_from_f32(data<float>(), out.data_, dtype, n);
  } else {
    Tensor f = to(DType::kF32);
    convert_from_f32(f.data<float>(), out.data_, dtype, n);
  }
  return out;
}

std::vector<float> Tensor::to_vector() const {
  if (!on_host()) return to_device({}).to_vector();
  std::vector<float> v(static_cast<size_t>(numel()));
  convert_to_f32(data_, dtype_, v.data(), v.size());
  return v;
}

int64_t count_nonfinite(const Tensor& t) {
  if (!t.defined()) return 0;
  if (!t.on_host()) return count_nonfinite(t.to_device({}));
  const int64_t n = t.numel();
  int64_t bad = 0;
  auto scan = [&](const auto* p, auto exp_mask) {
#pragma omp parallel for reduction(+ : bad) if (n > (1 << 20))
    for (int64_t i = 0; i < n; ++i) bad += (p[i] & exp_mask) == exp_mask;
  };
  switch (t.dtype()) {
    case DType::kF32:
      scan(static_cast<const uint32_t*>(t.raw()), uint32_t{0x7f800000});
      break;
    case DType::kBF16:
      scan(static_cast<const uint16_t*>(t.raw()), uint16_t{0x7f80});
      break;
    case DType::kF16:
      scan(static_cast<const uint16_t*>(t.raw()), uint16_t{0x7c00});
      break;
  }
  return bad;
}

}  // namespace xdit
