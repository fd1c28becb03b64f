#include "kernels/cpu/softmax_row.h"

// GCC 12's _mm512_reduce_* and masked intrinsics start from deliberately
// undefined vectors, which -Wuninitialized reports inside the headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/vec_math.h"

namespace xdit::kernels::cpu {

namespace {

constexpr float kLog2e = 1.44269504088896341f;

__attribute__((target("avx512f"))) float row_max_avx512(const float* s, int64_t n) {
  __m512 vm = _mm512_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(s + i));
  if (i < n) {
    const __mmask16 k = tail_mask(n - i);
    vm = _mm512_mask_max_ps(vm, k, vm, _mm512_maskz_loadu_ps(k, s + i));
  }
  return _mm512_reduce_max_ps(vm);
}

// exp(s·scale − m) = 2^(s·c − m·log2 e) with c = scale·log2 e: one FMA.
__attribute__((target("avx512f,avx512dq"))) float exp_row_f32_avx512(const float* s, int64_t n,
                                                                     int64_t n_pad, float scale,
                                                                     float m, float* pf) {
  const __m512 c = _mm512_set1_ps(scale * kLog2e), mc = _mm512_set1_ps(m * kLog2e);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    const __m512 e = exp2_16<5>(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, s + i), c, mc));
    acc = _mm512_mask_add_ps(acc, k, acc, e);
    _mm512_mask_storeu_ps(pf + i, k, e);
  }
  std::fill(pf + n, pf + n_pad, 0.0f);
  return _mm512_reduce_add_ps(acc);
}

// The same with bf16 output, 32 values per conversion.
__attribute__((target("avx512f,avx512dq,avx512bf16,avx512vl,avx512bw"))) float exp_row_bf16_avx512(
    const float* s, int64_t n, int64_t n_pad, float scale, float m, uint16_t* pb) {
  const __m512 c = _mm512_set1_ps(scale * kLog2e), mc = _mm512_set1_ps(m * kLog2e);
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 e0 = exp2_16<3>(_mm512_fmsub_ps(_mm512_loadu_ps(s + i), c, mc));
    const __m512 e1 = exp2_16<3>(_mm512_fmsub_ps(_mm512_loadu_ps(s + i + 16), c, mc));
    acc = _mm512_add_ps(acc, _mm512_add_ps(e0, e1));
    const __m512bh b = _mm512_cvtne2ps_pbh(e1, e0);
    _mm512_storeu_si512(pb + i, reinterpret_cast<const __m512i&>(b));
  }
  for (; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    const __m512 e = exp2_16<3>(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, s + i), c, mc));
    acc = _mm512_mask_add_ps(acc, k, acc, e);
    store_bf16_16(pb + i, e, k);
  }
  std::fill(pb + n, pb + n_pad, static_cast<uint16_t>(0));
  return _mm512_reduce_add_ps(acc);
}

__attribute__((target("avx512f,avx512dq,avx512bf16,avx512vl,avx512bw"))) void exp_tile_avx512(
    const float* s, int64_t rows, int64_t valid, float scale, const float* ref, uint16_t* p,
    int64_t ld_p, float* sums) {
  const __m512 c = _mm512_set1_ps(scale * kLog2e);
  const __mmask16 k0 = tail_mask(valid), k1 = valid > 16 ? tail_mask(valid - 16) : 0;
  for (int64_t r = 0; r < rows; ++r, s += 32, p += ld_p, sums += 16) {
    const __m512 mc = _mm512_set1_ps(ref[r] * kLog2e);
    __m512 e0 = exp2_16<3>(_mm512_fmsub_ps(_mm512_load_ps(s), c, mc));
    __m512 e1 = exp2_16<3>(_mm512_fmsub_ps(_mm512_load_ps(s + 16), c, mc));
    if (valid < 32) {  // the padded keys of a ragged last block
      e0 = _mm512_maskz_mov_ps(k0, e0);
      e1 = _mm512_maskz_mov_ps(k1, e1);
    }
    _mm512_storeu_ps(sums, _mm512_add_ps(_mm512_loadu_ps(sums), _mm512_add_ps(e0, e1)));
    const __m512bh b = _mm512_cvtne2ps_pbh(e1, e0);
    _mm512_storeu_si512(p, reinterpret_cast<const __m512i&>(b));
  }
}

__attribute__((target("avx512f"))) void scale_add_row_avx512(float* o, const float* t, int64_t n,
                                                             float a) {
  const __m512 va = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(
        o + i, k,
        _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, o + i), va, _mm512_maskz_loadu_ps(k, t + i)));
  }
}

const bool kAvx512 = __builtin_cpu_supports("avx512f");

}  // namespace

float row_max(const float* s, int64_t n) {
  if (kAvx512) return row_max_avx512(s, n);
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, s[i]);
  return m;
}

float exp_row(const float* s, int64_t n, int64_t n_pad, float scale, float m, float* pf,
              uint16_t* pb) {
  if (pb == nullptr && has_avx512_dq()) return exp_row_f32_avx512(s, n, n_pad, scale, m, pf);
  if (pb != nullptr && has_avx512_bf16()) return exp_row_bf16_avx512(s, n, n_pad, scale, m, pb);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float p = exp_approx(s[i] * scale - m);
    sum += p;
    if (pb != nullptr)
      pb[i] = f32_to_bf16(p);
    else
      pf[i] = p;
  }
  for (int64_t i = n; i < n_pad; ++i)
    if (pb != nullptr)
      pb[i] = 0;
    else
      pf[i] = 0.0f;
  return sum;
}

void exp_tile(const float* s, int64_t rows, int64_t valid, float scale, const float* ref,
              uint16_t* p, int64_t ld_p, float* sums) {
  XDIT_CHECK(has_avx512_bf16(), "exp_tile needs AVX-512-bf16");
  exp_tile_avx512(s, rows, valid, scale, ref, p, ld_p, sums);
}

void scale_add_row(float* o, const float* t, int64_t n, float a) {
  if (kAvx512) return scale_add_row_avx512(o, t, n, a);
  for (int64_t i = 0; i < n; ++i) o[i] = o[i] * a + t[i];
}

void scale_row(float* o, int64_t n, float a) {
  for (int64_t i = 0; i < n; ++i) o[i] *= a;
}

}  // namespace xdit::kernels::cpu
