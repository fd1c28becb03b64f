// The normalisations of the CUDA op set (ops.h): LayerNorm (plain and
// modulated), RMSNorm and the q/k RMSNorm + rotary embedding, softmax rows,
// GroupNorm (+ SiLU), AdaLN's modulation and the gated residual.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/context.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace xdit::kernels::cuda {

namespace {

struct Sum {
  static constexpr float kIdentity = 0.f;
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
  static constexpr float kIdentity = -INFINITY;
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// `v` reduced with Op over the block (every thread gets the result).
template <class Op>
__device__ float block_reduce(float v) {
  const Op op;
  __shared__ float partial[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // `partial` may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float t = lane < kThreads / 32 ? partial[lane] : Op::kIdentity;
  for (int o = 16; o > 0; o >>= 1) t = op(t, __shfl_xor_sync(0xffffffffu, t, o));
  return t;
}

__device__ float block_sum(float v) {
  return block_reduce<Sum>(v);
}

// A block's row: its mean, then 1/√(variance about it + eps) (two passes
// over the row, as the CPU op: no E[x²] − E[x]² cancellation).
__device__ float2 row_mean_rstd(const float* xr, int64_t dim, float eps) {
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) s += xr[i];
  const float mean = block_sum(s) / static_cast<float>(dim);
  float q = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    const float d = xr[i] - mean;
    q += d * d;
  }
  return make_float2(mean, rsqrtf(block_sum(q) / static_cast<float>(dim) + eps));
}

// One block per row.
__global__ void layer_norm_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t dim,
                                  float eps, const float* __restrict__ gamma,
                                  const float* __restrict__ beta) {
  const float* xr = x + blockIdx.x * dim;
  float* yr = y + blockIdx.x * dim;
  const float2 st = row_mean_rstd(xr, dim, eps);
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    float v = (xr[i] - st.x) * st.y;
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

// Grid: (column blocks, batch·tokens rows).
__global__ void modulate_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t tokens,
                                int64_t dim, const float* __restrict__ shift,
                                const float* __restrict__ scale, int64_t mod_stride, int64_t rows) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= dim) return;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {  // rows may pass 65535
    const int64_t b = row / tokens;
    y[row * dim + i] =
        x[row * dim + i] * (1.f + scale[b * mod_stride + i]) + shift[b * mod_stride + i];
  }
}

__global__ void gated_residual_kernel(float* __restrict__ h, const float* __restrict__ y,
                                      int64_t tokens, int64_t dim, const float* __restrict__ gate,
                                      int64_t gate_stride, int64_t rows) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= dim) return;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {  // rows may pass 65535
    const float g = gate != nullptr ? gate[(row / tokens) * gate_stride + i] : 1.f;
    h[row * dim + i] += g * y[row * dim + i];
  }
}

// One block per row: max, Σ exp (as the CPU op: exp(x − max) stored, then scaled).
__global__ void softmax_rows_kernel(float* __restrict__ x, int64_t cols) {
  float* p = x + blockIdx.x * cols;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) m = fmaxf(m, p[i]);
  m = block_reduce<Max>(m);
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    const float e = expf(p[i] - m);
    p[i] = e;
    s += e;
  }
  const float inv = 1.f / block_sum(s);
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) p[i] *= inv;
}

// LayerNorm (no affine) then y = n · (1 + scale_b) + shift_b, f32 or bf16 out;
// one block per row.
template <class Out>
__global__ void layer_norm_modulate_kernel(const float* __restrict__ x, Out* __restrict__ y,
                                           int64_t tokens, int64_t dim, float eps,
                                           const float* __restrict__ shift,
                                           const float* __restrict__ scale, int64_t mod_stride) {
  const int64_t row = blockIdx.x, b = row / tokens;
  const float* xr = x + row * dim;
  Out* yr = y + row * dim;
  const float2 st = row_mean_rstd(xr, dim, eps);
  const float* sh = shift + b * mod_stride;
  const float* sc = scale + b * mod_stride;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads)
    store(yr + i, (xr[i] - st.x) * st.y * (1.f + sc[i]) + sh[i]);
}

