// Elementwise and row-wise CPU kernels. Loops are written for the compiler to
// vectorise; XDIT_ISA_CLONES (kernels/cpu/isa.h) builds AVX-512 / AVX2 /
// baseline versions and picks one by cpu_isa(), so the binary runs on any
// x86-64. The hottest have AVX-512 intrinsic versions besides.
// GCC 12's masked AVX-512 intrinsics start from deliberately undefined
// vectors, which -Wmaybe-uninitialized reports inside the headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/aligned.h"
#include "core/dtype.h"
#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace xdit::kernels {

namespace {

// Σ f(x[i]) in double over eight independent accumulators: one running sum
// is a chain of dependent adds the compiler may not reorder (4 cycles an
// element); eight lanes vectorise and keep double accuracy.
template <class F>
inline double sum_f64(const float* x, int64_t n, F f) {
  double acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += f(x[i + j]);
  double s = 0.0;
  for (; i < n; ++i) s += f(x[i]);
  for (double a : acc) s += a;
  return s;
}

// Mean and 1/std of one row: two passes in f32 with double-accumulated sums,
// which matches torch's f32 LayerNorm to rounding for the row widths DiTs use.
XDIT_ISA_BODY void layer_norm_stats_body(const float* x, int64_t dim, float eps, float* mean_out,
                                         float* rstd_out) {
  const float mean =
      static_cast<float>(sum_f64(x, dim, [](float v) { return static_cast<double>(v); }) / dim);
  const double sq = sum_f64(x, dim, [mean](float v) {
    const float d = v - mean;
    return static_cast<double>(d) * d;
  });
  *mean_out = mean;
  *rstd_out = static_cast<float>(1.0 / std::sqrt(sq / dim + eps));
}
XDIT_ISA_CLONES(void, layer_norm_stats,
                (const float* x, int64_t dim, float eps, float* mean_out, float* rstd_out),
                (x, dim, eps, mean_out, rstd_out))

XDIT_ISA_BODY void layer_norm_row_body(const float* x, float* y, int64_t dim, float eps,
                                       const float* g, const float* b) {
  float mean, rstd;
  layer_norm_stats(x, dim, eps, &mean, &rstd);
  if (g != nullptr && b != nullptr) {
    for (int64_t i = 0; i < dim; ++i) y[i] = (x[i] - mean) * rstd * g[i] + b[i];
  } else if (g != nullptr) {
    for (int64_t i = 0; i < dim; ++i) y[i] = (x[i] - mean) * rstd * g[i];
  } else {
    for (int64_t i = 0; i < dim; ++i) y[i] = (x[i] - mean) * rstd;
  }
}
XDIT_ISA_CLONES(void, layer_norm_row,
                (const float* x, float* y, int64_t dim, float eps, const float* g, const float* b),
                (x, y, dim, eps, g, b))

// LayerNorm without affine, then ·(1 + scale) + shift, in one pass.
XDIT_ISA_BODY void layer_norm_modulate_row_body(const float* x, float* y, int64_t dim, float eps,
                                                const float* shift, const float* scale) {
  float mean, rstd;
  layer_norm_stats(x, dim, eps, &mean, &rstd);
  for (int64_t i = 0; i < dim; ++i) y[i] = (x[i] - mean) * rstd * (1.0f + scale[i]) + shift[i];
}
XDIT_ISA_CLONES(void, layer_norm_modulate_row,
                (const float* x, float* y, int64_t dim, float eps, const float* shift,
                 const float* scale),
                (x, y, dim, eps, shift, scale))

// The same with a bf16 row out: intrinsics, because the bf16 store's rounding
// keeps the compiler from vectorising (as in affine_silu below).
__attribute__((target("avx512f,avx512bf16,avx512vl,avx512bw"))) void
layer_norm_modulate_row_bf16_avx512(const float* x, uint16_t* y, int64_t dim, float mean,
                                    float rstd, const float* shift, const float* scale) {
  const __m512 vm = _mm512_set1_ps(mean), vr = _mm512_set1_ps(rstd), one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < dim; i += 16) {
    const __mmask16 k = cpu::tail_mask(dim - i);
    const __m512 nrm = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm), vr);
    const __m512 r = _mm512_fmadd_ps(nrm, _mm512_add_ps(one, _mm512_maskz_loadu_ps(k, scale + i)),
                                     _mm512_maskz_loadu_ps(k, shift + i));
    cpu::store_bf16_16(y + i, r, k);
  }
}

void layer_norm_modulate_row(const float* x, uint16_t* y, int64_t dim, float eps,
                             const float* shift, const float* scale) {
  float mean, rstd;
  layer_norm_stats(x, dim, eps, &mean, &rstd);
  if (cpu::has_avx512_bf16())
    return layer_norm_modulate_row_bf16_avx512(x, y, dim, mean, rstd, shift, scale);
  for (int64_t i = 0; i < dim; ++i)
    y[i] = f32_to_bf16((x[i] - mean) * rstd * (1.0f + scale[i]) + shift[i]);
}

