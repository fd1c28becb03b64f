#include "io/gguf_quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace xdit::io {

namespace {

float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// 32-value blocks: an f16 scale d (and for Q4_1 / Q5_1 an f16 minimum m),
// for Q5 32 high bits, then 16 bytes of nibbles: value j in byte j's low
// nibble, value j + 16 in its high one.
template <int kBits, bool kMin>
void nibble_blocks(const uint8_t* src, int64_t blocks, float* dst) {
  constexpr int kHeader = (kMin ? 4 : 2) + (kBits == 5 ? 4 : 0);
  constexpr int kOffset = kMin ? 0 : (kBits == 5 ? 16 : 8);
#pragma omp parallel for if (blocks > 4096)
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = src + b * (kHeader + 16);
    const float d = half(p), m = kMin ? half(p + 2) : 0.0f;
    uint32_t high = 0;
    if (kBits == 5) std::memcpy(&high, p + (kMin ? 4 : 2), 4);
    const uint8_t* qs = p + kHeader;
    float* y = dst + b * 32;
    for (int j = 0; j < 16; ++j) {
      int lo = qs[j] & 0x0F, hi = qs[j] >> 4;
      if (kBits == 5) {
        lo |= static_cast<int>((high >> j) & 1u) << 4;
        hi |= static_cast<int>((high >> (j + 16)) & 1u) << 4;
      }
      y[j] = static_cast<float>(lo - kOffset) * d + m;
      y[j + 16] = static_cast<float>(hi - kOffset) * d + m;
    }
  }
}

void q8_0_blocks(const uint8_t* src, int64_t blocks, float* dst) {
#pragma omp parallel for if (blocks > 4096)
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = src + b * 34;
    const float d = half(p);
    const auto* q = reinterpret_cast<const int8_t*>(p + 2);
    for (int j = 0; j < 32; ++j) dst[b * 32 + j] = static_cast<float>(q[j]) * d;
  }
}

}  // namespace

void k_scale_min(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

namespace {

// 256-value blocks of 8 sub-blocks of 32: d, dmin (f16), the 12 bytes of
// scales and mins, for Q5_K 32 bytes of fifth bits, then 128 bytes of
// nibbles (each 32-byte run holds sub-blocks 2i in the low nibbles and
// 2i + 1 in the high ones). y = (d·sc)·q − dmin·m.
template <bool kFive>
void k_nibble_blocks(const uint8_t* src, int64_t blocks, float* dst) {
  constexpr int kBytes = kFive ? 176 : 144;
#pragma omp parallel for if (blocks > 512)
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = src + b * kBytes;
    const float d = half(p), dmin = half(p + 2);
    const uint8_t* scales = p + 4;
    const uint8_t* qh = p + 16;
    const uint8_t* qs = p + (kFive ? 48 : 16);
    float* y = dst + b * 256;
    for (int i = 0; i < 4; ++i) {
      int sc0, m0, sc1, m1;
      k_scale_min(scales, 2 * i, sc0, m0);
      k_scale_min(scales, 2 * i + 1, sc1, m1);
      const float d0 = d * static_cast<float>(sc0), n0 = dmin * static_cast<float>(m0);
      const float d1 = d * static_cast<float>(sc1), n1 = dmin * static_cast<float>(m1);
      for (int l = 0; l < 32; ++l) {
        int lo = qs[32 * i + l] & 0x0F, hi = qs[32 * i + l] >> 4;
        if (kFive) {
          lo += ((qh[l] >> (2 * i)) & 1) << 4;
          hi += ((qh[l] >> (2 * i + 1)) & 1) << 4;
        }
        y[64 * i + l] = d0 * static_cast<float>(lo) - n0;
        y[64 * i + 32 + l] = d1 * static_cast<float>(hi) - n1;
      }
    }
  }
}

// Q6_K: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales
// (one per 16 values), then d (f16). Two halves of 128 values; in each,
// value l + 32k takes nibble (k odd: high) of low byte l + 32·(k & 1) and
// bit pair k of high byte l, minus 32. y = d·sc·q.
void q6_k_blocks(const uint8_t* src, int64_t blocks, float* dst) {
#pragma omp parallel for if (blocks > 512)
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = src + b * 210;
    const uint8_t* ql = p;
    const uint8_t* qh = p + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
    const float d = half(p + 208);
    float* y = dst + b * 256;
    for (int half_i = 0; half_i < 2; ++half_i) {
      const uint8_t* l8 = ql + 64 * half_i;
      const uint8_t* h8 = qh + 32 * half_i;
      const int8_t* s = sc + 8 * half_i;
      float* out = y + 128 * half_i;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q[4] = {((l8[l] & 0x0F) | ((h8[l] & 3) << 4)) - 32,
                          ((l8[l + 32] & 0x0F) | (((h8[l] >> 2) & 3) << 4)) - 32,
                          ((l8[l] >> 4) | (((h8[l] >> 4) & 3) << 4)) - 32,
                          ((l8[l + 32] >> 4) | (((h8[l] >> 6) & 3) << 4)) - 32};
        for (int k = 0; k < 4; ++k)
          out[l + 32 * k] = d * static_cast<float>(s[is + 2 * k]) * static_cast<float>(q[k]);
      }
    }
  }
}

}  // namespace

