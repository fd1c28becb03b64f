#include "core/device.h"

#include <cctype>

#include "core/error.h"

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
// Constant-initialised, so registering from another file's static
// initialiser cannot run before it.
constinit const DeviceRuntime* g_runtime = nullptr;
}  // namespace

void set_device_runtime(const DeviceRuntime* runtime) {
  g_runtime = runtime;
}

const DeviceRuntime* device_runtime() {
  return g_runtime;
}

DeviceMemory device_memory(int index) {
  XDIT_CHECK(g_runtime != nullptr, "cuda:", index,
             ": this xdit was built without the CUDA backend (no nvcc when CMake configured it)");
  return g_runtime->memory(index);
}

void wait_for_device(const Device& d) {
  if (!d.cuda() || g_runtime == nullptr) return;
  if (t_current == d) {
    g_runtime->synchronize();
    return;
  }
  DeviceScope scope(d);
  g_runtime->synchronize();
}

Device current_device() {
  return t_current;
}

DeviceScope::DeviceScope(Device d) : previous_(t_current) {
  check_device(d);
  t_current = d;
}

DeviceScope::~DeviceScope() {
  t_current = previous_;
  if (previous_.cuda() && g_runtime != nullptr) g_runtime->restore_device(previous_.index);
}

bool built_with_cuda() {
  return g_runtime != nullptr;
}

void check_device(const Device& d) {
  if (!d.cuda()) return;
  if (g_runtime == nullptr)
    XDIT_FAIL("--device ", d.str(),
              ": this xdit was built without the CUDA backend (no nvcc when CMake configured it)");
  g_runtime->set_device(d.index);  // throws "--device cuda:N: no CUDA device (driver error …)"
}

}  // namespace xdit