inline float gelu_tanh_one(float v) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi)
  const float u = kC * (v + 0.044715f * v * v * v);
  // tanh(u) = 1 - 2/(exp(2u)+1), written so it vectorises and saturates.
  const float t = 1.0f - 2.0f / (cpu::exp_approx(2.0f * u) + 1.0f);
  return 0.5f * v * (1.0f + t);
}

XDIT_ISA_BODY void gelu_tanh_generic_body(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = gelu_tanh_one(x[i]);
}
XDIT_ISA_CLONES(void, gelu_tanh_generic, (const float* x, float* y, int64_t n), (x, y, n))

XDIT_ISA_BODY void gelu_gate_generic_body(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = gelu_tanh_one(x[i]) * x[n + i];
}
XDIT_ISA_CLONES(void, gelu_gate_generic, (const float* x, float* y, int64_t n), (x, y, n))

// The same two with intrinsics (exp2_16: vreduceps and vscalefps, fewer
// µops than exp_approx): when they were written the loops above stayed
// scalar, and the gate was 7 % of the T5-XXL encoder.
__attribute__((target("avx512f,avx512dq"))) void gelu_tanh_avx512(const float* x, float* y,
                                                                  int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = cpu::tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, k, cpu::gelu_tanh_16(_mm512_maskz_loadu_ps(k, x + i)));
  }
}

__attribute__((target("avx512f,avx512dq"))) void gelu_gate_avx512(const float* x, float* y,
                                                                  int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = cpu::tail_mask(n - i);
    const __m512 g = cpu::gelu_tanh_16(_mm512_maskz_loadu_ps(k, x + i));
    _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(g, _mm512_maskz_loadu_ps(k, x + n + i)));
  }
}

void gelu_tanh_range(const float* x, float* y, int64_t n) {
  if (cpu::has_avx512_dq())
    gelu_tanh_avx512(x, y, n);
  else
    gelu_tanh_generic(x, y, n);
}

void gelu_gate_row(const float* x, float* y, int64_t n) {
  if (cpu::has_avx512_dq())
    gelu_gate_avx512(x, y, n);
  else
    gelu_gate_generic(x, y, n);
}

XDIT_ISA_BODY void rms_norm_row_body(const float* x, float* y, int64_t dim, float eps,
                                     const float* w) {
  const double sq = sum_f64(x, dim, [](float v) { return static_cast<double>(v) * v; });
  const float r = static_cast<float>(1.0 / std::sqrt(sq / dim + eps));
  for (int64_t i = 0; i < dim; ++i) y[i] = w[i] * (x[i] * r);
}
XDIT_ISA_CLONES(void, rms_norm_row,
                (const float* x, float* y, int64_t dim, float eps, const float* w),
                (x, y, dim, eps, w))

XDIT_ISA_BODY void silu_range_body(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + cpu::exp_approx(-x[i]));
}
XDIT_ISA_CLONES(void, silu_range, (const float* x, float* y, int64_t n), (x, y, n))

XDIT_ISA_BODY void modulate_row_body(const float* x, float* y, int64_t dim, const float* shift,
                                     const float* scale) {
  for (int64_t i = 0; i < dim; ++i) y[i] = x[i] * (1.0f + scale[i]) + shift[i];
}
XDIT_ISA_CLONES(void, modulate_row,
                (const float* x, float* y, int64_t dim, const float* shift, const float* scale),
                (x, y, dim, shift, scale))

XDIT_ISA_BODY void gated_add_row_body(float* h, const float* y, int64_t dim, const float* gate) {
  if (gate == nullptr) {
    for (int64_t i = 0; i < dim; ++i) h[i] += y[i];
  } else {
    for (int64_t i = 0; i < dim; ++i) h[i] += gate[i] * y[i];
  }
}
XDIT_ISA_CLONES(void, gated_add_row, (float* h, const float* y, int64_t dim, const float* gate),
                (h, y, dim, gate))

// s[c] += x[c], s2[c] += x[c]² in double, for one pixel's channels.
XDIT_ISA_BODY void channel_moments_body(const float* x, int64_t n, double* s, double* s2) {
  for (int64_t c = 0; c < n; ++c) {
    const double v = x[c];
    s[c] += v;
    s2[c] += v * v;
  }
}
XDIT_ISA_CLONES(void, channel_moments, (const float* x, int64_t n, double* s, double* s2),
                (x, n, s, s2))

// y = x·a + c (per channel), then x·sigmoid(x) when `silu`; f32 or bf16 out.
template <class Out>
inline void affine_silu(const float* x, Out* y, int64_t n, const float* a, const float* c,
                        bool silu) {
  const auto store = [](float v) {
    if constexpr (std::is_same_v<Out, uint16_t>)
      return f32_to_bf16(v);
    else
      return v;
  };
  if (silu) {
    for (int64_t i = 0; i < n; ++i) {
      const float r = x[i] * a[i] + c[i];
      y[i] = store(r / (1.0f + cpu::exp_approx(-r)));
    }
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = store(x[i] * a[i] + c[i]);
  }
}
// The same with intrinsics: the bf16 store's rounding and exp_approx's clamp
// (then fminf / fmaxf) kept the compiler from vectorising the loops above,
// and GroupNorm + SiLU was a quarter of the VAE decoder.
template <bool kBf16>
__attribute__((target("avx512f,avx512dq,avx512bf16,avx512vl,avx512bw"))) void affine_silu_avx512(
    const float* x, void* y, int64_t n, const float* a, const float* c, bool silu) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = cpu::tail_mask(n - i);
    __m512 r = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, x + i), _mm512_maskz_loadu_ps(k, a + i),
                               _mm512_maskz_loadu_ps(k, c + i));
    if (silu) r = cpu::silu_16(r);
    if constexpr (kBf16) {
      cpu::store_bf16_16(static_cast<uint16_t*>(y) + i, r, k);
    } else {
      _mm512_mask_storeu_ps(static_cast<float*>(y) + i, k, r);
    }
  }
}

