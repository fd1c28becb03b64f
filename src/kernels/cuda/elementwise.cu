// The elementwise ops of the CUDA op set (ops.h): activations, bf16
// conversion, row sums, affine maps and the denoising loop's updates.
#include <cuda_runtime.h>

#include <cmath>

#include "core/error.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace xdit::kernels::cuda {

namespace {

__global__ void gelu_tanh_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  XDIT_GRID_LOOP(i, n) y[i] = gelu_tanh_f(x[i]);
}

__global__ void silu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  XDIT_GRID_LOOP(i, n) y[i] = x[i] / (1.f + expf(-x[i]));
}

__global__ void tanh_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  XDIT_GRID_LOOP(i, n) y[i] = tanhf(x[i]);
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

__global__ void silu_gate_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n,
                                 int64_t total) {
  XDIT_GRID_LOOP(i, total) {
    const int64_t r = i / n, j = i % n;
    const float g = x[r * 2 * n + j];
    y[i] = g / (1.f + expf(-g)) * x[r * 2 * n + n + j];
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

__global__ void affine_kernel(const float* x, float* y, int64_t n, float divisor, float shift) {
  XDIT_GRID_LOOP(i, n) y[i] = x[i] / divisor + shift;
}

// The loop's steps round each product and sum as the CPU ops write them
// (no contraction into FMAs: __fmul_rn / __fadd_rn).
__global__ void guidance_combine_kernel(const float* u, const float* c, float g, float* noise,
                                        int64_t n) {
  XDIT_GRID_LOOP(i, n) noise[i] = __fadd_rn(u[i], __fmul_rn(g, __fsub_rn(c[i], u[i])));
}

// One thread per token (a p x p patch over every channel).
__global__ void cfg_renorm_kernel(const float* __restrict__ cond, float* __restrict__ noise,
                                  int64_t C, int64_t rows, int64_t W, int64_t p, int64_t tokens) {
  XDIT_GRID_LOOP(t, tokens) {
    const int64_t pc = W / p, i = t / pc, j = t % pc, plane = rows * W;
    double cs = 0, ns = 0;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < p; ++y)
        for (int64_t x = 0; x < p; ++x) {
          const int64_t at = c * plane + (i * p + y) * W + j * p + x;
          cs += static_cast<double>(cond[at]) * cond[at];
          ns += static_cast<double>(noise[at]) * noise[at];
        }
    const float scale = static_cast<float>(sqrt(cs)) / static_cast<float>(sqrt(ns));
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < p; ++y)
        for (int64_t x = 0; x < p; ++x) noise[c * plane + (i * p + y) * W + j * p + x] *= scale;
  }
}

__global__ void guidance_add_kernel(float* noise, const float* c, const float* skip, float scale,
                                    int64_t n) {
  XDIT_GRID_LOOP(i, n) noise[i] = __fadd_rn(noise[i], __fmul_rn(__fsub_rn(c[i], skip[i]), scale));
}

__global__ void taylor_update_kernel(const float* y, float* f, int64_t have, float delta,
                                     int64_t n) {
  XDIT_GRID_LOOP(i, n) {
    float v = y[i];
    for (int64_t j = 0; j < have; ++j) {
      const float next = __fdiv_rn(__fsub_rn(v, f[j * n + i]), delta);
      f[j * n + i] = v;
      v = next;
    }
    f[have * n + i] = v;
  }
}

struct TaylorCoeff {
  float c[4];
};

