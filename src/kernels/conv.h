// 2-D convolution on oneDNN with the weight prepacked once at load.
// Activations are f32 NHWC ("channels last"); the weight is torch's
// [out, in, kh, kw]. Stride 1, symmetric zero padding (what the VAE uses).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "kernels/linear.h"

namespace xdit::kernels {

class Conv2d {
 public:
  Conv2d();
  Conv2d(const Tensor& weight, const Tensor& bias, int64_t padding, ComputeType ct);
  Conv2d(Conv2d&&) noexcept;
  Conv2d& operator=(Conv2d&&) noexcept;
  ~Conv2d();

  // x [B, H, W, in] → y [B, H', W', out] (H' = H + 2·pad − kh + 1).
  void forward(const float* x, int64_t batch, int64_t height, int64_t width, float* y) const;
  // bf16 layers only: the input already in bf16 (e.g. from group_norm_nhwc_bf16).
  void forward_bf16(const uint16_t* x, int64_t batch, int64_t height, int64_t width,
                    float* y) const;
  bool is_bf16() const;
  int64_t in_channels() const;
  int64_t out_channels() const;
  int64_t out_size(int64_t in) const;
  // The oneDNN implementation the convolution runs for this input size
  // ("brgconv:avx512_core_amx", ...), creating its primitive without running
  // it: the tests check that no size falls to a reference kernel.
  std::string implementation(int64_t batch, int64_t height, int64_t width) const;

 private:
  void run(const void* src, int64_t batch, int64_t height, int64_t width, float* y) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xdit::kernels