XDIT_ISA_BODY void affine_silu_row_generic_body(const float* x, float* y, int64_t n, const float* a,
                                                const float* c, bool silu) {
  affine_silu(x, y, n, a, c, silu);
}
XDIT_ISA_CLONES(void, affine_silu_row_generic,
                (const float* x, float* y, int64_t n, const float* a, const float* c, bool silu),
                (x, y, n, a, c, silu))
XDIT_ISA_BODY void affine_silu_row_generic_body(const float* x, uint16_t* y, int64_t n,
                                                const float* a, const float* c, bool silu) {
  affine_silu(x, y, n, a, c, silu);
}
XDIT_ISA_CLONES(void, affine_silu_row_generic,
                (const float* x, uint16_t* y, int64_t n, const float* a, const float* c, bool silu),
                (x, y, n, a, c, silu))

template <class Out>
void affine_silu_row(const float* x, Out* y, int64_t n, const float* a, const float* c, bool silu) {
  if (cpu::has_avx512_bf16())
    affine_silu_avx512<std::is_same_v<Out, uint16_t>>(x, y, n, a, c, silu);
  else
    affine_silu_row_generic(x, y, n, a, c, silu);
}

constexpr int64_t kGrain = 1 << 14;  // elements per OpenMP chunk for elementwise ops

template <class F>
void parallel_chunks(int64_t n, F f) {
  const int64_t chunks = (n + kGrain - 1) / kGrain;
#pragma omp parallel for if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = c * kGrain;
    f(b, std::min(n, b + kGrain));
  }
}

}  // namespace

void layer_norm(const float* x, float* y, int64_t rows, int64_t dim, float eps, const float* gamma,
                const float* beta) {
  XDIT_CUDA_OP(layer_norm(x, y, rows, dim, eps, gamma, beta));
#pragma omp parallel for if (rows * dim > kGrain)
  for (int64_t r = 0; r < rows; ++r)
    layer_norm_row(x + r * dim, y + r * dim, dim, eps, gamma, beta);
}

void rms_norm(const float* x, float* y, int64_t rows, int64_t dim, float eps, const float* weight) {
  XDIT_CUDA_OP(rms_norm(x, y, rows, dim, eps, weight));
#pragma omp parallel for if (rows * dim > kGrain)
  for (int64_t r = 0; r < rows; ++r) rms_norm_row(x + r * dim, y + r * dim, dim, eps, weight);
}

void gelu_tanh_gate(const float* x, float* y, int64_t rows, int64_t n) {
  XDIT_CUDA_OP(gelu_tanh_gate(x, y, rows, n));
#pragma omp parallel for if (rows * n > kGrain)
  for (int64_t r = 0; r < rows; ++r) gelu_gate_row(x + r * 2 * n, y + r * n, n);
}

void gelu_tanh(const float* x, float* y, int64_t n) {
  XDIT_CUDA_OP(gelu_tanh(x, y, n));
  parallel_chunks(n, [&](int64_t b, int64_t e) { gelu_tanh_range(x + b, y + b, e - b); });
}

void silu(const float* x, float* y, int64_t n) {
  XDIT_CUDA_OP(silu(x, y, n));
  parallel_chunks(n, [&](int64_t b, int64_t e) { silu_range(x + b, y + b, e - b); });
}

// libm's erf: CLIP-G's MLP is the only user, a few million values per prompt.
void gelu_erf(const float* x, float* y, int64_t n) {
  XDIT_CUDA_OP(gelu_erf(x, y, n));
  parallel_chunks(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678f));
  });
}

void to_bf16_array(const float* x, uint16_t* y, int64_t n) {
  XDIT_CUDA_OP(to_bf16_array(x, y, n));
  parallel_chunks(n, [&](int64_t b, int64_t e) {
    cpu::f32_to_bf16_array(x + b, y + b, static_cast<size_t>(e - b));
  });
}

void to_bf16_rows(const float* x, int64_t stride, int64_t rows, int64_t n, uint16_t* y) {
  XDIT_CUDA_OP(to_bf16_rows(x, stride, rows, n, y));
#pragma omp parallel for if (rows * n > kGrain)
  for (int64_t r = 0; r < rows; ++r)
    cpu::f32_to_bf16_array(x + r * stride, y + r * n, static_cast<size_t>(n));
}

void relu(const float* x, float* y, int64_t n) {
  XDIT_CUDA_OP(relu(x, y, n));
  parallel_chunks(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = std::max(x[i], 0.0f);
  });
}

