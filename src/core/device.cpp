#include "core/device.h"

#include <cctype>

#include "core/error.h"
#ifdef XDIT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/runtime.h"
#endif

namespace xdit {

std::string Device::str() const {
  return cuda() ? "cuda:" + std::to_string(index) : "cpu";
}

Device parse_device(const std::string& text) {
  Device d;
  if (text == "cpu") return d;
  const std::string prefix = "cuda";
  if (text.rfind(prefix, 0) == 0) {
    d.kind = Device::Kind::kCuda;
    if (text.size() == prefix.size()) return d;
    const std::string n = text.substr(prefix.size() + 1);
    bool digits = text[prefix.size()] == ':' && !n.empty() && n.size() <= 4;
    for (const char c : n) digits = digits && std::isdigit(static_cast<unsigned char>(c));
    if (digits) {
      d.index = std::stoi(n);
      return d;
    }
  }
  XDIT_FAIL("--device must be cpu, cuda or cuda:N, got '", text, "'");
}

namespace {
thread_local Device t_current;
}  // namespace

Device current_device() {
  return t_current;
}

DeviceScope::DeviceScope(Device d) : previous_(t_current) {
  check_device(d);
  t_current = d;
}

DeviceScope::~DeviceScope() {
  t_current = previous_;
#ifdef XDIT_HAVE_CUDA
  if (previous_.cuda()) cudaSetDevice(previous_.index);
#endif
}

bool built_with_cuda() {
#ifdef XDIT_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

void check_device(const Device& d) {
  if (!d.cuda()) return;
#ifdef XDIT_HAVE_CUDA
  cuda::set_device(d.index);  // throws "--device cuda:N: no CUDA device (driver error …)"
#else
  XDIT_FAIL("--device ", d.str(),
            ": this xdit was built without the CUDA backend (no nvcc when CMake configured it)");
#endif
}

}  // namespace xdit
