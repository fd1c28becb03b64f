#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/ops.h"

namespace xdit::kernels::cuda {

namespace {

constexpr int kThreads = 256;  // per block: 8 warps

// The sum of `v` over the block (every thread gets it).
__device__ float block_sum(float v) {
  __shared__ float partial[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // `partial` may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float t = lane < kThreads / 32 ? partial[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

// One block per row: mean, then the variance about it (two passes over the
// row, as the CPU op: no E[x²] − E[x]² cancellation).
__global__ void layer_norm_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t dim,
                                  float eps, const float* __restrict__ gamma,
                                  const float* __restrict__ beta) {
  const float* xr = x + blockIdx.x * dim;
  float* yr = y + blockIdx.x * dim;
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) s += xr[i];
  const float mean = block_sum(s) / static_cast<float>(dim);
  float q = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    const float d = xr[i] - mean;
    q += d * d;
  }
  const float inv = rsqrtf(block_sum(q) / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    float v = (xr[i] - mean) * inv;
    if (gamma != nullptr) v *= gamma[i];
    if (beta != nullptr) v += beta[i];
    yr[i] = v;
  }
}

__global__ void rms_norm_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t dim,
                                float eps, const float* __restrict__ weight) {
  const float* xr = x + blockIdx.x * dim;
  float* yr = y + blockIdx.x * dim;
  float q = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) q += xr[i] * xr[i];
  const float inv = rsqrtf(block_sum(q) / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) yr[i] = xr[i] * inv * weight[i];
}

__global__ void gelu_tanh_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const float k = 0.7978845608028654f;  // √(2/π)
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.f + tanhf(k * (v + 0.044715f * v * v * v)));
  }
}

__global__ void silu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = x[i];
    y[i] = v / (1.f + expf(-v));
  }
}

// Grid: (column blocks, batch·tokens rows).
__global__ void modulate_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t tokens,
                                int64_t dim, const float* __restrict__ shift,
                                const float* __restrict__ scale, int64_t mod_stride) {
  const int64_t row = blockIdx.y, b = row / tokens;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= dim) return;
  const float* sh = shift + b * mod_stride;
  const float* sc = scale + b * mod_stride;
  y[row * dim + i] = x[row * dim + i] * (1.f + sc[i]) + sh[i];
}

__global__ void gated_residual_kernel(float* __restrict__ h, const float* __restrict__ y,
                                      int64_t tokens, int64_t dim, const float* __restrict__ gate,
                                      int64_t gate_stride) {
  const int64_t row = blockIdx.y, b = row / tokens;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= dim) return;
  const float g = gate != nullptr ? gate[b * gate_stride + i] : 1.f;
  h[row * dim + i] += g * y[row * dim + i];
}

unsigned elementwise_blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

}  // namespace

void layer_norm(const float* x, float* y, int64_t rows, int64_t dim, float eps, const float* gamma,
                const float* beta, Stream s) {
  if (rows == 0) return;
  layer_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, y, dim, eps, gamma, beta);
  xdit::cuda::check_launch("layer_norm");
}

void rms_norm(const float* x, float* y, int64_t rows, int64_t dim, float eps, const float* weight,
              Stream s) {
  if (rows == 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(x, y, dim, eps, weight);
  xdit::cuda::check_launch("rms_norm");
}

void gelu_tanh(const float* x, float* y, int64_t n, Stream s) {
  if (n == 0) return;
  gelu_tanh_kernel<<<elementwise_blocks(n), kThreads, 0, s>>>(x, y, n);
  xdit::cuda::check_launch("gelu_tanh");
}

void silu(const float* x, float* y, int64_t n, Stream s) {
  if (n == 0) return;
  silu_kernel<<<elementwise_blocks(n), kThreads, 0, s>>>(x, y, n);
  xdit::cuda::check_launch("silu");
}

void modulate(const float* x, float* y, int64_t batch, int64_t tokens, int64_t dim,
              const float* shift, const float* scale, int64_t mod_stride, Stream s) {
  if (batch * tokens == 0 || dim == 0) return;
  const dim3 grid(static_cast<unsigned>((dim + kThreads - 1) / kThreads),
                  static_cast<unsigned>(batch * tokens));
  modulate_kernel<<<grid, kThreads, 0, s>>>(x, y, tokens, dim, shift, scale, mod_stride);
  xdit::cuda::check_launch("modulate");
}

void gated_residual_add(float* h, const float* y, int64_t batch, int64_t tokens, int64_t dim,
                        const float* gate, int64_t gate_stride, Stream s) {
  if (batch * tokens == 0 || dim == 0) return;
  const dim3 grid(static_cast<unsigned>((dim + kThreads - 1) / kThreads),
                  static_cast<unsigned>(batch * tokens));
  gated_residual_kernel<<<grid, kThreads, 0, s>>>(h, y, tokens, dim, gate, gate_stride);
  xdit::cuda::check_launch("gated_residual_add");
}

}  // namespace xdit::kernels::cuda
