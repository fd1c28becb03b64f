// The online-softmax row operations of blockwise attention, with an AVX-512
// implementation chosen at run time and a portable fallback.
#pragma once

#include <cstdint>

namespace xdit::kernels::cpu {

// max_i s[i] over i < n.
float row_max(const float* s, int64_t n);
// p[i] = exp(s[i]·scale − m) for i < n and p[i] = 0 for n ≤ i < n_pad,
// written as bf16 to pb when it is not null, else as f32 to pf (which may be
// s itself); returns Σ p[i] in f32. m need not be the maximum, only large
// enough that no p[i] overflows: every p[i] is at most the sum, so a caller
// that finds the sum too large (or not finite) recomputes with a larger m.
// The bf16 output uses a degree-3 polynomial for 2^x (relative error 1e-4,
// 20 times below bf16's rounding), the f32 output a degree-5 one (2e-7).
float exp_row(const float* s, int64_t n, int64_t n_pad, float scale, float m, float* pf,
              uint16_t* pb);
// One 32 × 32 piece of scores s (f32, rows 32 apart; rows < 32 of them
// used, keys ≥ valid masked to 0): p[r, i] = bf16(exp(s[r, i]·scale −
// ref[r])) (rows ld_p apart) and sums[16r … 16r + 15] += the f32 values in
// 16 partial sums. Like exp_row, ref[r] only has to keep exp from
// overflowing; the caller checks the sums. Needs AVX-512-bf16 (every CPU
// with AMX has it).
void exp_tile(const float* s, int64_t rows, int64_t valid, float scale, const float* ref,
              uint16_t* p, int64_t ld_p, float* sums);
// o[i] ← o[i]·a + t[i].
void scale_add_row(float* o, const float* t, int64_t n, float a);
// o[i] ← o[i]·a.
void scale_row(float* o, int64_t n, float a);

}  // namespace xdit::kernels::cpu
