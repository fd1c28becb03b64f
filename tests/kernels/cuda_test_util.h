// Helpers of the CUDA op harness (test_cuda_ops.cpp, test_cuda_gemm.cpp,
// test_cuda_pipelines.cpp), and the headers they use: paths, random values,
// the error measure, and on CUDA builds the device buffers and the
// GPU-or-skip guard.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cli_util.h"
#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"
#include "io/json.h"
#include "io/model_folder.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "kernels/conv.h"
#include "kernels/kernels.h"
#include "kernels/linear.h"
#include "models/flux.h"
#include "models/pixart.h"
#include "nn/layers.h"
#include "pipeline/pipeline.h"
#include "test_util.h"
#ifdef XDIT_HAVE_CUDA
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"
#ifdef XDIT_HAVE_CUDNN_FE
#include "kernels/cuda/conv.h"
#include "kernels/cuda/sdpa.h"
#endif
#include "kernels/cuda/runtime.h"
#endif

namespace xdit::test {

// Paths fixed at build time, overridable from the environment (test_util.h).
inline std::string test_data_dir() {
  return path_from_env("XDIT_TEST_DATA", XDIT_TEST_DATA);
}
inline std::string binary() {
  return path_from_env("XDIT_BINARY", XDIT_BINARY);
}

inline std::vector<float> random_values(size_t n, uint32_t seed, float lo = -3.f, float hi = 3.f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// The largest |a − b| / max(1, |b|).
inline float max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::fabs(a[i] - b[i]) / std::max(1.f, std::fabs(b[i])));
  return worst;
}

#ifdef XDIT_HAVE_CUDA
// Skips (with the runtime's reason) where no GPU can run the case.
#define NEED_GPU()                                                                    \
  do {                                                                                \
    std::string why;                                                                  \
    if (cuda::device_count(&why) == 0) GTEST_SKIP() << "CUDA cases skipped: " << why; \
    cuda::set_device(0);                                                              \
  } while (0)

struct OnDevice {
  cuda::DeviceBuffer buf;
  explicit OnDevice(const std::vector<float>& v) : buf(v.size() * 4) {
    buf.upload(v.data(), v.size() * 4);
  }
  explicit OnDevice(size_t n) : buf(n * 4) {}
  float* p() const { return buf.as<float>(); }
  std::vector<float> get(size_t n) const {
    std::vector<float> v(n);
    buf.download(v.data(), n * 4);
    return v;
  }
};

// The op set through its dispatch: each kernels.h op under a CUDA
// DeviceScope on device tensors against the same op on the CPU.
inline Tensor on_gpu(const std::vector<float>& v) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to_device(parse_device("cuda"));
}
inline Tensor gpu_empty(int64_t n) {
  return Tensor::empty({n}, DType::kF32, parse_device("cuda"));
}
inline float* f(Tensor& t) {
  return t.data<float>();
}
#endif

}  // namespace xdit::test
