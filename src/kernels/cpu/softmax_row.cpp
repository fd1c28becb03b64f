#include "kernels/cpu/softmax_row.h"

// GCC 12's _mm512_reduce_* and masked intrinsics start from deliberately
// undefined vectors, which -Wuninitialized reports inside the headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "kernels/cpu/vec_math.h"

namespace xdit::kernels::cpu {

namespace {

// exp on 16 lanes: the same Cody–Waite reduction and polynomial as
// exp_approx() in vec_math.h.
__attribute__((target("avx512f"))) inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

__attribute__((target("avx512f"))) float scale_and_max_avx512(float* s, int64_t n, float scale) {
  const __m512 vs = _mm512_set1_ps(scale);
  __m512 vm = _mm512_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(s + i), vs);
    _mm512_storeu_ps(s + i, v);
    vm = _mm512_max_ps(vm, v);
  }
  if (i < n) {
    const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, s + i), vs);
    _mm512_mask_storeu_ps(s + i, k, v);
    vm = _mm512_mask_max_ps(vm, k, vm, v);
  }
  return _mm512_reduce_max_ps(vm);
}

__attribute__((target("avx512f"))) float exp_and_sum_avx512(const float* s, int64_t n, float m,
                                                            float* pf) {
  const __m512 vm = _mm512_set1_ps(m);
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + i), vm));
    acc = _mm512_add_ps(acc, e);
    _mm512_storeu_ps(pf + i, e);
  }
  if (i < n) {
    const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), vm));
    acc = _mm512_mask_add_ps(acc, k, acc, e);
    _mm512_mask_storeu_ps(pf + i, k, e);
  }
  return _mm512_reduce_add_ps(acc);
}

// The same, also writing the probabilities as bf16 for the P·V product.
__attribute__((target("avx512f,avx512bf16,avx512vl,avx512bw"))) float exp_and_sum_bf16_avx512(
    const float* s, int64_t n, float m, float* pf, uint16_t* pb) {
  const __m512 vm = _mm512_set1_ps(m);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k =
        n - i >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), vm));
    acc = _mm512_mask_add_ps(acc, k, acc, e);
    _mm512_mask_storeu_ps(pf + i, k, e);
    const __m256bh b = _mm512_cvtneps_pbh(e);
    _mm256_mask_storeu_epi16(pb + i, k, reinterpret_cast<const __m256i&>(b));
  }
  return _mm512_reduce_add_ps(acc);
}

__attribute__((target("avx512f"))) void scale_row_avx512(float* o, int64_t n, float a) {
  const __m512 va = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(o + i, _mm512_mul_ps(_mm512_loadu_ps(o + i), va));
  for (; i < n; ++i) o[i] *= a;
}

const bool kAvx512 = __builtin_cpu_supports("avx512f");
const bool kBf16 = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vl") &&
                   __builtin_cpu_supports("avx512bw");

}  // namespace

float scale_and_max(float* s, int64_t n, float scale) {
  if (kAvx512) return scale_and_max_avx512(s, n, scale);
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, s[i] *= scale);
  return m;
}

float exp_and_sum(const float* s, int64_t n, float m, float* pf, uint16_t* pb) {
  if (kAvx512 && pb == nullptr) return exp_and_sum_avx512(s, n, m, pf);
  if (kAvx512 && kBf16) return exp_and_sum_bf16_avx512(s, n, m, pf, pb);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    pf[i] = exp_approx(s[i] - m);
    sum += pf[i];
    if (pb != nullptr) pb[i] = f32_to_bf16(pf[i]);
  }
  return sum;
}

void scale_row(float* o, int64_t n, float a) {
  if (kAvx512) return scale_row_avx512(o, n, a);
  for (int64_t i = 0; i < n; ++i) o[i] *= a;
}

}  // namespace xdit::kernels::cpu