__global__ void taylor_predict_kernel(const float* f, TaylorCoeff coeff, int64_t orders, float* out,
                                      int64_t n) {
  XDIT_GRID_LOOP(i, n) {
    float v = 0;
    for (int64_t k = 0; k < orders; ++k) v = __fadd_rn(v, __fmul_rn(f[k * n + i], coeff.c[k]));
    out[i] = v;
  }
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

// unipc_step per value, each product and sum rounded as the CPU loop's.
__global__ void unipc_kernel(const float* mo, float* sample, const float* cur, float* prev,
                             float* last, int64_t n, int64_t hist_stride, UniPcUpdate k,
                             int64_t total) {
  XDIT_GRID_LOOP(i, total) {
    const int64_t it = i / n, j = i % n, h = it * hist_stride + j;
    const float x = sample[i], m0 = cur[h];
    const float x0 = __fadd_rn(__fmul_rn(k.xa, x), __fmul_rn(k.xb, mo[i]));
    float xc = x;
    if (k.correct) {
      float corr = __fmul_rn(k.cl, __fsub_rn(x0, m0));
      if (k.c_second)
        corr = __fadd_rn(__fmul_rn(k.cr, __fmul_rn(__fsub_rn(prev[h], m0), k.c_inv_r)), corr);
      xc = __fsub_rn(__fadd_rn(__fmul_rn(k.ca, last[h]), __fmul_rn(k.cb, m0)),
                     __fmul_rn(k.cg, corr));
    }
    float out = __fadd_rn(__fmul_rn(k.pa, xc), __fmul_rn(k.pb, x0));
    if (k.p_second)
      out = __fsub_rn(out, __fmul_rn(k.pg, __fmul_rn(0.5f, __fmul_rn(__fsub_rn(m0, x0), k.p_inv_r))));
    last[h] = xc;
    prev[h] = x0;
    sample[i] = out;
  }
}

}  // namespace

void gelu_tanh(const float* x, float* y, int64_t n, Stream s) {
  XDIT_LAUNCH(gelu_tanh_kernel, n, s, x, y, n);
}

void silu(const float* x, float* y, int64_t n, Stream s) {
  XDIT_LAUNCH(silu_kernel, n, s, x, y, n);
}

void gelu_tanh_gate(const float* x, float* y, int64_t rows, int64_t n, Stream s) {
  XDIT_LAUNCH(gelu_gate_kernel, rows * n, s, x, y, n, rows * n);
}

void silu_gate(const float* x, float* y, int64_t rows, int64_t n, Stream s) {
  XDIT_LAUNCH(silu_gate_kernel, rows * n, s, x, y, n, rows * n);
}

void tanh(const float* x, float* y, int64_t n, Stream s) {
  XDIT_LAUNCH(tanh_kernel, n, s, x, y, n);
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

void cfg_renorm_patches(const float* cond, float* noise, int64_t C, int64_t rows, int64_t W,
                        int64_t p, Stream s) {
  const int64_t tokens = (rows / p) * (W / p);
  XDIT_LAUNCH(cfg_renorm_kernel, tokens, s, cond, noise, C, rows, W, p, tokens);
}

void taylor_update(const float* y, float* f, int64_t have, float delta, int64_t n, Stream s) {
  XDIT_LAUNCH(taylor_update_kernel, n, s, y, f, have, delta, n);
}

void taylor_predict(const float* f, const float* coeff, int64_t orders, float* out, int64_t n,
                    Stream s) {
  XDIT_CHECK(orders >= 1 && orders <= 4, "taylor_predict: 1 to 4 orders, got ", orders);
  TaylorCoeff c{};
  for (int64_t k = 0; k < orders; ++k) c.c[k] = coeff[k];
  XDIT_LAUNCH(taylor_predict_kernel, n, s, f, c, orders, out, n);
}

void flow_euler_step(const float* mo, float* sample, float dt, int64_t n, Stream s) {
  XDIT_LAUNCH(flow_euler_kernel, n, s, mo, sample, dt, n);
}

void dpm_solver_step(const float* mo, float* sample, float* cur, const float* prev, int64_t items,
                     int64_t n, int64_t hist_stride, const DpmUpdate& k, Stream s) {
  const int64_t total = items * n;
  XDIT_LAUNCH(dpm_solver_kernel, total, s, mo, sample, cur, prev, n, hist_stride, k, total);
}

void unipc_step(const float* mo, float* sample, const float* cur, float* prev, float* last,
                int64_t items, int64_t n, int64_t hist_stride, const UniPcUpdate& k, Stream s) {
  const int64_t total = items * n;
  XDIT_LAUNCH(unipc_kernel, total, s, mo, sample, cur, prev, last, n, hist_stride, k, total);
}

}  // namespace xdit::kernels::cuda
