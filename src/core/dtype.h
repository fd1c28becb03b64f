// Element types and the scalar conversions between them.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace xdit {

enum class DType { kF32, kF16, kBF16 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "f32", "f16", "bf16"
DType parse_dtype(
    const std::string& name);  // accepts f32/float32/fp32, bf16/bfloat16, f16/float16/fp16

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, NaN kept quiet: the conversion torch and oneDNN use.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of `src` (type `from`) to f32.
void convert_to_f32(const void* src, DType from, float* dst, size_t n);
// Converts n f32 elements to `to`.
void convert_from_f32(const float* src, void* dst, DType to, size_t n);

}  // namespace xdit