// Σx and Σx² of one (batch item, group) in f64: one block each.
__global__ void group_moments_kernel(const float* __restrict__ x, int64_t hw, int64_t channels,
                                     int64_t groups, double* __restrict__ moments) {
  const int64_t b = blockIdx.x / groups, g = blockIdx.x % groups, cg = channels / groups;
  const float* xb = x + b * hw * channels + g * cg;
  double s = 0, s2 = 0;
  for (int64_t i = threadIdx.x; i < hw * cg; i += kThreads) {
    const double v = xb[(i / cg) * channels + i % cg];
    s += v;
    s2 += v * v;
  }
  __shared__ double ps[kThreads], ps2[kThreads];
  ps[threadIdx.x] = s;
  ps2[threadIdx.x] = s2;
  __syncthreads();
  for (int h = kThreads / 2; h > 0; h >>= 1) {
    if (threadIdx.x < h) {
      ps[threadIdx.x] += ps[threadIdx.x + h];
      ps2[threadIdx.x] += ps2[threadIdx.x + h];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    moments[2 * blockIdx.x] = ps[0];
    moments[2 * blockIdx.x + 1] = ps2[0];
  }
}

// y = x·a + c per channel (a = rstd·γ, c = β − mean·a, as the CPU op), then SiLU.
template <class Out>
__global__ void group_apply_kernel(const float* __restrict__ x, Out* __restrict__ y, int64_t hw,
                                   int64_t channels, int64_t groups, float eps,
                                   const float* __restrict__ gamma, const float* __restrict__ beta,
                                   bool silu_after, const double* __restrict__ moments,
                                   double count, int64_t y_batch_stride, int64_t total) {
  const int64_t cg = channels / groups;
  XDIT_GRID_LOOP(i, total) {
    const int64_t ch = i % channels, b = i / (hw * channels), p = (i / channels) % hw;
    const int64_t bg = b * groups + ch / cg;
    const double m = moments[2 * bg] / count;
    const double var = fmax(moments[2 * bg + 1] / count - m * m, 0.0);
    const double rstd = 1.0 / sqrt(var + eps);
    const double sa = rstd * gamma[ch];
    const float a = static_cast<float>(sa), c = static_cast<float>(beta[ch] - m * sa);
    float v = x[i] * a + c;
    if (silu_after) v = v / (1.f + expf(-v));
    store(y + b * y_batch_stride + p * channels + ch, v);
  }
}

// One warp per (batch, row, q or k, head): RMSNorm over head_dim, then the
// rotary pairs.
__global__ void qk_norm_rope_kernel(float* __restrict__ qkv, int64_t seq, int64_t row_begin,
                                    int64_t rows, int64_t heads, int64_t hd, float eps,
                                    const float* __restrict__ wq, const float* __restrict__ wk,
                                    const float* __restrict__ cos, const float* __restrict__ sin,
                                    int64_t warps) {
  const int lane = threadIdx.x % 32;
  const int64_t w = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (w >= warps) return;
  const int64_t h = w % heads, part = (w / heads) % 2, s = row_begin + (w / (2 * heads)) % rows,
                b = w / (2 * heads * rows);
  const int64_t D = heads * hd;
  float* x = qkv + (b * seq + s) * 3 * D + part * D + h * hd;
  const float* wt = part == 0 ? wq : wk;
  float ss = 0.f;
  for (int64_t i = lane; i < hd; i += 32) ss += x[i] * x[i];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  const float inv = rsqrtf(ss / static_cast<float>(hd) + eps);
  if (cos == nullptr) {  // RMSNorm only (SD3)
    for (int64_t i = lane; i < hd; i += 32) x[i] = x[i] * inv * wt[i];
    return;
  }
  const float* cs = cos + s * hd;
  const float* sn = sin + s * hd;
  for (int64_t i = 2 * lane; i + 1 < hd; i += 64) {
    const float x0 = x[i] * inv * wt[i], x1 = x[i + 1] * inv * wt[i + 1];
    x[i] = x0 * cs[i] + -x1 * sn[i];
    x[i + 1] = x1 * cs[i + 1] + x0 * sn[i + 1];
  }
}

// One warp per row: the sum of squares of `width` values.
__global__ void row_sum_squares_kernel(const float* __restrict__ x, int64_t rows, int64_t stride,
                                       int64_t width, float* __restrict__ sumsq) {
  const int lane = threadIdx.x % 32;
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) return;
  const float* row = x + r * stride;
  float ss = 0.f;
  for (int64_t i = lane; i < width; i += 32) ss += row[i] * row[i];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (lane == 0) sumsq[r] = ss;
}

