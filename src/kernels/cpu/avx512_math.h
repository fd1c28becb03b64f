// AVX-512 math shared by the kernels that are written with intrinsics (the
// attention softmax, GroupNorm + SiLU). Each function carries its target
// attribute, so only callers compiled for AVX-512 (or dispatched to it at run
// time) may use them.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/isa.h"

namespace xdit::kernels::cpu {

// Whether the f32 AVX-512 kernels (avx512f + avx512dq, e.g. those using
// exp2_16) may run: kernels/cpu/isa.h, the CPU capped by ONEDNN_MAX_CPU_ISA.
inline bool has_avx512_dq() {
  return cpu_isa() >= CpuIsa::kAvx512;
}

// Whether the bf16 intrinsic kernels, compiled for avx512f + avx512dq +
// avx512bf16 + avx512vl + avx512bw, may run.
inline bool has_avx512_bf16() {
  return cpu_isa() >= CpuIsa::kAvx512Bf16;
}

// Lanes [0, min(left, 16)) of a 16-lane mask: the masked tail of a row.
inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
}

// 16 floats rounded to bf16 (to nearest even, as vcvtneps2bf16 does) and
// stored at p: all 16, or (masked) the lanes of k, e.g. a row's tail.
__attribute__((target("avx512f,avx512bf16,avx512vl,avx512bw"))) inline void store_bf16_16(
    uint16_t* p, __m512 v) {
  const __m256bh b = _mm512_cvtneps_pbh(v);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), reinterpret_cast<const __m256i&>(b));
}
__attribute__((target("avx512f,avx512bf16,avx512vl,avx512bw"))) inline void store_bf16_16(
    uint16_t* p, __m512 v, __mmask16 k) {
  const __m256bh b = _mm512_cvtneps_pbh(v);
  _mm256_mask_storeu_epi16(p, k, reinterpret_cast<const __m256i&>(b));
}

// A 16 × 16 transpose of 32-bit words: lane n of t[i] is word i of r[n].
// Three rounds of shuffles: words within 128-bit lanes, then pairs of
// words, then the lanes themselves (48 shuffles for 16 rows, where a store
// per word would take 256).
__attribute__((target("avx512f"))) inline void transpose_16x16_epi32(const __m512i r[16],
                                                                     __m512i t[16]) {
  __m512i a[16], b[16];
  for (int n = 0; n < 16; n += 2) {
    a[n] = _mm512_unpacklo_epi32(r[n], r[n + 1]);
    a[n + 1] = _mm512_unpackhi_epi32(r[n], r[n + 1]);
  }
  // b[4q + j], lane L: word 4L + j of rows 4q … 4q + 3.
  for (int q = 0; q < 4; ++q) {
    b[4 * q] = _mm512_unpacklo_epi64(a[4 * q], a[4 * q + 2]);
    b[4 * q + 1] = _mm512_unpackhi_epi64(a[4 * q], a[4 * q + 2]);
    b[4 * q + 2] = _mm512_unpacklo_epi64(a[4 * q + 1], a[4 * q + 3]);
    b[4 * q + 3] = _mm512_unpackhi_epi64(a[4 * q + 1], a[4 * q + 3]);
  }
  // Word 4L + j of all rows: lane L of b[j], b[4 + j], b[8 + j], b[12 + j].
  for (int j = 0; j < 4; ++j) {
    const __m512i x02 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0x88),
                  y02 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0x88),
                  x13 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0xdd),
                  y13 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0xdd);
    t[j] = _mm512_shuffle_i32x4(x02, y02, 0x88);
    t[8 + j] = _mm512_shuffle_i32x4(x02, y02, 0xdd);
    t[4 + j] = _mm512_shuffle_i32x4(x13, y13, 0x88);
    t[12 + j] = _mm512_shuffle_i32x4(x13, y13, 0xdd);
  }
}

// 2^x on 16 lanes: x = n + f with n = ⌊x⌋ and 0 ≤ f < 1. vreduceps gives f
// in one instruction, a polynomial gives 2^f (least-squares fits on
// Chebyshev nodes, moved from [−½, ½] to [0, 1): degree 5 has a relative
// error of 2e-7, as good as f32 holds; degree 3 has 1e-4, enough for values
// stored as bf16), and vscalefps multiplies by 2^⌊x⌋ itself, so n is never
// formed. Special values come out right without a clamp: −∞ reduces to 0 and
// scales to 0, large negative x give 0 (not a wrapped exponent), +∞ gives +∞,
// NaN stays NaN. (The earlier form, round, subtract, clamp, cost four more
// µops per 16 values: a third of the attention softmax.)
template <int kDegree>
__attribute__((target("avx512f,avx512dq"))) inline __m512 exp2_16(__m512 x) {
  static_assert(kDegree == 3 || kDegree == 5);
  const __m512 f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 p;
  if constexpr (kDegree == 5) {
    p = _mm512_set1_ps(0.0018951073288917542f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.00894621480256319f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.05586327984929085f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24014076590538025f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931545734405518f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  } else {
    p = _mm512_set1_ps(0.07908570021390915f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.22451633214950562f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6963905096054077f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.9998967051506042f));
  }
  return _mm512_scalef_ps(p, x);
}

// x·sigmoid(x) = x / (1 + e^−x) on 16 lanes, e^−x as 2^(−x·log2 e) (degree 5,
// 2.5e-7): large positive x give x, large negative give −0 (e^−x = ∞).
__attribute__((target("avx512f,avx512dq"))) inline __m512 silu_16(__m512 x) {
  const __m512 e = exp2_16<5>(_mm512_mul_ps(x, _mm512_set1_ps(-1.44269504088896341f)));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

// The tanh-approximated GELU, 0.5·x·(1 + tanh u) with u = √(2/π)·(x + 0.044715·x³),
// on 16 lanes as x·sigmoid(2u) = x / (1 + e^(−2u)): one exp (degree 5) and one
// division. Saturates like silu_16: large positive x give x, large negative −0.
__attribute__((target("avx512f,avx512dq"))) inline __m512 gelu_tanh_16(__m512 x) {
  // −2·√(2/π)·log2 e: e^(−2u) = 2^(x·(1 + 0.044715·x²)·this)
  const __m512 k = _mm512_set1_ps(-2.0f * 0.7978845608028654f * 1.44269504088896341f);
  const __m512 inner =
      _mm512_fmadd_ps(_mm512_mul_ps(x, x), _mm512_set1_ps(0.044715f), _mm512_set1_ps(1.0f));
  const __m512 e = exp2_16<5>(_mm512_mul_ps(_mm512_mul_ps(x, inner), k));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

}  // namespace xdit::kernels::cpu
