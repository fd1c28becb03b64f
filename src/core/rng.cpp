#include "core/rng.h"

#include <cmath>

namespace xdit {

// mt19937 as std::mt19937 and torch's at::mt19937 define it; torch seeds it
// with the low 32 bits of the 64-bit seed.
TorchGenerator::TorchGenerator(uint64_t seed) {
  state_[0] = static_cast<uint32_t>(seed & 0xffffffffu);
  for (uint32_t i = 1; i < 624; ++i)
    state_[i] = 1812433253u * (state_[i - 1] ^ (state_[i - 1] >> 30)) + i;
  index_ = 624;
}

uint32_t TorchGenerator::random() {
  if (index_ >= 624) {
    for (int i = 0; i < 624; ++i) {
      const uint32_t y = (state_[i] & 0x80000000u) | (state_[(i + 1) % 624] & 0x7fffffffu);
      state_[i] = state_[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    index_ = 0;
  }
  uint32_t y = state_[index_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint64_t TorchGenerator::random64() {
  const uint64_t hi = random();
  const uint64_t lo = random();
  return hi << 32 | lo;
}

namespace {
// at::uniform_real_distribution<float>(0, 1): 24 random bits / 2^24.
float uniform_f32(TorchGenerator& g) {
  return static_cast<float>(g.random() & ((1u << 24) - 1)) * (1.0f / 16777216.0f);
}
// torch's normal_fill_16: Box–Muller over 16 uniforms, pairs (j, j+8).
void normal_fill_16(float* d) {
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - d[j];
    const float u2 = d[j + 8];
    const float radius = std::sqrt(-2.0f * std::log(u1));
    const float theta = 2.0f * static_cast<float>(M_PI) * u2;
    d[j] = radius * std::cos(theta);
    d[j + 8] = radius * std::sin(theta);
  }
}
}  // namespace

void TorchGenerator::randn(float* out, int64_t n) {
  if (n >= 16) {
    // torch normal_fill: n uniforms, Box–Muller in blocks of 16, and if n is
    // not a multiple of 16 the last 16 values redrawn from 16 fresh uniforms.
    for (int64_t i = 0; i < n; ++i) out[i] = uniform_f32(*this);
    for (int64_t i = 0; i + 16 <= n; i += 16) normal_fill_16(out + i);
    if (n % 16 != 0) {
      float* tail = out + n - 16;
      for (int i = 0; i < 16; ++i) tail[i] = uniform_f32(*this);
      normal_fill_16(tail);
    }
    return;
  }
  // Small tensors: at::normal_distribution<double>, which caches the second
  // Box–Muller value in the generator.
  for (int64_t i = 0; i < n; ++i) {
    if (has_cached_normal_) {
      has_cached_normal_ = false;
      out[i] = static_cast<float>(cached_normal_);
      continue;
    }
    const double u1 = static_cast<double>(random64() & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
    const double u2 = static_cast<double>(random64() & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
    const double r = std::sqrt(-2.0 * std::log1p(-u2));
    const double theta = 2.0 * M_PI * u1;
    cached_normal_ = r * std::sin(theta);
    has_cached_normal_ = true;
    out[i] = static_cast<float>(r * std::cos(theta));
  }
}

Tensor TorchGenerator::randn(const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  randn(t.data<float>(), t.numel());
  return t;
}

}  // namespace xdit
