// A bf16 GEMM written with AMX tile instructions, for the linear layers on
// CPUs that have AMX: y[m, n] = epilogue(a[m, k] · b[k, n]).
//
// Why by hand: on the Sapphire Rapids this engine is measured on, oneDNN 3.2's
// brgemm matmul runs the PixArt and T5 layer shapes at 1.3–2.4 TFLOP/s, while
// the tile unit does 4.5 TFLOP/s on the same loop with its operands in L2
// (docs/PERFORMANCE.md, "Issue 9, fourth round"). What the hand-written loop
// adds is the blocking below and a software prefetch of the weight stream:
// - the weight is packed once into panels of 32 columns, each a run of 2 KB
//   steps (two 1 KB tiles [16 reduction pairs][16 columns][2], VNNI order), so
//   one panel is one sequential stream;
// - rows go in blocks whose bf16 rows stay in L2 while every panel of the
//   thread passes over them; the reduction is cut into chunks of at most 2048
//   when it is longer, with the partial sums kept per thread in tile order;
// - while a panel is multiplied, the next one is prefetched into L2, spread
//   over the steps (the hardware prefetcher alone reached half the DRAM
//   bandwidth on the skinny T5 shapes);
// - each 32 × 32 result is stored as four contiguous tiles and finished by a
//   vector epilogue (bias, tanh GELU, accumulate, f32 or bf16 out).
// Threads split the panels, so every thread reads its own part of the weight
// once per row block and no thread waits on another.
#pragma once

#include <cstdint>

namespace xdit::kernels::cpu {

// What happens to each result before it is stored.
struct AmxGemmOut {
  void* y = nullptr;            // [m, n], f32 or (bf16) bf16
  bool bf16 = false;            // store bf16 (rounded to nearest even)
  const float* bias = nullptr;  // [n] or null
  bool gelu_tanh = false;       // after the bias
  bool accumulate = false;      // y += result (f32 out, no GELU)
};

// Whether amx_gemm can run a layer of k inputs and n outputs here: AMX tiles
// granted, k and n multiples of 32.
bool amx_gemm_takes(int64_t k, int64_t n);

// The weight [n, k] as torch stores it (f32 or bf16 rows) → the panel layout
// above, k · n bf16 values.
void amx_gemm_pack(const void* w, bool w_bf16, int64_t n, int64_t k, uint16_t* out);

// a: [m, k] rows (row stride k), bf16 or (a_f32) f32 rounded to bf16 as it
// is packed; any m ≥ 1. b from amx_gemm_pack.
void amx_gemm(const void* a, bool a_f32, int64_t m, int64_t k, const uint16_t* b, int64_t n,
              const AmxGemmOut& out);

}  // namespace xdit::kernels::cpu
