// Vectorisable scalar math for the CPU kernels. glibc's expf does not
// vectorise without -ffast-math, so exp is written here as Cody–Waite range
// reduction plus a degree-6 polynomial (max relative error ~2e-7 in f32),
// branch-free so that the compiler turns loops of it into SIMD code.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace xdit::kernels::cpu {

inline float exp_approx(float x) {
  // Clamp to the range where 2^n stays a normal float; below it exp is ~0.
  x = std::fmin(std::fmax(x, -87.0f), 88.0f);
  const float n = __builtin_roundevenf(x * 1.44269504088896341f);
  float r = x - n * 0.693145751953125f;  // ln2 split hi/lo (Cody–Waite)
  r = r - n * 1.428606765330187e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return p * scale;
}

}  // namespace xdit::kernels::cpu
