// A bf16 GEMM written with AMX tile instructions, for the bf16 linear layers
// on CPUs that have AMX: y[m, n] = epilogue(a[m, k] · b[k, n]).
//
// Why by hand: with few rows (T5's 120 tokens, PixArt's 240 text rows) a layer
// is a stream of its weight, and oneDNN 3.2's brgemm matmul streams it at
// 10–12 GB/s on the Sapphire Rapids this engine is measured on, where the
// machine reads 29 GB/s; the loop below reaches 1.3–1.6× oneDNN's rate there
// (docs/PERFORMANCE.md, "Issue 9, fourth round"). With many rows (PixArt's
// 2048 and 8192 image rows) it ran 1.2–1.9× oneDNN's rate on the same packed
// weight ("sixth round"), so kernels::Linear sends every call here.
// - The weight is packed once in oneDNN's BA16a32b2a: panels of 32 columns,
//   each a run of 2 KB steps [16 reduction pairs][32 columns][2], so one panel
//   is one sequential stream and a B tile is 16 of its columns (stride 128 B).
// - Each thread owns a range of panels and needs no barrier. Rows go in
//   blocks that each thread packs itself into contiguous 1 KB tiles (strided
//   16-row tile loads ran at half the speed), which stay in L2 while its
//   panels pass over them; a reduction longer than 2048 is cut into chunks.
// - Each panel's steps go in sub-chunks of 16 (32 KB, kept in L1) while the
//   block's row pairs pass over them, the row tiles loaded non-temporally so
//   that they do not evict the weight; partial sums wait in a per-thread
//   buffer in tile order.
// - While a panel is multiplied, the next one is prefetched into L2, a few
//   lines per tile step.
// - Each 32 × 32 result is stored as four contiguous tiles and finished by a
//   vector epilogue (bias, tanh GELU, accumulate, f32 or bf16 out); results
//   of 4 MB or more go out with non-temporal stores when y is 64-byte aligned.
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

// a: [m, k] rows (row stride k), bf16 or (a_f32) f32 rounded to bf16 as it
// is packed; any m ≥ 1. b: the weight [n, k] in the panel layout above, k · n
// bf16 values, as cpu::pack_bf16_ba16a_b2a writes it with blocks of 32
// outputs (convert.h; kernels::Linear packs it so).
void amx_gemm(const void* a, bool a_f32, int64_t m, int64_t k, const uint16_t* b, int64_t n,
              const AmxGemmOut& out);

}  // namespace xdit::kernels::cpu
