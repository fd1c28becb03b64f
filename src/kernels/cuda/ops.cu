#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/context.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/ops.h"

namespace xdit::kernels::cuda {

namespace {

constexpr int kThreads = 256;  // per block: 8 warps

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

__global__ void gelu_tanh_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  XDIT_GRID_LOOP(i, n) y[i] = gelu_tanh_f(x[i]);
}

__global__ void silu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  XDIT_GRID_LOOP(i, n) y[i] = x[i] / (1.f + expf(-x[i]));
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

__global__ void gelu_erf_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  XDIT_GRID_LOOP(i, n) y[i] = 0.5f * x[i] * (1.f + erff(x[i] * 0.70710678f));
}

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  XDIT_GRID_LOOP(i, n) y[i] = fmaxf(x[i], 0.f);
}

__global__ void quick_gelu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  XDIT_GRID_LOOP(i, n) y[i] = x[i] / (1.f + expf(-1.702f * x[i]));
}

// y[r, j] = gelu_tanh(x[r, j]) · x[r, n + j] over rows·n outputs.
__global__ void gelu_gate_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n,
                                 int64_t total) {
  XDIT_GRID_LOOP(i, total) {
    const int64_t r = i / n, j = i % n;
    y[i] = gelu_tanh_f(x[r * 2 * n + j]) * x[r * 2 * n + n + j];
  }
}

__global__ void to_bf16_rows_kernel(const float* __restrict__ x, int64_t stride, int64_t n,
                                    uint16_t* __restrict__ y, int64_t total) {
  XDIT_GRID_LOOP(i, total) y[i] = to_bf16(x[(i / n) * stride + i % n]);
}

__global__ void from_bf16_rows_kernel(const uint16_t* __restrict__ x, int64_t n,
                                      float* __restrict__ y, int64_t stride, int64_t total) {
  XDIT_GRID_LOOP(i, total) y[(i / n) * stride + i % n] = to_float(x[i]);
}