void quick_gelu(const float* x, float* y, int64_t n) {
  XDIT_CUDA_OP(quick_gelu(x, y, n));
  parallel_chunks(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = x[i] / (1.0f + std::exp(-1.702f * x[i]));
  });
}

void softmax_rows(float* x, int64_t rows, int64_t cols) {
  XDIT_CUDA_OP(softmax_rows(x, rows, cols));
#pragma omp parallel for if (rows * cols > kGrain)
  for (int64_t r = 0; r < rows; ++r) {
    float* p = x + r * cols;
    float m = -INFINITY;
    for (int64_t i = 0; i < cols; ++i) m = std::max(m, p[i]);
    double s = 0.0;
    for (int64_t i = 0; i < cols; ++i) {
      p[i] = std::exp(p[i] - m);
      s += p[i];
    }
    const float inv = static_cast<float>(1.0 / s);
    for (int64_t i = 0; i < cols; ++i) p[i] *= inv;
  }
}

namespace {
template <class Out>
void layer_norm_modulate_rows(const float* x, Out* y, int64_t batch, int64_t tokens, int64_t dim,
                              float eps, const float* shift, const float* scale,
                              int64_t mod_stride) {
#pragma omp parallel for collapse(2) if (batch * tokens * dim > kGrain)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t o = (b * tokens + t) * dim;
      layer_norm_modulate_row(x + o, y + o, dim, eps, shift + b * mod_stride,
                              scale + b * mod_stride);
    }
}
}  // namespace

void layer_norm_modulate(const float* x, float* y, int64_t batch, int64_t tokens, int64_t dim,
                         float eps, const float* shift, const float* scale, int64_t mod_stride) {
  XDIT_CUDA_OP(layer_norm_modulate(x, y, batch, tokens, dim, eps, shift, scale, mod_stride));
  layer_norm_modulate_rows(x, y, batch, tokens, dim, eps, shift, scale, mod_stride);
}

void layer_norm_modulate(const float* x, uint16_t* y, int64_t batch, int64_t tokens, int64_t dim,
                         float eps, const float* shift, const float* scale, int64_t mod_stride) {
  XDIT_CUDA_OP(layer_norm_modulate(x, y, batch, tokens, dim, eps, shift, scale, mod_stride));
  layer_norm_modulate_rows(x, y, batch, tokens, dim, eps, shift, scale, mod_stride);
}

void modulate(const float* x, float* y, int64_t batch, int64_t tokens, int64_t dim,
              const float* shift, const float* scale, int64_t mod_stride) {
  XDIT_CUDA_OP(modulate(x, y, batch, tokens, dim, shift, scale, mod_stride));
#pragma omp parallel for collapse(2) if (batch * tokens * dim > kGrain)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t o = (b * tokens + t) * dim;
      modulate_row(x + o, y + o, dim, shift + b * mod_stride, scale + b * mod_stride);
    }
}

namespace {
// h += gate·y row by row, then after(row offset, batch item) on the row
// while it is in cache.
template <class After>
void gated_residual_rows(float* h, const float* y, int64_t batch, int64_t tokens, int64_t dim,
                         const float* gate, int64_t gate_stride, After after) {
#pragma omp parallel for collapse(2) if (batch * tokens * dim > kGrain)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t o = (b * tokens + t) * dim;
      gated_add_row(h + o, y + o, dim, gate == nullptr ? nullptr : gate + b * gate_stride);
      after(o, b);
    }
}

template <class Out>
void residual_layer_norm_modulate_rows(float* h, const float* y, int64_t batch, int64_t tokens,
                                       int64_t dim, const float* gate, float eps,
                                       const float* shift, const float* scale, int64_t mod_stride,
                                       Out* out) {
  if (on_cuda()) {  // two launches there: no fused CUDA kernel yet
    gated_residual_add(h, y, batch, tokens, dim, gate, mod_stride);
    return layer_norm_modulate(h, out, batch, tokens, dim, eps, shift, scale, mod_stride);
  }
  gated_residual_rows(h, y, batch, tokens, dim, gate, mod_stride, [&](int64_t o, int64_t b) {
    layer_norm_modulate_row(h + o, out + o, dim, eps, shift + b * mod_stride,
                            scale + b * mod_stride);
  });
}
}  // namespace

void gated_residual_add(float* h, const float* y, int64_t batch, int64_t tokens, int64_t dim,
                        const float* gate, int64_t gate_stride) {
  XDIT_CUDA_OP(gated_residual_add(h, y, batch, tokens, dim, gate, gate_stride));
  gated_residual_rows(h, y, batch, tokens, dim, gate, gate_stride, [](int64_t, int64_t) {});
}

void gated_residual_add(float* h, const float* y, int64_t batch, int64_t tokens, int64_t dim,
                        const float* gate, int64_t gate_stride, uint16_t* h_bf16) {
  if (on_cuda()) {  // two launches there: no fused CUDA kernel yet
    gated_residual_add(h, y, batch, tokens, dim, gate, gate_stride);
    return to_bf16_array(h, h_bf16, batch * tokens * dim);
  }
  gated_residual_rows(h, y, batch, tokens, dim, gate, gate_stride, [&](int64_t o, int64_t) {
    cpu::f32_to_bf16_array(h + o, h_bf16 + o, static_cast<size_t>(dim));
  });
}

