// GCC 12's AVX-512 intrinsics (the shuffles of transpose_16x16_epi32) start
// from undefined vectors, which GCC reports as uninitialized inside the headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "kernels/cpu/convert.h"

#include <immintrin.h>
#include <omp.h>

#include <cstring>

#include "core/aligned.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/avx512_math.h"
#include "kernels/cpu/isa.h"

namespace xdit::kernels::cpu {

namespace {

// The tail is masked, not scalar: attention converts rows of 72 values, and
// a scalar tail of 8 cost more than the four vectors before it.
__attribute__((target("avx512f,avx512bf16,avx512vl,avx512bw"))) void convert_avx512bf16(
    const float* s, uint16_t* d, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    store_bf16_16(d + i, _mm512_loadu_ps(s + i));
  }
  if (i < n) {
    const __mmask16 k = tail_mask(static_cast<int64_t>(n - i));
    store_bf16_16(d + i, _mm512_maskz_loadu_ps(k, s + i), k);
  }
}

XDIT_ISA_BODY void convert_generic_body(const float* s, uint16_t* d, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(s[i]);
}
XDIT_ISA_CLONES(void, convert_generic, (const float* s, uint16_t* d, size_t n), (s, d, n))

}  // namespace

void f32_to_bf16_array(const float* src, uint16_t* dst, size_t n) {
  const bool native = has_avx512_bf16();
  auto run = [&](size_t b, size_t e) {
    if (native)
      convert_avx512bf16(src + b, dst + b, e - b);
    else
      convert_generic(src + b, dst + b, e - b);
  };
  if (n < (1u << 16)) {
    run(0, n);
    return;
  }
#pragma omp parallel
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    const size_t nt = static_cast<size_t>(omp_get_num_threads());
    const size_t chunk = (n + nt - 1) / nt;
    const size_t b = t * chunk, e = b + chunk < n ? b + chunk : n;
    if (b < e) run(b, e);
  }
}

namespace {

// One whole block (B = block_out outputs × 32 inputs) of
// pack_bf16_ba16a_b2a on vectors: each output's 32 inputs are one row of 16
// input pairs (one 64-byte load of bf16, or two of f32 rounded as
// vcvtne2ps2bf16 rounds), and 16 outputs' rows transposed give 16 pairs'
// runs of 16 outputs. The scalar loop, a 4-byte store per pair, packed 2.2 G
// elements/s from bf16 and 0.95 from f32 on two Zen 4 cores; this 4.6 and
// 2.5–3.0.
__attribute__((target("avx512f,avx512bf16,avx512vl,avx512bw"))) void pack_block_avx512bf16(
    const void* w, bool w_bf16, int64_t in, int64_t n0, int64_t k0, int64_t block_out,
    uint16_t* out) {
  const auto* w16 = static_cast<const uint16_t*>(w);
  const auto* w32 = static_cast<const float*>(w);
  for (int64_t g = 0; g < block_out; g += 16) {
    __m512i r[16], t[16];
    for (int j = 0; j < 16; ++j) {
      const int64_t at = (n0 + g + j) * in + k0;
      if (w_bf16) {
        r[j] = _mm512_loadu_si512(w16 + at);
      } else {
        const __m512bh b =
            _mm512_cvtne2ps_pbh(_mm512_loadu_ps(w32 + at + 16), _mm512_loadu_ps(w32 + at));
        r[j] = reinterpret_cast<const __m512i&>(b);
      }
    }
    transpose_16x16_epi32(r, t);
    for (int p = 0; p < 16; ++p) _mm512_storeu_si512(out + (p * block_out + g) * 2, t[p]);
  }
}

}  // namespace

void pack_bf16_ba16a_b2a(const void* w, bool w_bf16, int64_t out, int64_t in, int64_t block_out,
                         uint16_t* dst) {
  XDIT_CHECK(block_out == 32 || block_out == 64, "pack_bf16_ba16a_b2a: blocks of ", block_out,
             " outputs (32 or 64)");
  const auto* w16 = static_cast<const uint16_t*>(w);
  const auto* w32 = static_cast<const float*>(w);
  const int64_t kblocks = (in + 31) / 32, nblocks = (out + block_out - 1) / block_out;
  const int64_t block = 32 * block_out;  // values
  const bool vector = has_avx512_bf16();
  const auto value = [&](int64_t at) -> uint32_t {
    return w_bf16 ? w16[at] : f32_to_bf16(w32[at]);
  };
  // Input pair (k, k + 1) of output n as one 32-bit unit, zero past the edges.
  const auto pair = [&](int64_t n, int64_t k) -> uint32_t {
    if (n >= out) return 0;
    const int64_t at = n * in + k;
    return (k >= in ? 0u : value(at)) | (k + 1 >= in ? 0u : value(at + 1)) << 16;
  };
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < nblocks * kblocks; ++blk) {
    const int64_t n0 = blk / kblocks * block_out, k0 = blk % kblocks * 32;
    uint16_t* const o = dst + blk * block;
    // Within the block: [16 input pairs][B outputs] 32-bit units. Each
    // output's 32 inputs are one 64-byte (bf16) or 128-byte (f32) run of w.
    if (vector && n0 + block_out <= out && k0 + 32 <= in) {
      pack_block_avx512bf16(w, w_bf16, in, n0, k0, block_out, o);
      continue;
    }
    // Edge blocks, and CPUs without AVX-512-bf16 (where bf16 layers are rare:
    // their compute type falls back to f32).
    uint32_t unit[16][64];
    for (int64_t j = 0; j < block_out; ++j)
      for (int p = 0; p < 16; ++p) unit[p][j] = pair(n0 + j, k0 + 2 * p);
    for (int p = 0; p < 16; ++p)
      std::memcpy(o + p * block_out * 2, unit[p], static_cast<size_t>(block_out) * 4);
  }
}

const uint16_t* thread_bf16_copy(const float* src, size_t n) {
  thread_local AlignedVector<uint16_t> buf;
  grow_discarding(buf, n);
  f32_to_bf16_array(src, buf.data(), n);
  return buf.data();
}

}  // namespace xdit::kernels::cpu
