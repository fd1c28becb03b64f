// Per-device state of the CUDA backend that the op set shares: the cuBLASLt
// GEMM (handle, plans, workspace), the cuDNN SDPA and convolution (handles,
// plans) and
// growable scratch buffers for conversions around them. One set per device
// and host thread, made on first use on the thread's current device.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/gemm.h"
#ifdef XDIT_HAVE_CUDNN_FE
#include "kernels/cuda/conv.h"
#include "kernels/cuda/sdpa.h"
#endif

namespace xdit::kernels::cuda {

Gemm& device_gemm();
#ifdef XDIT_HAVE_CUDNN_FE
Sdpa& device_sdpa();
Conv& device_conv();
#endif

// Scratch slots of the current device, each grown (never shrunk) to the
// largest size asked; the memory stays valid until the slot grows again.
enum class ScratchSlot { kLinearIn, kAttnQ, kAttnK, kAttnV, kAttnO, kMoments, kCount };
void* device_scratch(ScratchSlot slot, size_t bytes);

// `rows` rows of n f32 values (`stride` apart) as packed bf16 rows in
// `slot`: the bf16 operand of a GEMM, convolution or attention call.
const uint16_t* bf16_rows_in(ScratchSlot slot, const float* x, int64_t stride, int64_t rows,
                             int64_t n, Stream s);

// n host f32 values (weights, biases) uploaded once: rounded to bf16 when
// `bf16` (nearest even, as the CPU's conversion), else as they are.
xdit::cuda::DeviceBuffer upload_values(const float* host, size_t n, bool bf16);

}  // namespace xdit::kernels::cuda