void residual_layer_norm_modulate(float* h, const float* y, int64_t batch, int64_t tokens,
                                  int64_t dim, const float* gate, float eps, const float* shift,
                                  const float* scale, int64_t mod_stride, float* out) {
  residual_layer_norm_modulate_rows(h, y, batch, tokens, dim, gate, eps, shift, scale, mod_stride,
                                    out);
}

void residual_layer_norm_modulate(float* h, const float* y, int64_t batch, int64_t tokens,
                                  int64_t dim, const float* gate, float eps, const float* shift,
                                  const float* scale, int64_t mod_stride, uint16_t* out) {
  residual_layer_norm_modulate_rows(h, y, batch, tokens, dim, gate, eps, shift, scale, mod_stride,
                                    out);
}

void group_norm_moments_nhwc(const float* x, int64_t batch, int64_t hw, int64_t channels,
                             int64_t groups, double* moments) {
  XDIT_CUDA_OP(group_norm_moments_nhwc(x, batch, hw, channels, groups, moments));
  const int64_t cg = channels / groups;
  // Per-channel Σx and Σx² in double, each thread over its own pixels
  // (vectorised across channels), then summed per group.
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<double> s(static_cast<size_t>(channels)), s2(s.size());
#pragma omp parallel
    {
      AlignedVector<double> ps(static_cast<size_t>(channels)), ps2(ps.size());
#pragma omp for nowait
      for (int64_t p = 0; p < hw; ++p)
        channel_moments(x + (b * hw + p) * channels, channels, ps.data(), ps2.data());
#pragma omp critical(xdit_group_norm)
      for (int64_t c = 0; c < channels; ++c) {
        s[static_cast<size_t>(c)] += ps[static_cast<size_t>(c)];
        s2[static_cast<size_t>(c)] += ps2[static_cast<size_t>(c)];
      }
    }
    for (int64_t g = 0; g < groups; ++g) {
      double gs = 0, gs2 = 0;
      for (int64_t c = g * cg; c < (g + 1) * cg; ++c)
        gs += s[static_cast<size_t>(c)], gs2 += s2[static_cast<size_t>(c)];
      moments[2 * (b * groups + g)] = gs;
      moments[2 * (b * groups + g) + 1] = gs2;
    }
  }
}

namespace {
template <class Out>
void group_norm_apply_to(const float* x, Out* y, int64_t batch, int64_t hw, int64_t channels,
                         int64_t groups, float eps, const float* gamma, const float* beta,
                         bool silu_after, const double* moments, double count,
                         int64_t y_batch_stride) {
  const int64_t cg = channels / groups;
  if (y_batch_stride == 0) y_batch_stride = hw * channels;
  // y = x·a + c per channel, a = rstd·γ and c = β − mean·rstd·γ, then SiLU.
  AlignedVector<float> a(static_cast<size_t>(batch * channels)), c(a.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t g = 0; g < groups; ++g) {
      const double m = moments[2 * (b * groups + g)] / count;
      const double var = std::max(moments[2 * (b * groups + g) + 1] / count - m * m, 0.0);
      const double rstd = 1.0 / std::sqrt(var + eps);
      for (int64_t ch = g * cg; ch < (g + 1) * cg; ++ch) {
        const double sa = rstd * gamma[ch];
        a[static_cast<size_t>(b * channels + ch)] = static_cast<float>(sa);
        c[static_cast<size_t>(b * channels + ch)] = static_cast<float>(beta[ch] - m * sa);
      }
    }
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t p = 0; p < hw; ++p)
      affine_silu_row(x + (b * hw + p) * channels, y + b * y_batch_stride + p * channels, channels,
                      a.data() + b * channels, c.data() + b * channels, silu_after);
}

template <class Out>
void group_norm_nhwc_to(const float* x, Out* y, int64_t batch, int64_t hw, int64_t channels,
                        int64_t groups, float eps, const float* gamma, const float* beta,
                        bool silu_after) {
  std::vector<double> moments(static_cast<size_t>(2 * batch * groups));
  group_norm_moments_nhwc(x, batch, hw, channels, groups, moments.data());
  group_norm_apply_to(x, y, batch, hw, channels, groups, eps, gamma, beta, silu_after,
                      moments.data(), static_cast<double>(hw * (channels / groups)), 0);
}
}  // namespace

void group_norm_nhwc(const float* x, float* y, int64_t batch, int64_t hw, int64_t channels,
                     int64_t groups, float eps, const float* gamma, const float* beta,
                     bool silu_after) {
  XDIT_CUDA_OP(
      group_norm_nhwc(x, y, false, batch, hw, channels, groups, eps, gamma, beta, silu_after));
  group_norm_nhwc_to(x, y, batch, hw, channels, groups, eps, gamma, beta, silu_after);
}

void group_norm_nhwc_bf16(const float* x, uint16_t* y, int64_t batch, int64_t hw, int64_t channels,
                          int64_t groups, float eps, const float* gamma, const float* beta,
                          bool silu_after) {
  XDIT_CUDA_OP(
      group_norm_nhwc(x, y, true, batch, hw, channels, groups, eps, gamma, beta, silu_after));
  group_norm_nhwc_to(x, y, batch, hw, channels, groups, eps, gamma, beta, silu_after);
}

