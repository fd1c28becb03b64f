// The normalisations of the op set (kernels.h) on the CPU: LayerNorm (plain,
// modulated, fused with the gated residual), RMSNorm and the q/k RMSNorm +
// rotary embedding, GroupNorm (+ SiLU). Loops are written for the compiler
// to vectorise; XDIT_ISA_CLONES (kernels/cpu/isa.h) builds AVX-512 / AVX2 /
// baseline versions and picks one by cpu_isa(), so the binary runs on any
// x86-64. The hottest have AVX-512 intrinsic versions besides.
// GCC 12's masked AVX-512 intrinsics start from deliberately undefined
// vectors, which -Wmaybe-uninitialized reports inside the headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cmath>
#include <type_traits>
#include <vector>

#include "core/aligned.h"
#include "core/dtype.h"
#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/convert.h"
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

XDIT_ISA_BODY void rms_norm_row_body(const float* x, float* y, int64_t dim, float eps,
                                     const float* w) {
  const double sq = sum_f64(x, dim, [](float v) { return static_cast<double>(v) * v; });
  const float r = static_cast<float>(1.0 / std::sqrt(sq / dim + eps));
  for (int64_t i = 0; i < dim; ++i) y[i] = w[i] * (x[i] * r);
}
XDIT_ISA_CLONES(void, rms_norm_row,
                (const float* x, float* y, int64_t dim, float eps, const float* w),
                (x, y, dim, eps, w))

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
// The interleaved rotary embedding of `width` values of whole heads of hd:
// (x0, x1) → (x0·cos − x1·sin, x1·cos + x0·sin) with each head's table row
// cs/sn [hd], each product rounded before the sum as torch computes it.
void rotate_pairs(float* x, int64_t width, int64_t hd, const float* cs, const float* sn) {
  for (int64_t i = 0; i < width; i += 2) {
    float* p = x + i;
    const int64_t j = i % hd;
    const float a = p[0] * cs[j], b0 = -p[1] * sn[j];
    const float c = p[1] * cs[j + 1], d = p[0] * sn[j + 1];
    p[0] = a + b0;
    p[1] = c + d;
  }
}
}  // namespace

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
        rotate_pairs(x, D, hd, cs, sn);
      }
    }
}

void row_sum_squares(const float* x, int64_t rows, int64_t stride, int64_t width, float* sumsq) {
  XDIT_CUDA_OP(row_sum_squares(x, rows, stride, width, sumsq));
#pragma omp parallel for if (rows * width > kGrain)
  for (int64_t r = 0; r < rows; ++r)
    sumsq[r] = static_cast<float>(
        sum_f64(x + r * stride, width, [](float v) { return static_cast<double>(v) * v; }));
}

void rms_scale_rope(float* x, int64_t rows, int64_t stride, int64_t width, const float* sumsq,
                    int64_t total_width, float eps, const float* w, int64_t seq, int64_t hd,
                    const float* cos, const float* sin) {
  XDIT_CUDA_OP(
      rms_scale_rope(x, rows, stride, width, sumsq, total_width, eps, w, seq, hd, cos, sin));
#pragma omp parallel for if (rows * width > kGrain)
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * stride;
    const float inv = static_cast<float>(
        1.0 / std::sqrt(static_cast<double>(sumsq[r]) / static_cast<double>(total_width) + eps));
    for (int64_t i = 0; i < width; ++i) row[i] = w[i] * (row[i] * inv);
    if (cos == nullptr) continue;
    const float* cs = cos + (r % seq) * hd;
    const float* sn = sin + (r % seq) * hd;
    rotate_pairs(row, width, hd, cs, sn);
  }
}

}  // namespace xdit::kernels
