// The Linear of the CUDA backend through cuBLASLt: y[M,N] = x[M,K] · w[N,K]ᵀ
// (+ bias[N]) (then GELU, tanh form), row-major as the CPU op set keeps
// activations and diffusers keeps weights. bf16 or f32 inputs, f32
// accumulation, bf16 or f32 output; the bias and GELU run in cuBLASLt's
// epilogue. Each shape's descriptors and algorithm are made once and cached;
// the workspace is explicit (32 MiB).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "kernels/cuda/runtime.h"

namespace xdit::kernels::cuda {

using xdit::cuda::Stream;

enum class GemmType { kF32, kBF16 };
enum class Epilogue { kNone, kBias, kGeluBias, kGelu };

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  GemmType in = GemmType::kBF16, out = GemmType::kBF16;
  Epilogue epilogue = Epilogue::kNone;
  bool accumulate = false;  // y += x·wᵀ (+ bias): beta 1 (no GELU)
  auto key() const { return std::tie(m, n, k, in, out, epilogue, accumulate); }
  bool operator<(const GemmShape& o) const { return key() < o.key(); }
  std::string str() const;  // "bf16 [512 x 1152] x [1152 x 4608]ᵀ + bias, gelu -> bf16"
};

// cuBLASLt's operation and matrix layouts for `s` (what a plan holds),
// made and checked without a device: throws one line naming the failing
// cuBLASLt call. The tests' check of the descriptors where there is no GPU.
void check_gemm_descriptors(const GemmShape& s);

class Gemm {
 public:
  Gemm();  // a cuBLASLt handle and the workspace on the current device
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y = x · wᵀ (+ bias) (GELU) on stream `st`; bias is f32 when given.
  void run(const GemmShape& s, const void* x, const void* w, const float* bias, void* y,
           Stream st = nullptr);
  size_t plans() const;  // shapes planned so far

 private:
  struct Plan;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A Linear's weights on the device, uploaded once (bf16 for bf16 layers,
// f32 otherwise; bf16 layers whose K or N is not a multiple of 8 — cuBLASLt's
// 16-byte rows — keep f32 weights and run in f32), run through the current
// device's Gemm. Host pointers in, device memory kept.
class DeviceLinear {
 public:
  // w_f32: [out, in] row-major; bias: [out] or null.
  DeviceLinear(const float* w_f32, const float* bias, int64_t in, int64_t out, bool bf16,
               bool gelu);
  // y[m, out] = act(x[m, in] · wᵀ + b) (accumulate: y += …); x and y f32 or bf16.
  void forward(const void* x, bool x_bf16, int64_t m, void* y, bool y_bf16, bool accumulate,
               Stream st = nullptr) const;
  bool bf16() const { return bf16_; }

 private:
  int64_t in_ = 0, out_ = 0;
  bool bf16_ = false, gelu_ = false, has_bias_ = false;
  xdit::cuda::DeviceBuffer w_, bias_;
};

}  // namespace xdit::kernels::cuda
