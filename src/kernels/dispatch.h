// How the op set reaches the CUDA backend: each op of kernels.h starts with
// XDIT_CUDA_OP(op(args…)), which runs the CUDA op of kernels/cuda/ops.h
// and returns when this thread's current device (DeviceScope) is a CUDA
// device, and does nothing in builds without the backend.
#pragma once

#include "core/device.h"
#ifdef XDIT_HAVE_CUDA
#include "kernels/cuda/ops.h"
#define XDIT_CUDA_OP(call) \
  if (::xdit::current_device().cuda()) return ::xdit::kernels::cuda::call
#else
#define XDIT_CUDA_OP(call) (void)0
#endif

namespace xdit::kernels {

// Whether this thread's ops run on a CUDA device.
inline bool on_cuda() {
  return current_device().cuda();
}

}  // namespace xdit::kernels
