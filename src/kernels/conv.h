// 2-D convolution on oneDNN with the weight prepacked once at load; bf16 3×3
// layers with padding 1 may instead run Winograd F(2×2, 3×3) on oneDNN GEMMs
// (cpu/winograd.h; set_conv_winograd in kernels.h says when).
// Activations are f32 NHWC ("channels last"); the weight is torch's
// [out, in, kh, kw]. Stride 1, symmetric zero padding (what the VAE uses), or
// a row band with halo rows supplied by the caller (the patch-parallel VAE).
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
  // A row band with its halo: x holds `rows` + 2·halo() rows per batch item,
  // the halo rows above and below already filled (the neighbouring bands'
  // edge rows, or zeros at the image's edges), in the layer's input type (bf16
  // for bf16 layers, else f32); no vertical padding is added. y [B, rows, W', out].
  void forward_halo(const void* x, int64_t batch, int64_t rows, int64_t width, float* y) const;
  // Rows a band needs from each neighbour: the padding (stride 1).
  int64_t halo() const;
  bool is_bf16() const;
  int64_t in_channels() const;
  int64_t out_channels() const;
  int64_t out_size(int64_t in) const;
  // The implementation the convolution runs for this input size
  // ("brgconv:avx512_core_amx", ..., or "xdit:winograd_2x2_3x3+" and its
  // GEMMs' oneDNN kernel), creating its primitive without running it: the
  // tests check that no size falls to a reference kernel.
  // `halo`: the forward_halo primitive for `height` input rows (halos included).
  std::string implementation(int64_t batch, int64_t height, int64_t width, bool halo = false) const;

 private:
  void run(const void* src, int64_t batch, int64_t height, int64_t width, float* y,
           bool halo = false) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xdit::kernels
