#include "kernels/cpu/softmax_row.h"

// GCC 12's _mm512_reduce_* and masked intrinsics start from deliberately
// undefined vectors, which -Wuninitialized reports inside the headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/isa.h"
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

// The builds for CPUs without AVX-512 (kernels/cpu/isa.h): plain loops the
// compiler vectorises for AVX2 and the baseline. The max and the sum run in
// 16 independent lanes: one running value would be a chain the compiler may
// not reorder (floating-point adds are not associative, and max here must
// ignore NaN as std::max does).
constexpr int kLanes = 16;

XDIT_ISA_BODY float row_max_generic_body(const float* s, int64_t n) {
  float lane[kLanes];
  std::fill(lane, lane + kLanes, -INFINITY);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] = lane[j] < s[i + j] ? s[i + j] : lane[j];
  for (; i < n; ++i) lane[0] = lane[0] < s[i] ? s[i] : lane[0];
  return *std::max_element(lane, lane + kLanes);
}
XDIT_ISA_CLONES(float, row_max_generic, (const float* s, int64_t n), (s, n))

template <class Out>
XDIT_ISA_BODY float exp_row_generic_body(const float* s, int64_t n, int64_t n_pad, float scale,
                                         float m, Out* p) {
  const auto store = [](float e) {
    if constexpr (std::is_same_v<Out, uint16_t>)
      return f32_to_bf16(e);
    else
      return e;
  };
  float lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float e = exp_approx(s[i + j] * scale - m);
      lane[j] += e;
      p[i + j] = store(e);
    }
  for (; i < n; ++i) {
    const float e = exp_approx(s[i] * scale - m);
    lane[0] += e;
    p[i] = store(e);
  }
  std::fill(p + n, p + n_pad, Out{0});
  float sum = 0.0f;
  for (const float v : lane) sum += v;
  return sum;
}
XDIT_ISA_CLONES(float, exp_row_generic,
                (const float* s, int64_t n, int64_t n_pad, float scale, float m, float* p),
                (s, n, n_pad, scale, m, p))
XDIT_ISA_CLONES(float, exp_row_generic,
                (const float* s, int64_t n, int64_t n_pad, float scale, float m, uint16_t* p),
                (s, n, n_pad, scale, m, p))

XDIT_ISA_BODY void scale_add_row_generic_body(float* o, const float* t, int64_t n, float a) {
  for (int64_t i = 0; i < n; ++i) o[i] = o[i] * a + t[i];
}
XDIT_ISA_CLONES(void, scale_add_row_generic, (float* o, const float* t, int64_t n, float a),
                (o, t, n, a))

XDIT_ISA_BODY void scale_row_generic_body(float* o, int64_t n, float a) {
  for (int64_t i = 0; i < n; ++i) o[i] *= a;
}
XDIT_ISA_CLONES(void, scale_row_generic, (float* o, int64_t n, float a), (o, n, a))

}  // namespace

float row_max(const float* s, int64_t n) {
  return has_avx512_dq() ? row_max_avx512(s, n) : row_max_generic(s, n);
}

float exp_row(const float* s, int64_t n, int64_t n_pad, float scale, float m, float* pf,
              uint16_t* pb) {
  if (pb == nullptr && has_avx512_dq()) return exp_row_f32_avx512(s, n, n_pad, scale, m, pf);
  if (pb != nullptr && has_avx512_bf16()) return exp_row_bf16_avx512(s, n, n_pad, scale, m, pb);
  return pb != nullptr ? exp_row_generic(s, n, n_pad, scale, m, pb)
                       : exp_row_generic(s, n, n_pad, scale, m, pf);
}

void exp_tile(const float* s, int64_t rows, int64_t valid, float scale, const float* ref,
              uint16_t* p, int64_t ld_p, float* sums) {
  XDIT_CHECK(has_avx512_bf16(), "exp_tile needs AVX-512-bf16");
  exp_tile_avx512(s, rows, valid, scale, ref, p, ld_p, sums);
}

void scale_add_row(float* o, const float* t, int64_t n, float a) {
  if (has_avx512_dq()) return scale_add_row_avx512(o, t, n, a);
  scale_add_row_generic(o, t, n, a);
}

void scale_row(float* o, int64_t n, float a) {
  scale_row_generic(o, n, a);
}

}  // namespace xdit::kernels::cpu
