// Device-side pieces the CUDA kernels share: bf16 conversions rounded as the
// CPU's (nearest even), loads and stores of either element type, the tanh
// GELU, and the grid-stride loop.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace xdit::kernels::cuda {

__device__ inline uint16_t to_bf16(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
__device__ inline float to_float(float v) {
  return v;
}
__device__ inline float to_float(uint16_t v) {  // a bf16 bit pattern
  return __bfloat162float(__ushort_as_bfloat16(v));
}
__device__ inline void store(float* p, float v) {
  *p = v;
}
__device__ inline void store(uint16_t* p, float v) {
  *p = to_bf16(v);
}
// v as a bf16 product operand sees it.
__device__ inline float round_bf16(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

__device__ inline float gelu_tanh_f(float v) {
  const float k = 0.7978845608028654f;  // √(2/π)
  return 0.5f * v * (1.f + tanhf(k * (v + 0.044715f * v * v * v)));
}

}  // namespace xdit::kernels::cuda

// A grid-stride loop over n elements.
#define XDIT_GRID_LOOP(i, n)                                                             \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