__global__ void add_rows_kernel(const float* x, int64_t x_stride, const float* b, int64_t b_stride,
                                float* y, int64_t y_stride, int64_t n,
                                int64_t total) {  // y may equal x: no __restrict__
  XDIT_GRID_LOOP(i, total) {
    const int64_t r = i / n, j = i % n;
    y[r * y_stride + j] = x[r * x_stride + j] + b[r * b_stride + j];
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

template <class Out>
__global__ void upsample2x_kernel(const float* __restrict__ x, Out* __restrict__ y, int64_t h,
                                  int64_t w, int64_t channels, int64_t y_batch_stride,
                                  int64_t total) {
  XDIT_GRID_LOOP(i, total) {  // over the output's B · 2h · 2w · C values
    const int64_t ch = i % channels, q = (i / channels) % (2 * w);
    const int64_t r = (i / (channels * 2 * w)) % (2 * h), b = i / (channels * 4 * w * h);
    store(y + b * y_batch_stride + (r * 2 * w + q) * channels + ch,
          x[((b * h + r / 2) * w + q / 2) * channels + ch]);
  }
}

// cols [B·gh·gw, C·p·p] in (c, i, j) order from latent [B, C, H, W].
__global__ void patchify_kernel(const float* __restrict__ latent, int64_t channels, int64_t height,
                                int64_t width, int64_t p, float* __restrict__ cols, int64_t total) {
  const int64_t gh = height / p, gw = width / p, k = channels * p * p;
  XDIT_GRID_LOOP(o, total) {
    const int64_t e = o % k, tok = o / k;
    const int64_t ch = e / (p * p), i = (e / p) % p, j = e % p;
    const int64_t c = tok % gw, r = (tok / gw) % gh, b = tok / (gw * gh);
    cols[o] = latent[((b * channels + ch) * height + r * p + i) * width + c * p + j];
  }
}

// out [B, C, h·p, w·p] from x [B, h·w, p·p·C] in (p, q, c) order.
__global__ void unpatchify_kernel(const float* __restrict__ x, int64_t channels, int64_t h,
                                  int64_t w, int64_t p, float* __restrict__ out, int64_t total) {
  const int64_t H = h * p, W = w * p;
  XDIT_GRID_LOOP(o, total) {
    const int64_t xx = o % W, yy = (o / W) % H, ch = (o / (W * H)) % channels,
                  b = o / (W * H * channels);
    const int64_t r = yy / p, i = yy % p, c = xx / p, j = xx % p;
    out[o] = x[((b * h + r) * w + c) * (p * p * channels) + (i * p + j) * channels + ch];
  }
}

// Token-major rows (`stride` apart, batch items `batch_stride` apart) into a
// head-major [B, H, total, D] buffer at token t0. In: f32 or bf16; out: the
// compute type.
template <class In, class Out>
__global__ void pack_kv_kernel(const In* __restrict__ src, int64_t stride, int64_t batch_stride,
                               int64_t heads, int64_t n, int64_t d, Out* __restrict__ dst,
                               int64_t total_tokens, int64_t t0, int64_t count) {
  XDIT_GRID_LOOP(i, count) {  // over B · H · n · D
    const int64_t e = i % d, tok = (i / d) % n, h = (i / (d * n)) % heads, b = i / (d * n * heads);
    store(dst + ((b * heads + h) * total_tokens + t0 + tok) * d + e,
          to_float(src[b * batch_stride + tok * stride + h * d + e]));
  }
}

template <class In>
__global__ void unpack_kv_kernel(const In* __restrict__ src, int64_t heads, int64_t total_tokens,
                                 int64_t d, float* __restrict__ dst, int64_t count) {
  XDIT_GRID_LOOP(i, count) {  // over B · total · H · D, dst token-major
    const int64_t e = i % d, h = (i / d) % heads, tok = (i / (d * heads)) % total_tokens,
                  b = i / (d * heads * total_tokens);
    dst[i] = to_float(src[((b * heads + h) * total_tokens + tok) * d + e]);
  }
}

// FLUX's 2×2 packing, one thread per value (see kernels.h).
__global__ void pack_2x2_kernel(const float* __restrict__ src, float* __restrict__ dst, int64_t C,
                                int64_t H, int64_t W, int64_t r0, int64_t r1, bool pack,
                                int64_t total) {
  const int64_t gw = W / 2, n = (r1 - r0) * gw, rows = 2 * (r1 - r0);
  const int64_t plain_h = pack ? H : rows, plain_y0 = pack ? 2 * r0 : 0;
  XDIT_GRID_LOOP(i, total) {  // over B · C · rows · W
    const int64_t x = i % W, y = (i / W) % rows, ch = (i / (W * rows)) % C, b = i / (W * rows * C);
    const int64_t plain = ((b * C + ch) * plain_h + plain_y0 + y) * W + x;
    const int64_t packed = (b * n + (y / 2) * gw + x / 2) * 4 * C + ch * 4 + (y % 2) * 2 + x % 2;
    dst[pack ? packed : plain] = src[pack ? plain : packed];
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

__global__ void affine_kernel(const float* x, float* y, int64_t n, float divisor, float shift) {
  XDIT_GRID_LOOP(i, n) y[i] = x[i] / divisor + shift;
}

// The loop's steps round each product and sum as the CPU ops write them
// (no contraction into FMAs: __fmul_rn / __fadd_rn).
__global__ void guidance_combine_kernel(const float* u, const float* c, float g, float* noise,
                                        int64_t n) {
  XDIT_GRID_LOOP(i, n) noise[i] = __fadd_rn(u[i], __fmul_rn(g, __fsub_rn(c[i], u[i])));
}

__global__ void guidance_add_kernel(float* noise, const float* c, const float* skip, float scale,
                                    int64_t n) {
  XDIT_GRID_LOOP(i, n) noise[i] = __fadd_rn(noise[i], __fmul_rn(__fsub_rn(c[i], skip[i]), scale));
}

__global__ void flow_euler_kernel(const float* mo, float* sample, float dt, int64_t n) {
  XDIT_GRID_LOOP(i, n) sample[i] = __fadd_rn(sample[i], __fmul_rn(dt, mo[i]));
}

__global__ void dpm_solver_kernel(const float* mo, float* sample, float* cur, const float* prev,
                                  int64_t n, int64_t hist_stride, DpmUpdate k, int64_t total) {
  XDIT_GRID_LOOP(i, total) {
    const int64_t it = i / n, j = i % n, h = it * hist_stride + j;
    const float x = sample[i];
    const float m0 = __fadd_rn(__fmul_rn(k.xa, x), __fmul_rn(k.xb, mo[i]));
    cur[h] = m0;
    float out = __fadd_rn(__fmul_rn(k.cs, x), __fmul_rn(k.c0, m0));
    if (k.second_order)
      out = __fadd_rn(out, __fmul_rn(k.c1, __fmul_rn(k.inv_r0, __fsub_rn(m0, prev[h]))));
    sample[i] = out;
  }
}

__global__ void nchw_rows_to_nhwc_kernel(const float* __restrict__ x, int64_t C, int64_t H,
                                         int64_t W, int64_t r0, int64_t rows, float* __restrict__ y,
                                         int64_t total) {
  XDIT_GRID_LOOP(i, total) {  // over y: B · rows · W · C
    const int64_t ch = i % C, p = (i / C) % (rows * W), b = i / (C * rows * W);
    y[i] = x[((b * C + ch) * H + r0) * W + p];
  }
}

__global__ void nhwc_to_nchw_kernel(const float* __restrict__ x, int64_t hw, int64_t C,
                                    float* __restrict__ y, int64_t total) {
  XDIT_GRID_LOOP(i, total) {  // over y: B · C · hw
    const int64_t p = i % hw, k = (i / hw) % C, b = i / (hw * C);
    y[i] = x[(b * hw + p) * C + k];
  }
}

// A grid's y extent for `rows` rows (at most 65535: kernels loop over the rest).
unsigned grid_rows(int64_t rows) {
  return static_cast<unsigned>(rows < 65535 ? rows : 65535);
}

unsigned elementwise_blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

// One block of kThreads per row.
#define XDIT_LAUNCH_ROWS(kernel, rows, s, ...)                            \
  do {                                                                    \
    if ((rows) == 0) return;                                              \
    kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(__VA_ARGS__); \
    xdit::cuda::check_launch(#kernel);                                    \
  } while (0)

#define XDIT_LAUNCH(kernel, n, s, ...)                              \
  do {                                                              \
    if ((n) == 0) return;                                           \
    kernel<<<elementwise_blocks(n), kThreads, 0, s>>>(__VA_ARGS__); \
    xdit::cuda::check_launch(#kernel);                              \
  } while (0)

}  // namespace

void layer_norm(const float* x, float* y, int64_t rows, int64_t dim, float eps, const float* gamma,
                const float* beta, Stream s) {
  XDIT_LAUNCH_ROWS(layer_norm_kernel, rows, s, x, y, dim, eps, gamma, beta);
}

void rms_norm(const float* x, float* y, int64_t rows, int64_t dim, float eps, const float* weight,
              Stream s) {
  XDIT_LAUNCH_ROWS(rms_norm_kernel, rows, s, x, y, dim, eps, weight);
}

void gelu_tanh(const float* x, float* y, int64_t n, Stream s) {
  XDIT_LAUNCH(gelu_tanh_kernel, n, s, x, y, n);
}

void silu(const float* x, float* y, int64_t n, Stream s) {
  XDIT_LAUNCH(silu_kernel, n, s, x, y, n);
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

void gelu_tanh_gate(const float* x, float* y, int64_t rows, int64_t n, Stream s) {
  XDIT_LAUNCH(gelu_gate_kernel, rows * n, s, x, y, n, rows * n);
}

void gelu_erf(const float* x, float* y, int64_t n, Stream s) {
  XDIT_LAUNCH(gelu_erf_kernel, n, s, x, y, n);
}

void relu(const float* x, float* y, int64_t n, Stream s) {
  XDIT_LAUNCH(relu_kernel, n, s, x, y, n);
}

void quick_gelu(const float* x, float* y, int64_t n, Stream s) {
  XDIT_LAUNCH(quick_gelu_kernel, n, s, x, y, n);
}

void to_bf16_rows(const float* x, int64_t stride, int64_t rows, int64_t n, uint16_t* y, Stream s) {
  XDIT_LAUNCH(to_bf16_rows_kernel, rows * n, s, x, stride, n, y, rows * n);
}

void to_bf16_array(const float* x, uint16_t* y, int64_t n, Stream s) {
  to_bf16_rows(x, n, 1, n, y, s);
}

void from_bf16_rows(const uint16_t* x, int64_t rows, int64_t n, float* y, int64_t stride,
                    Stream s) {
  XDIT_LAUNCH(from_bf16_rows_kernel, rows * n, s, x, n, y, stride, rows * n);
}

void add_rows(const float* x, int64_t x_stride, const float* b, int64_t b_stride, float* y,
              int64_t y_stride, int64_t rows, int64_t n, Stream s) {
  XDIT_LAUNCH(add_rows_kernel, rows * n, s, x, x_stride, b, b_stride, y, y_stride, n, rows * n);
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

namespace {

template <class Out>
void upsample2x(const float* x, Out* y, int64_t batch, int64_t h, int64_t w, int64_t channels,
                int64_t y_batch_stride, Stream s) {
  if (y_batch_stride == 0) y_batch_stride = 4 * h * w * channels;
  const int64_t n = batch * 4 * h * w * channels;
  XDIT_LAUNCH(upsample2x_kernel<Out>, n, s, x, y, h, w, channels, y_batch_stride, n);
}
}  // namespace

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

void upsample_nearest2x_nhwc(const float* x, float* y, int64_t batch, int64_t h, int64_t w,
                             int64_t channels, int64_t y_batch_stride, Stream s) {
  upsample2x(x, y, batch, h, w, channels, y_batch_stride, s);
}

void upsample_nearest2x_nhwc_bf16(const float* x, uint16_t* y, int64_t batch, int64_t h, int64_t w,
                                  int64_t channels, int64_t y_batch_stride, Stream s) {
  upsample2x(x, y, batch, h, w, channels, y_batch_stride, s);
}

void patchify(const float* latent, int64_t batch, int64_t channels, int64_t height, int64_t width,
              int64_t p, float* cols, Stream s) {
  const int64_t n = batch * channels * (height / p) * p * (width / p) * p;
  XDIT_LAUNCH(patchify_kernel, n, s, latent, channels, height, width, p, cols, n);
}

void unpatchify(const float* x, int64_t batch, int64_t channels, int64_t h, int64_t w, int64_t p,
                float* out, Stream s) {
  const int64_t n = batch * channels * h * p * w * p;
  XDIT_LAUNCH(unpatchify_kernel, n, s, x, channels, h, w, p, out, n);
}

void pack_kv(const void* src, bool src_bf16, int64_t stride, int64_t batch, int64_t heads,
             int64_t n, int64_t head_dim, bool dst_bf16, void* dst, int64_t total, int64_t t,
             int64_t batch_stride, Stream s) {
  if (batch_stride == 0) batch_stride = n * stride;
  const int64_t count = batch * heads * n * head_dim;
  const auto launch = [&](const auto* in) {
    if (dst_bf16)
      XDIT_LAUNCH(pack_kv_kernel, count, s, in, stride, batch_stride, heads, n, head_dim,
                  static_cast<uint16_t*>(dst), total, t, count);
    else
      XDIT_LAUNCH(pack_kv_kernel, count, s, in, stride, batch_stride, heads, n, head_dim,
                  static_cast<float*>(dst), total, t, count);
  };
  if (src_bf16)
    launch(static_cast<const uint16_t*>(src));
  else
    launch(static_cast<const float*>(src));
}

void unpack_kv(const void* src, int64_t batch, int64_t heads, int64_t total, int64_t head_dim,
               bool bf16, float* dst, Stream s) {
  const int64_t count = batch * total * heads * head_dim;
  if (bf16)
    XDIT_LAUNCH(unpack_kv_kernel, count, s, static_cast<const uint16_t*>(src), heads, total,
                head_dim, dst, count);
  else
    XDIT_LAUNCH(unpack_kv_kernel, count, s, static_cast<const float*>(src), heads, total, head_dim,
                dst, count);
}

void pack_2x2(const float* src, float* dst, int64_t batch, int64_t channels, int64_t height,
              int64_t width, int64_t r0, int64_t r1, bool pack, Stream s) {
  const int64_t n = batch * channels * 2 * (r1 - r0) * width;
  XDIT_LAUNCH(pack_2x2_kernel, n, s, src, dst, channels, height, width, r0, r1, pack, n);
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

void affine_div(const float* x, float* y, int64_t n, float divisor, float shift, Stream s) {
  XDIT_LAUNCH(affine_kernel, n, s, x, y, n, divisor, shift);
}

void guidance_combine(const float* u, const float* c, float g, float* noise, int64_t n, Stream s) {
  XDIT_LAUNCH(guidance_combine_kernel, n, s, u, c, g, noise, n);
}

void guidance_add(float* noise, const float* c, const float* skip, float scale, int64_t n,
                  Stream s) {
  XDIT_LAUNCH(guidance_add_kernel, n, s, noise, c, skip, scale, n);
}

void flow_euler_step(const float* mo, float* sample, float dt, int64_t n, Stream s) {
  XDIT_LAUNCH(flow_euler_kernel, n, s, mo, sample, dt, n);
}

void dpm_solver_step(const float* mo, float* sample, float* cur, const float* prev, int64_t items,
                     int64_t n, int64_t hist_stride, const DpmUpdate& k, Stream s) {
  const int64_t total = items * n;
  XDIT_LAUNCH(dpm_solver_kernel, total, s, mo, sample, cur, prev, n, hist_stride, k, total);
}

void nchw_rows_to_nhwc(const float* x, int64_t batch, int64_t channels, int64_t height,
                       int64_t width, int64_t r0, int64_t rows, float* y, Stream s) {
  const int64_t n = batch * rows * width * channels;
  XDIT_LAUNCH(nchw_rows_to_nhwc_kernel, n, s, x, channels, height, width, r0, rows, y, n);
}

void nhwc_to_nchw(const float* x, int64_t batch, int64_t hw, int64_t channels, float* y, Stream s) {
  const int64_t n = batch * hw * channels;
  XDIT_LAUNCH(nhwc_to_nchw_kernel, n, s, x, hw, channels, y, n);
}

}  // namespace xdit::kernels::cuda
