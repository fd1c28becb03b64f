// Where a run computes: the CPU, or a CUDA device. Parsed from --device
// (cpu, cuda, cuda:N) and checked against this build and this machine
// before anything loads.
#pragma once

#include <string>

namespace xdit {

struct Device {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;  // cuda:N
  bool cuda() const { return kind == Kind::kCuda; }
  std::string str() const;  // "cpu", "cuda:0"
  bool operator==(const Device& o) const { return kind == o.kind && (!cuda() || index == o.index); }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

// "cpu", "cuda" (= cuda:0) or "cuda:N"; throws one line for anything else.
Device parse_device(const std::string& text);

// Throws one line when `d` cannot be used here: a build without the CUDA
// backend, or no CUDA device ("no CUDA device (driver error 35: …)"), or
// an index past the devices there are.
void check_device(const Device& d);

// The device this thread's ops run on and new activations are allocated
// on: the CPU unless a DeviceScope says otherwise. The op set (kernels.h)
// and Linear dispatch on it, so the model files are the same for every
// backend: their pointers are host or device memory as the scope says.
Device current_device();

// Makes `d` this thread's current device for the scope's lifetime (for a
// CUDA device also cudart's current device); the previous one comes back at
// the end. Throws one line when `d` cannot be used (check_device).
class DeviceScope {
 public:
  explicit DeviceScope(Device d);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  Device previous_;
};

// Whether this build has the CUDA backend (nvcc was found at configure time).
bool built_with_cuda();

}  // namespace xdit