void quantize_q8_0(const float* src, int64_t blocks, uint8_t* dst) {
#pragma omp parallel for if (blocks > 4096)
  for (int64_t b = 0; b < blocks; ++b) {
    const float* x = src + b * 32;
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t h = f32_to_f16(d);
    uint8_t* p = dst + b * 34;
    std::memcpy(p, &h, 2);
    for (int j = 0; j < 32; ++j)
      p[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
  }
}

bool block_scales_finite(GgmlType t, const uint8_t* src, int64_t blocks) {
  // Byte offsets of the f16 scales in a block (the layouts above).
  int offsets[2] = {0, -1};
  switch (t) {
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
      offsets[1] = 2;
      break;
    case GgmlType::kQ6_K:
      offsets[0] = 208;
      break;
    case GgmlType::kQ4_0:
    case GgmlType::kQ5_0:
    case GgmlType::kQ8_0:
      break;
    default:
      return true;
  }
  const int64_t bytes = ggml_block_bytes(t);
  bool finite = true;
#pragma omp parallel for reduction(&& : finite) if (blocks > 65536)
  for (int64_t b = 0; b < blocks; ++b)
    for (const int o : offsets) {
      if (o < 0) continue;
      uint16_t h;
      std::memcpy(&h, src + b * bytes + o, 2);
      finite = finite && (h & 0x7c00u) != 0x7c00u;  // exponent all ones: Inf or NaN
    }
  return finite;
}

void dequantize_blocks(GgmlType t, const uint8_t* src, int64_t blocks, float* dst) {
  const auto n = static_cast<size_t>(blocks);
  switch (t) {
    case GgmlType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case GgmlType::kF16:
      return convert_to_f32(src, DType::kF16, dst, n);
    case GgmlType::kBF16:
      return convert_to_f32(src, DType::kBF16, dst, n);
    case GgmlType::kQ4_0:
      return nibble_blocks<4, false>(src, blocks, dst);
    case GgmlType::kQ4_1:
      return nibble_blocks<4, true>(src, blocks, dst);
    case GgmlType::kQ5_0:
      return nibble_blocks<5, false>(src, blocks, dst);
    case GgmlType::kQ5_1:
      return nibble_blocks<5, true>(src, blocks, dst);
    case GgmlType::kQ8_0:
      return q8_0_blocks(src, blocks, dst);
    case GgmlType::kQ4_K:
      return k_nibble_blocks<false>(src, blocks, dst);
    case GgmlType::kQ5_K:
      return k_nibble_blocks<true>(src, blocks, dst);
    case GgmlType::kQ6_K:
      return q6_k_blocks(src, blocks, dst);
  }
  XDIT_FAIL("dequantize: ggml type ", static_cast<uint32_t>(t), " is not read");
}

}  // namespace xdit::io
