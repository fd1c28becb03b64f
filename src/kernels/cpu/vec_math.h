// Vectorisable scalar math for the CPU kernels. glibc's expf does not
// vectorise without -ffast-math, so exp is written here as Cody–Waite range
// reduction plus a degree-6 polynomial (max relative error ~2e-7 in f32),
// branch-free so that the compiler turns loops of it into SIMD code (the
// AVX2 and AVX-512 builds of kernels/cpu/isa.h).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace xdit::kernels::cpu {

inline float exp_approx(float x) {
  // Clamped where e^x is 0 in f32 (below −104, under half the smallest
  // denormal) or ∞ (above 89). Comparisons, not std::fmin / fmax: these
  // vectorise (IEEE fmin / fmax keep the loop scalar) and let NaN through.
  x = x < -104.0f ? -104.0f : x;
  x = x > 89.0f ? 89.0f : x;
  // n = x·log2 e rounded to nearest: adding 1.5·2^23 leaves it in the low
  // mantissa bits (no float → int conversion, which SSE2 cannot vectorise).
  constexpr float kRound = 12582912.0f;
  const float t = x * 1.44269504088896341f + kRound;
  const float n = t - kRound;
  float r = x - n * 0.693145751953125f;  // ln2 split hi/lo (Cody–Waite)
  r = r - n * 1.428606765330187e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n as two normal factors, so that results in the denormal range and
  // near f32's largest come out right (n is −150 … 128). Unsigned shifts: a
  // NaN x gives a meaningless n, and p is NaN already.
  const int32_t k = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound);
  const int32_t k1 = k >> 1, k2 = k - k1;
  return p * std::bit_cast<float>(static_cast<uint32_t>(k1 + 127) << 23) *
         std::bit_cast<float>(static_cast<uint32_t>(k2 + 127) << 23);
}

}  // namespace xdit::kernels::cpu
