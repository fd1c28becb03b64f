#include "kernels/cpu/convert.h"

#include <immintrin.h>
#include <omp.h>

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

const uint16_t* thread_bf16_copy(const float* src, size_t n) {
  thread_local AlignedVector<uint16_t> buf;
  grow_discarding(buf, n);
  f32_to_bf16_array(src, buf.data(), n);
  return buf.data();
}

}  // namespace xdit::kernels::cpu
