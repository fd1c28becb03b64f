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
enum class Epilogue { kNone, kBias, kGeluBias };

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  GemmType in = GemmType::kBF16, out = GemmType::kBF16;
  Epilogue epilogue = Epilogue::kNone;
  auto key() const { return std::tie(m, n, k, in, out, epilogue); }
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

}  // namespace xdit::kernels::cuda
