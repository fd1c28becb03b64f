// Fast f32 → bf16 array conversion (round to nearest even), dispatched at run
// time to AVX-512-bf16 / AVX-512 / plain code.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xdit::kernels::cpu {

void f32_to_bf16_array(const float* src, uint16_t* dst, size_t n);

// src converted into the calling thread's bf16 input buffer (64-byte aligned,
// grown as needed, shared by the layers that convert their f32 input), valid
// until the thread's next call.
const uint16_t* thread_bf16_copy(const float* src, size_t n);

}  // namespace xdit::kernels::cpu
