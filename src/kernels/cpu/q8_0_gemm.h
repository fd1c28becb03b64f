// GGUF's Q8_0, Q4_K and Q5_K weights multiplied as integers. Q8_0: the activations quantized to
// Q8_0 at every product (a scale per 32 inputs of each token, as ggml's
// quantize_row_q8_0 does for its Q8_0 dot products), each 32-input block's
// int8 × int8 products summed exactly in int32 by AVX-512-VNNI (vpdpbusd),
// then scaled by the weight's and the activation's block scales into f32:
//   y[m, n] = act(Σ_g d_w[n, g] · d_x[m, g] · Σ_{k ∈ g} q_w[n, k] · q_x[m, k] + b[n]).
// Q4_K and Q5_K (k_quant_gemm.cpp): 256-value blocks of 8 sub-blocks of 32
// nibbles q (Q5_K: and a fifth bit each)
// with w = s1 · q − s2 (s1 = d · sc, s2 = dmin · m per sub-block), against
// the same Q8_0 activations:
//   y[m, n] = act(Σ_g d_x[m, g] · (s1[n, g] · Σ_{k ∈ g} q_w · q_x − s2[n, g] · Σ_{k ∈ g} q_x) +
//   b[n]),
// the nibbles unpacked in the kernel (the layer keeps about the file's
// memory: 4.625 bits a weight for Q4_K's 4.5).
// Written here because oneDNN 3.2's integer matmul has no scales per block
// along the reduction (its grouped scales came in later releases, for
// weight decompression only).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/quantized_linear.h"

namespace xdit::kernels::cpu {

// Whether Q8_0, Q4_K and Q5_K layers computing in bf16 run as integers on this
// CPU: AVX-512-VNNI + bf16, within ONEDNN_MAX_CPU_ISA's cap
// (kernels/cpu/isa.h), no AMX (whose bf16 tiles, fed with the decoded
// blocks, outrun VNNI's int8), and not switched off (set_block_int8_dot).
bool block_int8_dot_available();
// The CPU half of that (whatever the switch says).
bool cpu_runs_block_int8_dot();
// On by default; off makes new Q8_0 / Q4_K / Q5_K layers decode their blocks into
// bf16 instead (the exact route; benchmarks and tests compare the two).
void set_block_int8_dot(bool on);
bool block_int8_dot_on();

// The integer layer over `parts` (`in` values each) where the route is
// available and the parts are all Q8_0 (`in` a multiple of 32), all Q4_K
// or all Q5_K (a multiple of 256); nullptr otherwise.
std::unique_ptr<QuantizedGemm> make_block_int8_gemm(const std::vector<BlockRows>& parts,
                                                    int64_t in);

// The stacked Q8_0 rows of `parts` (`in` values each, a multiple of 32),
// repacked for vpdpbusd in the same bytes (f16 scales, codes + 128 as u8).
// The stacked Q4_K (or, `five`, Q5_K) rows of `parts` (`in` a multiple of
// 256), repacked for vpdpbusd: per panel of 16 channels and sub-block of 32
// inputs 256 bytes of nibbles (Q5_K: and 64 of fifth bits), the 16 six-bit
// scales and mins as bytes, and per block of 256 the 16 d and dmin (f16) —
// 4.625 (5.625) bits a weight where the file holds 4.5 (5.5). Needs
// AVX-512-VNNI, as above.
std::unique_ptr<QuantizedGemm> make_k_quant_int8_gemm(const std::vector<BlockRows>& parts,
                                                      int64_t in, bool five);

// Rows of x (f32, or bf16 when !x_f32) as Q8_0 activations: per block of
// 32 values d = max |x| / 127 (f32, not rounded to f16) and codes
// nearbyint(x · (1 / d)) (d and the codes 0 where max |x| < 127 · FLT_MIN,
// whose 1 / d would overflow) and sums = Σ codes, which the kernels'
// unsigned weights need (Q8_0's code + 128, the K-quants' minimums); a
// block holding NaN or ±Inf gets d = NaN (codes and sum 0), so its outputs
// are NaN as a float product's would be. codes [m, k], d and sums
// [m, k / 32]. Exposed for the tests.
void quantize_q8_0_activations(const void* x, bool x_f32, int64_t m, int64_t k, int8_t* codes,
                               float* d, int32_t* sums);

}  // namespace xdit::kernels::cpu