void group_norm_apply_nhwc(const float* x, float* y, int64_t batch, int64_t hw, int64_t channels,
                           int64_t groups, float eps, const float* gamma, const float* beta,
                           bool silu_after, const double* moments, double count,
                           int64_t y_batch_stride) {
  XDIT_CUDA_OP(group_norm_apply_nhwc(x, y, batch, hw, channels, groups, eps, gamma, beta,
                                     silu_after, moments, count, y_batch_stride));
  group_norm_apply_to(x, y, batch, hw, channels, groups, eps, gamma, beta, silu_after, moments,
                      count, y_batch_stride);
}

void group_norm_apply_nhwc_bf16(const float* x, uint16_t* y, int64_t batch, int64_t hw,
                                int64_t channels, int64_t groups, float eps, const float* gamma,
                                const float* beta, bool silu_after, const double* moments,
                                double count, int64_t y_batch_stride) {
  XDIT_CUDA_OP(group_norm_apply_nhwc_bf16(x, y, batch, hw, channels, groups, eps, gamma, beta,
                                          silu_after, moments, count, y_batch_stride));
  group_norm_apply_to(x, y, batch, hw, channels, groups, eps, gamma, beta, silu_after, moments,
                      count, y_batch_stride);
}

namespace {
// Each source pixel is written once (copied or converted) into the even
// column, then copied to the odd one.
template <class Out>
void upsample_nearest2x_to(const float* x, Out* y, int64_t batch, int64_t h, int64_t w,
                           int64_t channels, int64_t y_batch_stride) {
  if (y_batch_stride == 0) y_batch_stride = 4 * h * w * channels;
  const auto n = static_cast<size_t>(channels);
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < 2 * h; ++r)
      for (int64_t c = 0; c < w; ++c) {
        Out* dst = y + b * y_batch_stride + (r * 2 * w + 2 * c) * channels;
        const float* src = x + ((b * h + r / 2) * w + c) * channels;
        if constexpr (std::is_same_v<Out, uint16_t>)
          cpu::f32_to_bf16_array(src, dst, n);
        else
          std::memcpy(dst, src, n * sizeof(Out));
        std::memcpy(dst + channels, dst, n * sizeof(Out));
      }
}
}  // namespace

void upsample_nearest2x_nhwc(const float* x, float* y, int64_t batch, int64_t h, int64_t w,
                             int64_t channels, int64_t y_batch_stride) {
  XDIT_CUDA_OP(upsample_nearest2x_nhwc(x, y, batch, h, w, channels, y_batch_stride));
  upsample_nearest2x_to(x, y, batch, h, w, channels, y_batch_stride);
}

void upsample_nearest2x_nhwc_bf16(const float* x, uint16_t* y, int64_t batch, int64_t h, int64_t w,
                                  int64_t channels, int64_t y_batch_stride) {
  XDIT_CUDA_OP(upsample_nearest2x_nhwc_bf16(x, y, batch, h, w, channels, y_batch_stride));
  upsample_nearest2x_to(x, y, batch, h, w, channels, y_batch_stride);
}

void patchify(const float* latent, int64_t batch, int64_t channels, int64_t height, int64_t width,
              int64_t p, float* cols) {
  XDIT_CUDA_OP(patchify(latent, batch, channels, height, width, p, cols));
  const int64_t gh = height / p, gw = width / p, k = channels * p * p;
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < gh; ++r)
      for (int64_t c = 0; c < gw; ++c) {
        float* dst = cols + ((b * gh + r) * gw + c) * k;
        for (int64_t ch = 0; ch < channels; ++ch)
          for (int64_t i = 0; i < p; ++i)
            for (int64_t j = 0; j < p; ++j)
              *dst++ = latent[((b * channels + ch) * height + r * p + i) * width + c * p + j];
      }
}

void unpatchify(const float* x, int64_t batch, int64_t channels, int64_t h, int64_t w, int64_t p,
                float* out) {
  XDIT_CUDA_OP(unpatchify(x, batch, channels, h, w, p, out));
  const int64_t H = h * p, W = w * p;
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t ch = 0; ch < channels; ++ch)
      for (int64_t y = 0; y < H; ++y)
        for (int64_t xx = 0; xx < W; ++xx) {
          const int64_t r = y / p, i = y % p, c = xx / p, j = xx % p;
          out[((b * channels + ch) * H + y) * W + xx] =
              x[((b * h + r) * w + c) * (p * p * channels) + (i * p + j) * channels + ch];
        }
}

namespace {
// Small tables (a few KB a step) are computed on the host and, when `out` is
// device memory, copied there.
template <class F>
void host_table(float* out, int64_t n, F compute) {
#ifdef XDIT_HAVE_CUDA
  if (on_cuda()) {
    std::vector<float> h(static_cast<size_t>(n));
    compute(h.data());
    xdit::cuda::copy(out, h.data(), h.size() * 4);
    return;
  }
#endif
  compute(out);
}
}  // namespace

