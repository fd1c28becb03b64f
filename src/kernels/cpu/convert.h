// Fast f32 → bf16 array conversion (round to nearest even), dispatched at run
// time to AVX-512-bf16 / AVX-512 / plain code.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xdit::kernels::cpu {

void f32_to_bf16_array(const float* src, uint16_t* dst, size_t n);

// A torch-layout weight w [out, in] (f32 or bf16) packed as oneDNN's bf16
// BA16a<B>b2a for dims {in, out}, B = block_out (64 or 32): blocks of B
// outputs × 32 inputs (outputs outer), within a block 16 input pairs × B
// outputs × the pair, zero past the edges. B = 64 is the layout oneDNN's
// avx512_core_bf16 matmul asks for, B = 32 the AMX tile GEMM's panels.
// Written here because oneDNN's reorder (jit:uni) did this at 0.5 G
// elements/s, page faults on the new memory included (9 s of T5-XXL's load;
// docs/PERFORMANCE.md, eighth round); dst holds
// ⌈out/B⌉·B × ⌈in/32⌉·32 values.
void pack_bf16_ba16a_b2a(const void* w, bool w_bf16, int64_t out, int64_t in, int64_t block_out,
                         uint16_t* dst);
// Where output row `row` (a multiple of block_out) starts in that layout:
// the rows from there on pack as a matrix of their own at dst + this.
inline int64_t ba16a_b2a_offset(int64_t row, int64_t in, int64_t block_out) {
  return row / block_out * ((in + 31) / 32) * 32 * block_out;
}

// src converted into the calling thread's bf16 input buffer (64-byte aligned,
// grown as needed, shared by the layers that convert their f32 input), valid
// until the thread's next call.
const uint16_t* thread_bf16_copy(const float* src, size_t n);

}  // namespace xdit::kernels::cpu
