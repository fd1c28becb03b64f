#include "kernels/cuda/context.h"

#include <cuda_runtime.h>

#include <array>
#include <map>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cuda/ops.h"

namespace xdit::kernels::cuda {

namespace {

struct DeviceState {
  std::unique_ptr<Gemm> gemm;
#ifdef XDIT_HAVE_CUDNN_FE
  std::unique_ptr<Sdpa> sdpa;
  std::unique_ptr<Conv> conv;
#endif
  std::array<xdit::cuda::DeviceBuffer, static_cast<size_t>(ScratchSlot::kCount)> scratch;
};

DeviceState& state() {
  thread_local std::map<int, DeviceState> states;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) throw Error("cudaGetDevice failed: no current device");
  return states[dev];
}

}  // namespace

Gemm& device_gemm() {
  DeviceState& s = state();
  if (!s.gemm) s.gemm = std::make_unique<Gemm>();
  return *s.gemm;
}

#ifdef XDIT_HAVE_CUDNN_FE
Sdpa& device_sdpa() {
  DeviceState& s = state();
  if (!s.sdpa) s.sdpa = std::make_unique<Sdpa>();
  return *s.sdpa;
}

Conv& device_conv() {
  DeviceState& s = state();
  if (!s.conv) s.conv = std::make_unique<Conv>();
  return *s.conv;
}
#endif

void* device_scratch(ScratchSlot slot, size_t bytes) {
  auto& buf = state().scratch[static_cast<size_t>(slot)];
  if (buf.bytes() < bytes) {
    buf = xdit::cuda::DeviceBuffer();  // free first: the peak is the new size, not both
    buf = xdit::cuda::DeviceBuffer(bytes);
  }
  return buf.data();
}

const uint16_t* bf16_rows_in(ScratchSlot slot, const float* x, int64_t stride, int64_t rows,
                             int64_t n, Stream s) {
  auto* y = static_cast<uint16_t*>(device_scratch(slot, static_cast<size_t>(rows * n) * 2));
  to_bf16_rows(x, stride, rows, n, y, s);
  return y;
}

xdit::cuda::DeviceBuffer upload_values(const float* host, size_t n, bool bf16) {
  xdit::cuda::DeviceBuffer d(n * (bf16 ? 2 : 4));
  if (!bf16) {
    d.upload(host, n * 4);
    return d;
  }
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16(host[i]);  // inline, header only
  d.upload(h.data(), n * 2);
  return d;
}

}  // namespace xdit::kernels::cuda