void timestep_embedding(const float* t, int64_t n, int64_t dim, bool flip_sin_to_cos,
                        float downscale_freq_shift, float* out_table) {
  host_table(out_table, n * dim, [&](float* out) {
    // diffusers embeddings.get_timestep_embedding: exponent in f32, exp in f32,
    // t·freq in f32, then sin/cos.
    const int64_t half = dim / 2;
    std::vector<float> freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      const float e = -std::log(10000.0f) * static_cast<float>(i) /
                      (static_cast<float>(half) - downscale_freq_shift);
      freq[static_cast<size_t>(i)] = std::exp(e);
    }
    for (int64_t r = 0; r < n; ++r) {
      float* o = out + r * dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = t[r] * freq[static_cast<size_t>(i)];
        o[flip_sin_to_cos ? half + i : i] = std::sin(a);
        o[flip_sin_to_cos ? i : half + i] = std::cos(a);
      }
      if (dim % 2 == 1) o[dim - 1] = 0.0f;  // diffusers pads odd widths with a zero
    }
  });
}

void sincos_pos_embed_2d(int64_t dim, int64_t gh, int64_t gw, float base_size,
                         float interpolation_scale, float* out_table) {
  host_table(out_table, gh * gw * dim, [&](float* out) {
    // diffusers get_2d_sincos_pos_embed: grid coordinates in f32
    // (arange / (n / base_size) / interpolation_scale), frequencies and products
    // in f64, result cast to f32.
    const int64_t quarter = dim / 4;
    std::vector<double> omega(static_cast<size_t>(quarter));
    for (int64_t i = 0; i < quarter; ++i)
      omega[static_cast<size_t>(i)] =
          1.0 / std::pow(10000.0, static_cast<double>(i) / (static_cast<double>(dim) / 4.0));
    const float hs = static_cast<float>(static_cast<double>(gh) / base_size);
    const float ws = static_cast<float>(static_cast<double>(gw) / base_size);
    for (int64_t r = 0; r < gh; ++r)
      for (int64_t c = 0; c < gw; ++c) {
        const float ch = static_cast<float>(r) / hs / interpolation_scale;
        const float cw = static_cast<float>(c) / ws / interpolation_scale;
        float* o = out + (r * gw + c) * dim;
        for (int64_t i = 0; i < quarter; ++i) {
          const double a = cw * omega[static_cast<size_t>(i)];
          const double b = ch * omega[static_cast<size_t>(i)];
          o[i] = static_cast<float>(std::sin(a));
          o[quarter + i] = static_cast<float>(std::cos(a));
          o[2 * quarter + i] = static_cast<float>(std::sin(b));
          o[3 * quarter + i] = static_cast<float>(std::cos(b));
        }
      }
  });
}

void add_rows(const float* x, int64_t x_stride, const float* b, int64_t b_stride, float* y,
              int64_t y_stride, int64_t rows, int64_t n) {
  XDIT_CUDA_OP(add_rows(x, x_stride, b, b_stride, y, y_stride, rows, n));
#pragma omp parallel for if (rows * n > kGrain)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) y[r * y_stride + j] = x[r * x_stride + j] + b[r * b_stride + j];
}

void copy_from_host(void* dst, const void* host, size_t bytes) {
#ifdef XDIT_HAVE_CUDA
  if (on_cuda()) return xdit::cuda::copy(dst, host, bytes);
#endif
  std::memcpy(dst, host, bytes);
}

void affine_div(const float* x, float* y, int64_t n, float divisor, float shift) {
  XDIT_CUDA_OP(affine_div(x, y, n, divisor, shift));
  parallel_chunks(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = x[i] / divisor + shift;
  });
}

void nchw_rows_to_nhwc(const float* x, int64_t B, int64_t C, int64_t H, int64_t W, int64_t r0,
                       int64_t rows, float* y) {
  XDIT_CUDA_OP(nchw_rows_to_nhwc(x, B, C, H, W, r0, rows, y));
#pragma omp parallel for collapse(2) if (B * C * rows * W > kGrain)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t p = 0; p < rows * W; ++p)
        y[(b * rows * W + p) * C + ch] = x[((b * C + ch) * H + r0) * W + p];
}

void nhwc_to_nchw(const float* x, int64_t B, int64_t hw, int64_t C, float* y) {
  XDIT_CUDA_OP(nhwc_to_nchw(x, B, hw, C, y));
#pragma omp parallel for collapse(2) if (B * hw * C > kGrain)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < hw; ++p)
      for (int64_t k = 0; k < C; ++k) y[(b * C + k) * hw + p] = x[(b * hw + p) * C + k];
}

void zero_bytes(void* dst, size_t bytes) {
#ifdef XDIT_HAVE_CUDA
  if (on_cuda()) return xdit::cuda::fill_bytes(dst, 0, bytes);
#endif
  std::memset(dst, 0, bytes);
}

