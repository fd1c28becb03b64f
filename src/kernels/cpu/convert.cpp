#include "kernels/cpu/convert.h"

#include <immintrin.h>
#include <omp.h>

#include <cstring>

#include "core/aligned.h"
#include "core/dtype.h"
#include "kernels/cpu/avx512_math.h"

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

__attribute__((target_clones("avx512f", "avx2", "default"))) void convert_generic(const float* s,
                                                                                  uint16_t* d,
                                                                                  size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(s[i]);
}

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

void pack_bf16_ba16a64b2a(const void* w, bool w_bf16, int64_t out, int64_t in, uint16_t* dst) {
  const auto* w16 = static_cast<const uint16_t*>(w);
  const auto* w32 = static_cast<const float*>(w);
  const int64_t kblocks = (in + 31) / 32, nblocks = (out + 63) / 64;
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
    const int64_t n0 = blk / kblocks * 64, k0 = blk % kblocks * 32;
    // Within the block: [16 input pairs][64 outputs] 32-bit units. Each
    // output's 32 inputs are one 64-byte (bf16) or 128-byte (f32) run of w.
    uint32_t unit[16][64];
    if (n0 + 64 <= out && k0 + 32 <= in) {
      for (int64_t j = 0; j < 64; ++j) {
        const int64_t at = (n0 + j) * in + k0;
        for (int p = 0; p < 16; ++p) unit[p][j] = value(at + 2 * p) | value(at + 2 * p + 1) << 16;
      }
    } else {
      for (int64_t j = 0; j < 64; ++j)
        for (int p = 0; p < 16; ++p) unit[p][j] = pair(n0 + j, k0 + 2 * p);
    }
    std::memcpy(dst + blk * 2048, unit, sizeof unit);
  }
}

const uint16_t* thread_bf16_copy(const float* src, size_t n) {
  thread_local AlignedVector<uint16_t> buf;
  grow_discarding(buf, n);
  f32_to_bf16_array(src, buf.data(), n);
  return buf.data();
}

}  // namespace xdit::kernels::cpu