// One warp per row: scale by w·rsqrt(mean square + eps), then rotate pairs.
__global__ void rms_scale_rope_kernel(float* __restrict__ x, int64_t rows, int64_t stride,
                                      int64_t width, const float* __restrict__ sumsq,
                                      float total_width, float eps, const float* __restrict__ w,
                                      int64_t seq, int64_t hd, const float* __restrict__ cos,
                                      const float* __restrict__ sin) {
  const int lane = threadIdx.x % 32;
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) return;
  float* row = x + r * stride;
  const float inv = rsqrtf(sumsq[r] / total_width + eps);
  if (cos == nullptr) {
    for (int64_t i = lane; i < width; i += 32) row[i] = w[i] * (row[i] * inv);
    return;
  }
  const float* cs = cos + (r % seq) * hd;
  const float* sn = sin + (r % seq) * hd;
  for (int64_t i = 2 * lane; i + 1 < width; i += 64) {
    const int64_t j = i % hd;
    const float x0 = w[i] * (row[i] * inv), x1 = w[i + 1] * (row[i + 1] * inv);
    row[i] = x0 * cs[j] + -x1 * sn[j];
    row[i + 1] = x1 * cs[j + 1] + x0 * sn[j + 1];
  }
}

}  // namespace

void layer_norm(const float* x, float* y, int64_t rows, int64_t dim, float eps, const float* gamma,
                const float* beta, Stream s) {
  XDIT_LAUNCH_ROWS(layer_norm_kernel, rows, s, x, y, dim, eps, gamma, beta);
}

void rms_norm(const float* x, float* y, int64_t rows, int64_t dim, float eps, const float* weight,
              Stream s) {
  XDIT_LAUNCH_ROWS(rms_norm_kernel, rows, s, x, y, dim, eps, weight);
}

void modulate(const float* x, float* y, int64_t batch, int64_t tokens, int64_t dim,
              const float* shift, const float* scale, int64_t mod_stride, Stream s) {
  if (batch * tokens == 0 || dim == 0) return;
  const dim3 grid(static_cast<unsigned>((dim + kThreads - 1) / kThreads),
                  grid_rows(batch * tokens));
  modulate_kernel<<<grid, kThreads, 0, s>>>(x, y, tokens, dim, shift, scale, mod_stride,
                                            batch * tokens);
  xdit::cuda::check_launch("modulate");
}

void gated_residual_add(float* h, const float* y, int64_t batch, int64_t tokens, int64_t dim,
                        const float* gate, int64_t gate_stride, Stream s) {
  if (batch * tokens == 0 || dim == 0) return;
  const dim3 grid(static_cast<unsigned>((dim + kThreads - 1) / kThreads),
                  grid_rows(batch * tokens));
  gated_residual_kernel<<<grid, kThreads, 0, s>>>(h, y, tokens, dim, gate, gate_stride,
                                                  batch * tokens);
  xdit::cuda::check_launch("gated_residual_add");
}

void softmax_rows(float* x, int64_t rows, int64_t cols, Stream s) {
  if (cols == 0) return;
  XDIT_LAUNCH_ROWS(softmax_rows_kernel, rows, s, x, cols);
}

void layer_norm_modulate(const float* x, float* y, int64_t batch, int64_t tokens, int64_t dim,
                         float eps, const float* shift, const float* scale, int64_t mod_stride,
                         Stream s) {
  XDIT_LAUNCH_ROWS(layer_norm_modulate_kernel<float>, batch * tokens, s, x, y, tokens, dim, eps,
                   shift, scale, mod_stride);
}

void layer_norm_modulate(const float* x, uint16_t* y, int64_t batch, int64_t tokens, int64_t dim,
                         float eps, const float* shift, const float* scale, int64_t mod_stride,
                         Stream s) {
  XDIT_LAUNCH_ROWS(layer_norm_modulate_kernel<uint16_t>, batch * tokens, s, x, y, tokens, dim, eps,
                   shift, scale, mod_stride);
}

namespace {
// Moments into device scratch.
double* device_moments(const float* x, int64_t batch, int64_t hw, int64_t channels, int64_t groups,
                       Stream s) {
  auto* m = static_cast<double*>(
      device_scratch(ScratchSlot::kMoments, static_cast<size_t>(2 * batch * groups) * 8));
  group_moments_kernel<<<static_cast<unsigned>(batch * groups), kThreads, 0, s>>>(x, hw, channels,
                                                                                  groups, m);
  xdit::cuda::check_launch("group_norm_moments");
  return m;
}

// `moments`: device memory.
template <class Out>
void group_apply(const float* x, Out* y, int64_t batch, int64_t hw, int64_t channels,
                 int64_t groups, float eps, const float* gamma, const float* beta, bool silu_after,
                 const double* moments, double count, int64_t y_batch_stride, Stream s) {
  if (y_batch_stride == 0) y_batch_stride = hw * channels;
  const int64_t n = batch * hw * channels;
  XDIT_LAUNCH(group_apply_kernel<Out>, n, s, x, y, hw, channels, groups, eps, gamma, beta,
              silu_after, moments, count, y_batch_stride, n);
}

// Host moments → device scratch, then apply.
template <class Out>
void group_apply_host(const float* x, Out* y, int64_t batch, int64_t hw, int64_t channels,
                      int64_t groups, float eps, const float* gamma, const float* beta,
                      bool silu_after, const double* moments, double count, int64_t y_batch_stride,
                      Stream s) {
  const size_t bytes = static_cast<size_t>(2 * batch * groups) * 8;
  auto* m = static_cast<double*>(device_scratch(ScratchSlot::kMoments, bytes));
  xdit::cuda::copy(m, moments, bytes, s);
  group_apply(x, y, batch, hw, channels, groups, eps, gamma, beta, silu_after, m, count,
              y_batch_stride, s);
}
}  // namespace

