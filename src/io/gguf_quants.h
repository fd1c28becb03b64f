// GGML's block quantizations turned into f32, as the GGUF specification
// defines them (ggml's reference dequantization; gguf-py's `quants` is the
// golden, tests/io/test_gguf.cpp). Exact f32 arithmetic: each value is
// d·q (Q8_0, Q4_0, Q5_0), d·q + m (Q4_1, Q5_1), (d·sc)·q − dmin·m (Q4_K,
// Q5_K) or d·sc·q (Q6_K) with the block's f16 scales widened to f32 —
// diffusers' GGUF loader rounds the same products to f16 on the way (within
// 1/255 of these on the tiny models).
#pragma once

#include <cstddef>
#include <cstdint>

#include "io/gguf.h"

namespace xdit::io {

// `blocks` whole blocks of type `t` at `src` → blocks · ggml_block_values(t)
// values at `dst`.
void dequantize_blocks(GgmlType t, const uint8_t* src, int64_t blocks, float* dst);

// The K-quants' 8 six-bit (scale, min) pairs in 12 bytes: pairs 0–3 in the
// low 6 bits of bytes 0–3 (scales) and 4–7 (mins); pairs 4–7 in the nibbles
// of bytes 8–11 with their top 2 bits in the top bits of bytes 0–7. Pair j.
void k_scale_min(const uint8_t* s, int j, int& sc, int& m);

// `blocks` blocks of 32 f32 values → Q8_0 as ggml's reference quantizer
// (and gguf-py's) makes them: d = max|x| / 127 rounded to f16, q = x / d
// rounded half away from zero (0 for an all-zero block).
void quantize_q8_0(const float* src, int64_t blocks, uint8_t* dst);

// Whether every f16 scale (and minimum) of `blocks` blocks of a quantized
// type is finite — then so is every value they decode to; true for the
// float types, whose values are not scanned here.
bool block_scales_finite(GgmlType t, const uint8_t* src, int64_t blocks);

}  // namespace xdit::io
