// AVX-512 math shared by the kernels that are written with intrinsics (the
// attention softmax, GroupNorm + SiLU). Each function carries its target
// attribute, so only callers compiled for AVX-512 (or dispatched to it at run
// time) may use them.
#pragma once

#include <immintrin.h>

namespace xdit::kernels::cpu {

// Whether the CPU runs the bf16 intrinsic kernels, which are compiled for
// avx512f + avx512bf16 + avx512vl + avx512bw.
inline bool has_avx512_bf16() {
  static const bool has = __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bf16") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
  return has;
}

// 2^x on 16 lanes: x = n + f with n an integer and |f| ≤ ½, 2^f from a
// polynomial (least-squares fits on Chebyshev nodes of [−½, ½]: degree 5 has
// a relative error of 2.5e-7, as good as f32 holds; degree 3 has 1e-4, enough
// for values stored as bf16), and vscalefps multiplies by 2^n, which also
// gives 0 for large negative n instead of a wrapped exponent. The clamp keeps
// −inf from turning into NaN through x − n.
template <int kDegree>
__attribute__((target("avx512f"))) inline __m512 exp2_16(__m512 x) {
  static_assert(kDegree == 3 || kDegree == 5);
  x = _mm512_max_ps(x, _mm512_set1_ps(-150.0f));
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p;
  if constexpr (kDegree == 5) {
    p = _mm512_set1_ps(0.0013400432653725147f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.009676037356257439f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.05550327152013779f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.2402210682630539f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931471824645996f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000001192092896f));
  } else {
    p = _mm512_set1_ps(0.05592203512787819f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24264007806777954f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931210160255432f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.9999244809150696f));
  }
  return _mm512_scalef_ps(p, n);
}

// x·sigmoid(x) = x / (1 + e^−x) on 16 lanes, e^−x as 2^(−x·log2 e) (degree 5,
// 2.5e-7): large positive x give x, large negative give −0 (e^−x = ∞).
__attribute__((target("avx512f"))) inline __m512 silu_16(__m512 x) {
  const __m512 e = exp2_16<5>(_mm512_mul_ps(x, _mm512_set1_ps(-1.44269504088896341f)));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

}  // namespace xdit::kernels::cpu
