// What the integer-route kernels of block-quantized weights share
// (q8_0_gemm.cpp, k_quant_gemm.cpp): the activations quantized to Q8_0 blocks
// per product, the loop over tiles, and the end of a tile (bias, GELU,
// accumulation or bf16 output). Compiled for AVX-512-VNNI + bf16; callers
// run only where int8_tiles_run_here().
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/cpu/avx512_math.h"
#include "kernels/linear.h"

#define XDIT_VNNI_TARGET \
  __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512vnni,avx512bf16")))

namespace xdit::kernels::cpu {

inline constexpr int64_t kInt8Group = 32;  // activation values per Q8_0 block
inline constexpr int64_t kInt8Lanes = 16;  // output channels per panel: one vector of sums

// Whether the CPU runs these kernels: AVX-512-VNNI + bf16 within
// ONEDNN_MAX_CPU_ISA's cap (kernels/cpu/isa.h), and no AMX, whose bf16
// tiles fed with decoded blocks outrun VNNI's int8.
bool int8_tiles_run_here();

// A product's activations as Q8_0 blocks (quantize_q8_0_activations):
// codes [m, k], d and sums [m, k / 32]; thread-local buffers, valid until
// the thread's next call.
struct Int8Activations {
  const int8_t* codes;
  const float* d;
  const int32_t* sums;  // Σ codes of each block
  int64_t k, groups;
};
Int8Activations quantize_for_product(const void* x, bool x_f32, int64_t m, int64_t k);

// Where a tile's results go: y [m, n] (f32, or bf16 when bf16_out), each
// result + bias, then GELU, then added to y when accumulate.
struct TileOut {
  int64_t n;
  const float* bias;
  Activation act;
  bool accumulate, bf16_out;
  void* y;
};

// 16 results of row `row` from column `col` (those at n and past dropped).
XDIT_VNNI_TARGET inline void finish_16(const TileOut& o, __m512 v, int64_t row, int64_t col) {
  const __mmask16 k = tail_mask(o.n - col);
  if (o.bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, o.bias + col));
  if (o.act == Activation::kGeluTanh) v = gelu_tanh_16(v);
  const int64_t at = row * o.n + col;
  if (o.bf16_out) {
    store_bf16_16(static_cast<uint16_t*>(o.y) + at, v, k);
  } else {
    float* yf = static_cast<float*>(o.y) + at;
    if (o.accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, yf));
    _mm512_mask_storeu_ps(yf, k, v);
  }
}

// tile(r, rows, p, panels) over rows [0, m) in tiles of up to tile_rows and
// panels [0, panels) in sets of up to tile_panels, threaded over work items
// of 64 rows × one panel set, dynamically (on a shared host one core often
// runs behind the other).
void for_each_tile(int64_t m, int64_t panels, int tile_rows, int tile_panels,
                   const std::function<void(int64_t r, int rows, int64_t p, int np)>& tile);

// The rows `parts` stack, each part checked to be `code` blocks of `in`
// values in `row_bytes` bytes a row (`name` for the message).
int64_t stacked_rows(const std::vector<BlockRows>& parts, BlockRows::Code code, int64_t in,
                     size_t row_bytes, const char* name);
// repack(row's bytes, its index among all rows) for every row of `parts`,
// threaded.
void for_each_part_row(const std::vector<BlockRows>& parts,
                       const std::function<void(const uint8_t* row, int64_t index)>& repack);

}  // namespace xdit::kernels::cpu