void group_norm_nhwc(const float* x, void* y, bool y_bf16, int64_t batch, int64_t hw,
                     int64_t channels, int64_t groups, float eps, const float* gamma,
                     const float* beta, bool silu_after, Stream s) {
  if (batch * hw * channels == 0) return;
  const double* m = device_moments(x, batch, hw, channels, groups, s);
  const double count = static_cast<double>(hw * (channels / groups));
  if (y_bf16)
    group_apply(x, static_cast<uint16_t*>(y), batch, hw, channels, groups, eps, gamma, beta,
                silu_after, m, count, 0, s);
  else
    group_apply(x, static_cast<float*>(y), batch, hw, channels, groups, eps, gamma, beta,
                silu_after, m, count, 0, s);
}

void group_norm_moments_nhwc(const float* x, int64_t batch, int64_t hw, int64_t channels,
                             int64_t groups, double* moments, Stream s) {
  if (batch * groups == 0) return;
  const double* m = device_moments(x, batch, hw, channels, groups, s);
  xdit::cuda::copy(moments, m, static_cast<size_t>(2 * batch * groups) * 8, s);
}

void group_norm_apply_nhwc(const float* x, float* y, int64_t batch, int64_t hw, int64_t channels,
                           int64_t groups, float eps, const float* gamma, const float* beta,
                           bool silu_after, const double* moments, double count,
                           int64_t y_batch_stride, Stream s) {
  group_apply_host(x, y, batch, hw, channels, groups, eps, gamma, beta, silu_after, moments, count,
                   y_batch_stride, s);
}

void group_norm_apply_nhwc_bf16(const float* x, uint16_t* y, int64_t batch, int64_t hw,
                                int64_t channels, int64_t groups, float eps, const float* gamma,
                                const float* beta, bool silu_after, const double* moments,
                                double count, int64_t y_batch_stride, Stream s) {
  group_apply_host(x, y, batch, hw, channels, groups, eps, gamma, beta, silu_after, moments, count,
                   y_batch_stride, s);
}

void qk_norm_rope(float* qkv, int64_t batch, int64_t seq, int64_t row_begin, int64_t rows,
                  int64_t heads, int64_t head_dim, float eps, const float* wq, const float* wk,
                  const float* cos, const float* sin, Stream s) {
  const int64_t warps = batch * rows * 2 * heads;
  if (warps == 0) return;
  const auto blocks = static_cast<unsigned>((warps + kThreads / 32 - 1) / (kThreads / 32));
  qk_norm_rope_kernel<<<blocks, kThreads, 0, s>>>(qkv, seq, row_begin, rows, heads, head_dim, eps,
                                                  wq, wk, cos, sin, warps);
  xdit::cuda::check_launch("qk_norm_rope");
}

void row_sum_squares(const float* x, int64_t rows, int64_t stride, int64_t width, float* sumsq,
                     Stream s) {
  if (rows == 0) return;
  const auto blocks = static_cast<unsigned>((rows + kThreads / 32 - 1) / (kThreads / 32));
  row_sum_squares_kernel<<<blocks, kThreads, 0, s>>>(x, rows, stride, width, sumsq);
  xdit::cuda::check_launch("row_sum_squares");
}

void rms_scale_rope(float* x, int64_t rows, int64_t stride, int64_t width, const float* sumsq,
                    int64_t total_width, float eps, const float* w, int64_t seq, int64_t head_dim,
                    const float* cos, const float* sin, Stream s) {
  if (rows == 0) return;
  const auto blocks = static_cast<unsigned>((rows + kThreads / 32 - 1) / (kThreads / 32));
  rms_scale_rope_kernel<<<blocks, kThreads, 0, s>>>(x, rows, stride, width, sumsq,
                                                    static_cast<float>(total_width), eps, w, seq,
                                                    head_dim, cos, sin);
  xdit::cuda::check_launch("rms_scale_rope");
}

}  // namespace xdit::kernels::cuda
