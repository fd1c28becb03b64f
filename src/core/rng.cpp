#include "core/rng.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

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
// torch draws normals for float tensors of 16+ elements with its AVX2
// Box–Muller (aten normal_fill_16_AVX2, used on AVX2 and AVX-512 machines),
// whose log and sincos are the Cephes single-precision polynomials of the
// avx_mathfun routines. torch's binary is compiled with FMA contraction, so a
// product feeding an add is fused where GCC fuses it (the first product in
// statement order whose only use is an add). To give the same bits, the
// scalar functions below evaluate the same polynomials with the same constants
// and the same roundings: explicit std::fma where torch's code is fused,
// plain operations elsewhere (this file is compiled with -ffp-contract=off).
// Written from the algorithm's description (Cephes sinf/cosf/logf), checked
// bit for bit against torch by tests/parity/test_rng.cpp.
float cephes_logf(float x) {
  const bool invalid = x <= 0.0f;
  x = std::max(x, std::bit_cast<float>(0x00800000u));  // no denormals
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  float e = static_cast<float>(static_cast<int32_t>(bits >> 23) - 0x7f);
  x = std::bit_cast<float>((bits & ~0x7f800000u) |
                           std::bit_cast<uint32_t>(0.5f));  // mantissa in [0.5, 1)
  e = e + 1.0f;
  const bool below = x < 0.707106781186547524f;  // sqrt(1/2)
  const float keep = below ? x : 0.0f;
  x = x - 1.0f;
  e = e - (below ? 1.0f : 0.0f);
  x = x + keep;
  const float z = x * x;
  static constexpr float kP[] = {7.0376836292E-2f,  -1.1514610310E-1f, 1.1676998740E-1f,
                                 -1.2420140846E-1f, +1.4249322787E-1f, -1.6668057665E-1f,
                                 +2.0000714765E-1f, -2.4999993993E-1f, +3.3333331174E-1f};
  float y = kP[0];
  for (int i = 1; i < 9; ++i) y = std::fma(y, x, kP[i]);
  y = y * x;
  y = std::fma(y, z, e * -2.12194440e-4f);
  y = std::fma(-z, 0.5f, y);
  x = x + y;
  x = std::fma(e, 0.693359375f, x);
  return invalid ? std::numeric_limits<float>::quiet_NaN() : x;
}

void cephes_sincosf(float x, float& s, float& c) {
  bool sin_negative = std::signbit(x);
  x = std::fabs(x);
  float y = x * 1.27323954473516f;  // 4/pi
  int32_t j = static_cast<int32_t>(y);
  j = (j + 1) & ~1;
  y = static_cast<float>(j);
  sin_negative ^= (j & 4) != 0;
  const bool sin_poly = (j & 2) == 0;  // which polynomial is the sine
  const bool cos_negative = (~(j - 2) & 4) != 0;
  // Extended-precision reduction x − y·π/4 in three parts.
  x = std::fma(y, -0.78515625f, x);
  x = std::fma(y, -2.4187564849853515625e-4f, x);
  x = std::fma(y, -3.77489497744594108e-8f, x);
  const float z = x * x;
  float yc = 2.443315711809948E-005f;  // cosine polynomial on [0, π/4]
  yc = std::fma(yc, z, -1.388731625493765E-003f);
  yc = std::fma(yc, z, 4.166664568298827E-002f);
  yc = yc * z;
  yc = std::fma(yc, z, -(z * 0.5f));
  yc = yc + 1.0f;
  float ys = -1.9515295891E-4f;  // sine polynomial on [0, π/4]
  ys = std::fma(ys, z, 8.3321608736E-3f);
  ys = std::fma(ys, z, -1.6666654611E-1f);
  ys = ys * z;
  ys = std::fma(ys, x, x);
  const float sin_from_s = sin_poly ? ys : 0.0f, sin_from_c = sin_poly ? 0.0f : yc;
  const float sv = sin_from_c + sin_from_s;
  const float cv = (yc - sin_from_c) + (ys - sin_from_s);
  s = sin_negative ? -sv : sv;
  c = cos_negative ? -cv : cv;
}

void normal_fill_16(float* d) {
  const float two_pi = static_cast<float>(2.0 * M_PI);
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - d[j];
    const float u2 = d[j + 8];
    const float radius = std::sqrt(-2.0f * cephes_logf(u1));
    const float theta = two_pi * u2;
    float st, ct;
    cephes_sincosf(theta, st, ct);
    d[j] = radius * ct;
    d[j + 8] = radius * st;
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
    const double u1 =
        static_cast<double>(random64() & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
    const double u2 =
        static_cast<double>(random64() & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
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

uint64_t parse_torch_seed(const std::string& text) {
  // torch/csrc/Generator.cpp unpack_uint64: an unsigned 64-bit value, else a
  // signed one reinterpreted (two's complement); larger values raise.
  auto fail = [&] {
    XDIT_FAIL("--seed ", text,
              " is not a seed: give an integer from -9223372036854775808 to "
              "18446744073709551615 (torch.manual_seed's range; negative seeds wrap as in torch)");
  };
  const char* b = text.data();
  const char* e = b + text.size();
  if (b != e && *b == '+') ++b;
  if (b == e) fail();
  if (*b == '-') {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(b, e, v);
    if (ec != std::errc() || p != e) fail();
    return static_cast<uint64_t>(v);
  }
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || p != e) fail();
  return v;
}

}  // namespace xdit
