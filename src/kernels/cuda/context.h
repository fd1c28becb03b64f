// Per-device state of the CUDA backend that the op set shares: the cuBLASLt
// GEMM (handle, plans, workspace), the cuDNN SDPA and convolution (handles,
// plans) and
// growable scratch buffers for conversions around them. One set per device
// and host thread, made on first use on the thread's current device.
#pragma once

#include <cstddef>

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

}  // namespace xdit::kernels::cuda
