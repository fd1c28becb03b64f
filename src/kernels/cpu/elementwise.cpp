// The elementwise and row-wise ops of the op set (kernels.h) on the CPU:
// activations (GELU, SiLU, ReLU), softmax rows, bf16 conversion, row sums and
// affine maps. Loops are written for the compiler to vectorise;
// XDIT_ISA_CLONES (kernels/cpu/isa.h) builds AVX-512 / AVX2 / baseline
// versions and picks one by cpu_isa(), so the binary runs on any x86-64. The
// hottest have AVX-512 intrinsic versions besides.
// GCC 12's masked AVX-512 intrinsics start from deliberately undefined
// vectors, which -Wmaybe-uninitialized reports inside the headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace xdit::kernels {

namespace {

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

XDIT_ISA_BODY void silu_range_body(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + cpu::exp_approx(-x[i]));
}
XDIT_ISA_CLONES(void, silu_range, (const float* x, float* y, int64_t n), (x, y, n))

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

void gelu_tanh_gate(const float* x, float* y, int64_t rows, int64_t n) {
  XDIT_CUDA_OP(gelu_tanh_gate(x, y, rows, n));
#pragma omp parallel for if (rows * n > kGrain)
  for (int64_t r = 0; r < rows; ++r) gelu_gate_row(x + r * 2 * n, y + r * n, n);
}

void silu_gate(const float* x, float* y, int64_t rows, int64_t n) {
  XDIT_CUDA_OP(silu_gate(x, y, rows, n));
#pragma omp parallel for if (rows * n > kGrain)
  for (int64_t r = 0; r < rows; ++r) {
    float* out = y + r * n;
    silu_range(x + r * 2 * n, out, n);
    const float* up = x + r * 2 * n + n;
    for (int64_t j = 0; j < n; ++j) out[j] *= up[j];
  }
}

void gelu_tanh(const float* x, float* y, int64_t n) {
  XDIT_CUDA_OP(gelu_tanh(x, y, n));
  parallel_chunks(n, [&](int64_t b, int64_t e) { gelu_tanh_range(x + b, y + b, e - b); });
}

void silu(const float* x, float* y, int64_t n) {
  XDIT_CUDA_OP(silu(x, y, n));
  parallel_chunks(n, [&](int64_t b, int64_t e) { silu_range(x + b, y + b, e - b); });
}

// libm's tanh: a few gates per block and batch item.
void tanh(const float* x, float* y, int64_t n) {
  XDIT_CUDA_OP(tanh(x, y, n));
  parallel_chunks(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = std::tanh(x[i]);
  });
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

void add_rows(const float* x, int64_t x_stride, const float* b, int64_t b_stride, float* y,
              int64_t y_stride, int64_t rows, int64_t n) {
  XDIT_CUDA_OP(add_rows(x, x_stride, b, b_stride, y, y_stride, rows, n));
#pragma omp parallel for if (rows * n > kGrain)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) y[r * y_stride + j] = x[r * x_stride + j] + b[r * b_stride + j];
}

void affine_div(const float* x, float* y, int64_t n, float divisor, float shift) {
  XDIT_CUDA_OP(affine_div(x, y, n, divisor, shift));
  parallel_chunks(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = x[i] / divisor + shift;
  });
}

}  // namespace xdit::kernels
