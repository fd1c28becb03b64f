// The CUDA runtime (runtime.h) as core's DeviceRuntime (core/device.h):
// core sits below the kernels and cannot include the backend, so the
// backend registers itself with core during static initialisation.
//
// A registrar in a static library is linked only when something references
// its object file, and nothing does: core calls it through the interface.
// So CMakeLists.txt passes the linker `-u xdit_cuda_device_runtime_anchor`
// on every link that uses xdit_cuda (an INTERFACE link option), which pulls
// this object in; the registrar below then runs before main.
#include <cuda_runtime_api.h>

#include <memory>

#include "core/device.h"
#include "kernels/cuda/runtime.h"

namespace xdit::cuda {

namespace {

class CudaRuntime final : public DeviceRuntime {
 public:
  int device_count(std::string* why) const override { return cuda::device_count(why); }

  DeviceMemory memory(int index) const override {
    const DeviceInfo info = device_info(index);
    return {info.name, info.free_bytes, info.total_bytes};
  }

  void set_device(int index) const override { cuda::set_device(index); }

  void restore_device(int index) const noexcept override { cudaSetDevice(index); }

  DeviceAllocation allocate(size_t bytes) const override {
    auto buf = std::make_shared<DeviceBuffer>(bytes);  // throws one line when it cannot
    void* data = buf->data();
    return {std::move(buf), data};
  }

  void copy(void* dst, const void* src, size_t bytes) const override {
    cuda::copy(dst, src, bytes);
  }

  void zero(void* dst, size_t bytes) const override { fill_bytes(dst, 0, bytes); }
  void synchronize() const override { cuda::synchronize(); }
};

// Constant-initialised and trivially destructible: usable from any static
// initialiser or destructor.
constexpr CudaRuntime kRuntime{};

const struct Registrar {
  Registrar() { set_device_runtime(&kRuntime); }
} registrar;

}  // namespace

}  // namespace xdit::cuda

// The symbol the linker is told to keep (see the top of this file).
extern "C" void xdit_cuda_device_runtime_anchor() {}
