// Tensor: a typed, shaped view of storage that it shares ownership of. The
// storage is an aligned host allocation, a memory-mapped file region (kept
// alive by the view), or device memory of a CUDA device (data() is then a
// device pointer, for the op set under a DeviceScope of that device).
// Activations in the engine are f32; weights may be f32/f16/bf16 until they
// are packed into the compute layout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace xdit {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);  // "[2, 4, 8]"
int64_t shape_numel(const Shape& s);
// "12 KB", "3.4 GB": byte counts in messages.
std::string human_size(double bytes);

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised tensor, 64-byte aligned on the host; on a CUDA device
  // (cudaMalloc, 256-byte aligned) when `device` is one.
  static Tensor empty(Shape shape, DType dtype = DType::kF32, Device device = {});
  static Tensor zeros(Shape shape, DType dtype = DType::kF32, Device device = {});
  // A view of memory owned by `keeper` (e.g. a file mapping).
  static Tensor view(std::shared_ptr<const void> keeper, const void* data, Shape shape,
                     DType dtype);
  // f32 tensor holding a copy of `values`.
  static Tensor from_vector(const std::vector<float>& values, Shape shape);

  // A default-constructed Tensor is undefined and has no elements.
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const { return storage_ ? shape_numel(shape_) : 0; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool on_host() const { return !device_.cuda(); }

  template <class T>
  T* data() {
    return static_cast<T*>(data_);
  }
  template <class T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }
  void* raw() { return data_; }
  const void* raw() const { return data_; }

  // Same storage, new shape (element count must match).
  Tensor reshape(Shape shape) const;
  // Same storage, the leading elements under a new shape of at most as many.
  Tensor leading(Shape shape) const;
  // Same storage, entries [begin, begin + count) of the first dimension
  // (contiguous: a view, no copy).
  Tensor rows(int64_t begin, int64_t count) const;
  // A copy converted to `dtype` (a plain copy when it already is), on the
  // same device.
  Tensor to(DType dtype) const;
  // This tensor on `device`: itself when it is there, else a copy.
  Tensor to_device(Device device) const;
  // This tensor as `dtype` on `device`: itself when it already is, else a
  // converted and/or moved copy (inputs a model reads where it runs).
  Tensor as(DType dtype, Device device) const;
  Tensor clone() const { return to(dtype_); }
  // The f32 values as a vector (converting, and copying from the device, if needed).
  std::vector<float> to_vector() const;

 private:
  std::shared_ptr<const void> storage_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::kF32;
  Device device_;
};

// NaN and ±Inf values in an f32/f16/bf16 tensor (from the bit patterns, so no
// conversion; parallel for large tensors).
int64_t count_nonfinite(const Tensor& t);

}  // namespace xdit
