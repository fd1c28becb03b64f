// GCC 12's AVX-512 intrinsics start from undefined vectors, which
// -Wmaybe-uninitialized reports inside the headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/cpu/int8_tile.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/aligned.h"
#include "core/error.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/q8_0_gemm.h"
#include "kernels/cpu/quantized_linear.h"

namespace xdit::kernels::cpu {

namespace {

constexpr int64_t kRowChunk = 64;  // rows of a work item, one panel set

// One block of 32 values (two vectors) → codes, d, sum (the header's rule).
XDIT_VNNI_TARGET void quantize_block(__m512 v0, __m512 v1, int8_t* codes, float* d, int32_t* sum) {
  const __m512 zero = _mm512_setzero_ps();
  // v · 0 is 0 for finite v and NaN for NaN or ±Inf.
  const bool finite = _mm512_cmp_ps_mask(_mm512_mul_ps(v0, zero), zero, _CMP_EQ_OQ) == 0xffff &&
                      _mm512_cmp_ps_mask(_mm512_mul_ps(v1, zero), zero, _CMP_EQ_OQ) == 0xffff;
  if (!finite) {
    *d = std::nanf("");
    *sum = 0;
    std::memset(codes, 0, kInt8Group);
    return;
  }
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
  // Below 127 · FLT_MIN, 1 / scale would overflow: the block counts as zeros.
  const bool tiny = amax < 127.0f * std::numeric_limits<float>::min();
  const float scale = tiny ? 0.0f : amax / 127.0f, inverse = tiny ? 0.0f : 1.0f / scale;
  const __m512 iv = _mm512_set1_ps(inverse);
  // vcvtps2dq rounds to nearest even (the default MXCSR mode, nearbyint's).
  const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, iv));
  const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, iv));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(codes), _mm512_cvtsepi32_epi8(q0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + 16), _mm512_cvtsepi32_epi8(q1));
  *d = scale;
  *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
}

// 16 bf16 values as f32.
XDIT_VNNI_TARGET inline __m512 widen_bf16_16(const uint16_t* h) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

XDIT_VNNI_TARGET void quantize_rows(const void* x, bool x_f32, int64_t r0, int64_t r1, int64_t k,
                                    int8_t* codes, float* d, int32_t* sums) {
  const int64_t groups = k / kInt8Group;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t at = r * k + g * kInt8Group;
      __m512 v0, v1;
      if (x_f32) {
        v0 = _mm512_loadu_ps(static_cast<const float*>(x) + at);
        v1 = _mm512_loadu_ps(static_cast<const float*>(x) + at + 16);
      } else {
        const auto* b = static_cast<const uint16_t*>(x) + at;
        v0 = widen_bf16_16(b);
        v1 = widen_bf16_16(b + 16);
      }
      quantize_block(v0, v1, codes + at, d + r * groups + g, sums + r * groups + g);
    }
  }
}

}  // namespace

bool int8_tiles_run_here() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return cpu_isa() == CpuIsa::kAvx512Bf16 && __builtin_cpu_supports("avx512vnni") &&
           cpu_has_int8_dot();
  }();
  return yes;
}

void quantize_q8_0_activations(const void* x, bool x_f32, int64_t m, int64_t k, int8_t* codes,
                               float* d, int32_t* sums) {
  XDIT_CHECK(k % kInt8Group == 0, "Q8_0 activations of ", k, " values are not whole blocks");
  XDIT_CHECK(int8_tiles_run_here(), "Q8_0 activations are quantized with AVX-512 (VNNI, bf16)");
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t per = (m + nt - 1) / nt, r0 = std::min(m, t * per);
    quantize_rows(x, x_f32, r0, std::min(m, r0 + per), k, codes, d, sums);
  }
}

Int8Activations quantize_for_product(const void* x, bool x_f32, int64_t m, int64_t k) {
  const int64_t groups = k / kInt8Group;
  thread_local AlignedVector<int8_t> codes;
  thread_local AlignedVector<float> d;
  thread_local AlignedVector<int32_t> sums;
  grow_discarding(codes, static_cast<size_t>(m * k));
  grow_discarding(d, static_cast<size_t>(m * groups));
  grow_discarding(sums, static_cast<size_t>(m * groups));
  quantize_q8_0_activations(x, x_f32, m, k, codes.data(), d.data(), sums.data());
  return {codes.data(), d.data(), sums.data(), k, groups};
}

void for_each_tile(int64_t m, int64_t panels, int tile_rows, int tile_panels,
                   const std::function<void(int64_t, int, int64_t, int)>& tile) {
  const int64_t sets = (panels + tile_panels - 1) / tile_panels;
  const int64_t chunks = (m + kRowChunk - 1) / kRowChunk;
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t s = 0; s < sets; ++s) {
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t p = s * tile_panels;
      const int np = static_cast<int>(std::min<int64_t>(tile_panels, panels - p));
      const int64_t end = std::min(m, (c + 1) * kRowChunk);
      for (int64_t r = c * kRowChunk; r < end; r += tile_rows)
        tile(r, static_cast<int>(std::min<int64_t>(tile_rows, end - r)), p, np);
    }
  }
}

int64_t stacked_rows(const std::vector<BlockRows>& parts, BlockRows::Code code, int64_t in,
                     size_t row_bytes, const char* name) {
  int64_t rows = 0;
  for (const BlockRows& p : parts) {
    XDIT_CHECK(p.code == code && p.cols == in && p.row_bytes == row_bytes, "a ", name,
               " integer layer takes ", name, " rows of ", in, " inputs, got ", p.format, " of ",
               p.cols);
    rows += p.rows;
  }
  return rows;
}

void for_each_part_row(const std::vector<BlockRows>& parts,
                       const std::function<void(const uint8_t*, int64_t)>& repack) {
  int64_t first = 0;
  for (const BlockRows& p : parts) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < p.rows; ++r) repack(p.data + r * p.row_bytes, first + r);
    first += p.rows;
  }
}

}  // namespace xdit::kernels::cpu
