// GGUF's Q8_0 weights multiplied as integers: the activations quantized to
// Q8_0 at every product (a scale per 32 inputs of each token, as ggml's
// quantize_row_q8_0 does for its Q8_0 dot products), each 32-input block's
// int8 × int8 products summed exactly in int32 by AVX-512-VNNI (vpdpbusd),
// then scaled by the weight's and the activation's block scales into f32:
//   y[m, n] = act(Σ_g d_w[n, g] · d_x[m, g] · Σ_{k ∈ g} q_w[n, k] · q_x[m, k] + b[n]).
// Written here because oneDNN 3.2's integer matmul has no scales per block
// along the reduction (its grouped scales came in later releases, for
// weight decompression only).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/quantized_linear.h"

namespace xdit::kernels::cpu {

// Whether Q8_0 layers computing in bf16 run as integers on this CPU:
// AVX-512-VNNI, within ONEDNN_MAX_CPU_ISA's cap (kernels/cpu/isa.h), and no
// AMX (whose bf16 tiles, fed with the decoded blocks, outrun VNNI's int8),
// and not switched off (set_q8_0_int8_dot).
bool q8_0_int8_dot_available();
// On by default; off makes new Q8_0 layers decode their blocks into bf16
// instead (the exact route; benchmarks and tests compare the two).
void set_q8_0_int8_dot(bool on);

// Whether a layer over `parts` would run as integers: every part Q8_0 and
// the route available.
bool q8_0_int8_dot_applies(const std::vector<BlockRows>& parts);

// The stacked Q8_0 rows of `parts` (`in` values each, a multiple of 32),
// repacked for vpdpbusd in the same bytes (f16 scales, codes + 128 as u8).
// Needs AVX-512-VNNI (q8_0_int8_dot_available, ignoring the switch).
std::unique_ptr<QuantizedGemm> make_q8_0_int8_gemm(const std::vector<BlockRows>& parts, int64_t in);

// Rows of x (f32, or bf16 when !x_f32) as Q8_0 activations: per block of
// 32 values d = max |x| / 127 (f32, not rounded to f16) and codes
// nearbyint(x · (1 / d)) (0 where d = 0); comp = −128 · Σ codes, which
// vpdpbusd's unsigned weights (code + 128) need; a block holding NaN or
// ±Inf gets d = NaN, so its outputs are NaN as a float product's would be.
// codes [m, k], d and comp [m, k / 32]. Exposed for the tests.
void quantize_q8_0_activations(const void* x, bool x_f32, int64_t m, int64_t k, int8_t* codes,
                               float* d, int32_t* comp);

}  // namespace xdit::kernels::cpu
