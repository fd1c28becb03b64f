// 2-D convolution on the CUDA backend through cuDNN's graph API (the cuDNN
// frontend, as the SDPA): NHWC activations as the CPU's Conv2d keeps them,
// the weight in KRSC (torch's [out, in, kh, kw] transposed once at upload),
// stride 1, the bias added in the same graph, f32 output; bf16 or f32
// inputs with f32 accumulation. One graph and plan per shape.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>

#include "kernels/cuda/runtime.h"

namespace xdit::kernels::cuda {

using xdit::cuda::Stream;

struct ConvShape {
  int64_t batch = 1, height = 1, width = 1, in = 1, out = 1, kernel = 3, pad = 1;
  bool bf16 = true;
  // A row band whose halo rows are already in x: no vertical padding.
  bool halo = false;
  auto key() const { return std::tie(batch, height, width, in, out, kernel, pad, bf16, halo); }
  bool operator<(const ConvShape& o) const { return key() < o.key(); }
  int64_t out_height() const { return height + 2 * (halo ? 0 : pad) - kernel + 1; }
  int64_t out_width() const { return width + 2 * pad - kernel + 1; }
  std::string str() const;  // "conv bf16 [2 x 128 x 128 x 512] k3 p1 -> 512"
};

// Builds and validates the graph of `s` for compute capability `sm`
// without a device; throws one line with cuDNN's reason.
void check_conv_graph(const ConvShape& s, int sm = 90);

class Conv {
 public:
  Conv();  // a cuDNN handle on the current device
  ~Conv();
  Conv(const Conv&) = delete;
  Conv& operator=(const Conv&) = delete;
  // y [B, H', W', out] (f32) = conv(x [B, H, W, in], w [out, kh, kw, in]) + bias [out] (f32).
  void run(const ConvShape& s, const void* x, const void* w, const float* bias, float* y,
           Stream st = nullptr);
  size_t plans() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A Conv2d's weights on the device, uploaded once (KRSC; bf16 for bf16
// layers), run through the current device's Conv.
class DeviceConv {
 public:
  // w_f32: torch's [out, in, k, k]; bias [out].
  DeviceConv(const float* w_f32, const float* bias, int64_t in, int64_t out, int64_t kernel,
             int64_t pad, bool bf16);
  // x [B, H, W, in] (f32, or bf16 when x_bf16; H includes the halo rows
  // when `halo`) → y [B, H', W', out] f32.
  void forward(const void* x, bool x_bf16, int64_t batch, int64_t height, int64_t width, float* y,
               bool halo, Stream st = nullptr) const;
  bool bf16() const { return bf16_; }

 private:
  int64_t in_, out_, kernel_, pad_;
  bool bf16_;
  xdit::cuda::DeviceBuffer w_, bias_;
};

}  // namespace xdit::kernels::cuda
