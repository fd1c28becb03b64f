// The online-softmax row operations of blockwise attention, with an AVX-512
// implementation chosen at run time and a portable fallback.
#pragma once

#include <cstdint>

namespace xdit::kernels::cpu {

// s[i] ← s[i]·scale for i < n; returns max_i s[i].
float scale_and_max(float* s, int64_t n, float scale);
// p[i] = exp(s[i] − m) (written as f32 to pf, and as bf16 to pb when pb is
// not null); returns Σ p[i] in f32.
float exp_and_sum(const float* s, int64_t n, float m, float* pf, uint16_t* pb);
// o[i] ← o[i]·a.
void scale_row(float* o, int64_t n, float a);

}  // namespace xdit::kernels::cpu
