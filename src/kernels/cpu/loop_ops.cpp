// The denoising loop's elementwise ops (kernels.h): guidance, the
// schedulers' updates. A file of their own, free of oneDNN, so that the
// config fuzzers (tests/fuzz/libfuzzer), which link the schedulers, can link
// them too. Built without FMA contraction (no -march), as the CUDA versions
// round each product and sum.
#include <cmath>
#include <cstdint>

#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace xdit::kernels {

namespace {
constexpr int64_t kGrain = 1 << 14;  // values before OpenMP splits a loop
}  // namespace

void guidance_combine(const float* u, const float* c, float g, float* noise, int64_t n) {
  XDIT_CUDA_OP(guidance_combine(u, c, g, noise, n));
#pragma omp parallel for if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) noise[i] = u[i] + g * (c[i] - u[i]);
}

void guidance_add(float* noise, const float* c, const float* skip, float scale, int64_t n) {
  XDIT_CUDA_OP(guidance_add(noise, c, skip, scale, n));
#pragma omp parallel for if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) noise[i] += (c[i] - skip[i]) * scale;
}

void cfg_renorm_patches(const float* cond, float* noise, int64_t C, int64_t rows, int64_t W,
                        int64_t p) {
  XDIT_CUDA_OP(cfg_renorm_patches(cond, noise, C, rows, W, p));
  const int64_t pr = rows / p, pc = W / p, plane = rows * W;
#pragma omp parallel for collapse(2) if (pr * pc * C * p * p > kGrain)
  for (int64_t i = 0; i < pr; ++i)
    for (int64_t j = 0; j < pc; ++j) {
      double cs = 0, ns = 0;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t y = 0; y < p; ++y)
          for (int64_t x = 0; x < p; ++x) {
            const int64_t at = c * plane + (i * p + y) * W + j * p + x;
            cs += static_cast<double>(cond[at]) * cond[at];
            ns += static_cast<double>(noise[at]) * noise[at];
          }
      const float scale = static_cast<float>(std::sqrt(cs)) / static_cast<float>(std::sqrt(ns));
      for (int64_t c = 0; c < C; ++c)
        for (int64_t y = 0; y < p; ++y)
          for (int64_t x = 0; x < p; ++x) noise[c * plane + (i * p + y) * W + j * p + x] *= scale;
    }
}

void residual_change(const float* out, const float* in, const float* prev, float* r, int64_t n,
                     double sums[2]) {
  double diff = 0, ref = 0;
#pragma omp parallel for if (n > kGrain) reduction(+ : diff, ref)
  for (int64_t i = 0; i < n; ++i) {
    r[i] = in != nullptr ? out[i] - in[i] : out[i];
    if (prev != nullptr) {
      diff += std::fabs(static_cast<double>(r[i]) - prev[i]);
      ref += std::fabs(static_cast<double>(prev[i]));
    }
  }
  sums[0] += diff;
  sums[1] += ref;
}

void taylor_update(const float* y, float* f, int64_t have, float delta, int64_t n) {
  XDIT_CUDA_OP(taylor_update(y, f, have, delta, n));
#pragma omp parallel for if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) {
    float v = y[i];
    for (int64_t j = 0; j < have; ++j) {
      const float next = (v - f[j * n + i]) / delta;
      f[j * n + i] = v;
      v = next;
    }
    f[have * n + i] = v;
  }
}

void taylor_predict(const float* f, const float* coeff, int64_t orders, float* out, int64_t n) {
  XDIT_CUDA_OP(taylor_predict(f, coeff, orders, out, n));
#pragma omp parallel for if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) {
    float v = 0;
    for (int64_t k = 0; k < orders; ++k) {
      const float term = f[k * n + i] * coeff[k];  // rounded before the add, as torch does
      v = v + term;
    }
    out[i] = v;
  }
}

void flow_euler_step(const float* model_output, float* sample, float dt, int64_t n) {
  XDIT_CUDA_OP(flow_euler_step(model_output, sample, dt, n));
#pragma omp parallel for if (n > kGrain)
  for (int64_t i = 0; i < n; ++i) {
    const float d = dt * model_output[i];  // rounded before the add, as torch does
    sample[i] = sample[i] + d;
  }
}

void dpm_solver_step(const float* model_output, float* sample, float* cur, const float* prev,
                     int64_t items, int64_t n, int64_t hist_stride, const DpmUpdate& k) {
  XDIT_CUDA_OP(dpm_solver_step(model_output, sample, cur, prev, items, n, hist_stride, k));
#pragma omp parallel for if (items * n > kGrain)
  for (int64_t it = 0; it < items; ++it) {
    const float* mo = model_output + it * n;
    float* x = sample + it * n;
    float* c = cur + it * hist_stride;
    const float* p = prev + it * hist_stride;
    for (int64_t j = 0; j < n; ++j) {
      const float m0 = k.xa * x[j] + k.xb * mo[j];
      c[j] = m0;
      float out = k.cs * x[j] + k.c0 * m0;
      if (k.second_order) out += k.c1 * (k.inv_r0 * (m0 - p[j]));
      x[j] = out;
    }
  }
}

namespace {

// One value of unipc_step (kernels.h); the CUDA kernel computes the same.
float unipc_value(float x, float mo, float m0, float* m1, float* last, const UniPcUpdate& k) {
  const float x0 = k.xa * x + k.xb * mo;
  float xc = x;
  if (k.correct) {
    float corr = k.cl * (x0 - m0);
    if (k.c_second) corr = k.cr * ((*m1 - m0) * k.c_inv_r) + corr;
    xc = (k.ca * *last + k.cb * m0) - k.cg * corr;
  }
  float out = k.pa * xc + k.pb * x0;
  if (k.p_second) out = out - k.pg * (0.5f * ((m0 - x0) * k.p_inv_r));
  *last = xc;
  *m1 = x0;
  return out;
}

}  // namespace

void unipc_step(const float* model_output, float* sample, const float* cur, float* prev,
                float* last, int64_t items, int64_t n, int64_t hist_stride, const UniPcUpdate& k) {
  XDIT_CUDA_OP(unipc_step(model_output, sample, cur, prev, last, items, n, hist_stride, k));
#pragma omp parallel for if (items * n > kGrain)
  for (int64_t it = 0; it < items; ++it) {
    const float* mo = model_output + it * n;
    float* x = sample + it * n;
    const float* c = cur + it * hist_stride;
    float* p = prev + it * hist_stride;
    float* l = last + it * hist_stride;
    for (int64_t j = 0; j < n; ++j) x[j] = unipc_value(x[j], mo[j], c[j], p + j, l + j, k);
  }
}

}  // namespace xdit::kernels