void pack_2x2(const float* src, float* dst, int64_t B, int64_t C, int64_t H, int64_t W, int64_t r0,
              int64_t r1, bool pack) {
  XDIT_CUDA_OP(pack_2x2(src, dst, B, C, H, W, r0, r1, pack));
  const int64_t gw = W / 2, n = (r1 - r0) * gw, y0 = 2 * r0, rows = 2 * (r1 - r0);
  const int64_t plain_h = pack ? H : rows, plain_y0 = pack ? y0 : 0;
#pragma omp parallel for collapse(2) if (B * C * rows * W > (1 << 16))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t y = 0; y < rows; ++y)
        for (int64_t x = 0; x < W; ++x) {
          const int64_t plain = ((b * C + ch) * plain_h + plain_y0 + y) * W + x;
          const int64_t packed =
              (b * n + (y / 2) * gw + x / 2) * 4 * C + ch * 4 + (y % 2) * 2 + x % 2;
          dst[pack ? packed : plain] = src[pack ? plain : packed];
        }
}

void qk_norm_rope(float* qkv, int64_t batch, int64_t seq, int64_t row_begin, int64_t rows,
                  int64_t H, int64_t hd, float eps, const float* wq, const float* wk,
                  const float* cos, const float* sin) {
  XDIT_CUDA_OP(qk_norm_rope(qkv, batch, seq, row_begin, rows, H, hd, eps, wq, wk, cos, sin));
  const int64_t D = H * hd;
#pragma omp parallel for collapse(2) if (batch * rows * D > kGrain)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = row_begin; s < row_begin + rows; ++s) {
      float* row = qkv + (b * seq + s) * 3 * D;
      const float* cs = cos + s * hd;
      const float* sn = sin + s * hd;
      for (int part = 0; part < 2; ++part) {  // q, then k
        float* x = row + part * D;
        for (int64_t h = 0; h < H; ++h)
          rms_norm_row(x + h * hd, x + h * hd, hd, eps, part == 0 ? wq : wk);
        if (cos == nullptr) continue;  // RMSNorm only (SD3)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < hd; i += 2) {
            float* p = x + h * hd + i;
            const float a = p[0] * cs[i], b0 = -p[1] * sn[i];
            const float c = p[1] * cs[i + 1], d = p[0] * sn[i + 1];
            p[0] = a + b0;
            p[1] = c + d;
          }
      }
    }
}

void copy_row_bytes(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, int64_t rows,
                    size_t row_bytes) {
  if (rows <= 0 || row_bytes == 0) return;
  // One row's pitches are unused (they may be 0); cudaMemcpy2D wants them
  // at least a row.
  if (rows == 1) dst_pitch = src_pitch = row_bytes;
#ifdef XDIT_HAVE_CUDA
  if (on_cuda())
    return xdit::cuda::copy_rows(dst, dst_pitch, src, src_pitch, row_bytes,
                                 static_cast<size_t>(rows));
#endif
#pragma omp parallel for if (static_cast <size_t>(rows) * row_bytes > kGrain * 4)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char*>(dst) + static_cast<size_t>(r) * dst_pitch,
                static_cast<const char*>(src) + static_cast<size_t>(r) * src_pitch, row_bytes);
}

void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
               int64_t n) {
  copy_row_bytes(dst, static_cast<size_t>(dst_stride) * 4, src, static_cast<size_t>(src_stride) * 4,
                 rows, static_cast<size_t>(n) * 4);
}

namespace {

// The CPU's level, and with `capped` no higher than oneDNN's effective ISA.
CpuIsa isa_level(bool capped) {
  __builtin_cpu_init();
  // oneDNN's ISAs are bit sets, each holding the ones below it.
  const auto dnnl_has =
      [capped, isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa())](dnnl::cpu_isa level) {
        return !capped || (isa & static_cast<unsigned>(level)) == static_cast<unsigned>(level);
      };
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        dnnl_has(dnnl::cpu_isa::avx2)))
    return CpuIsa::kBaseline;
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        dnnl_has(dnnl::cpu_isa::avx512_core)))
    return CpuIsa::kAvx2;
  if (!(__builtin_cpu_supports("avx512bf16") && dnnl_has(dnnl::cpu_isa::avx512_core_bf16)))
    return CpuIsa::kAvx512;
  // AMX as oneDNN sees it (it also asks the OS for the tile state); the
  // CPU's own flag only for the uncapped level, which is for messages.
  const bool amx =
      capped ? dnnl_has(dnnl::cpu_isa::avx512_core_amx) : __builtin_cpu_supports("amx-bf16") != 0;
  return amx ? CpuIsa::kAmx : CpuIsa::kAvx512Bf16;
}

}  // namespace

CpuIsa detect_cpu_isa() {
  return isa_level(true);
}

CpuIsa cpu_hardware_isa() {
  static const CpuIsa isa = isa_level(false);
  return isa;
}

const char* cpu_isa_level_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAmx:
      return "AMX";
    case CpuIsa::kAvx512Bf16:
      return "AVX-512-bf16";
    case CpuIsa::kAvx512:
      return "AVX-512";
    case CpuIsa::kAvx2:
      return "AVX2";
    case CpuIsa::kBaseline:
      break;
  }
  return "x86-64 baseline";
}

bool cpu_has_bf16() {
  return cpu_isa() >= CpuIsa::kAvx512Bf16;
}

bool cpu_has_amx() {
  return cpu_isa() == CpuIsa::kAmx;
}

const char* cpu_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::sse41:
      return "sse41";
    default:
      return "baseline";
  }
}

}  // namespace xdit::kernels
