// Where a run computes: the CPU, or a CUDA device. Parsed from --device
// (cpu, cuda, cuda:N) and checked against this build and this machine
// before anything loads.
#pragma once

#include <cstddef>
#include <memory>
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

// The host waits for the work this thread queued on `d` (a CUDA device's
// compute stream; nothing on the CPU): host clocks around it then time the
// device's work, not its queueing.
void wait_for_device(const Device& d);

// Whether this build has the CUDA backend (nvcc was found at configure time):
// whether a DeviceRuntime is registered.
bool built_with_cuda();

// A device's name and memory, for messages and memory checks.
struct DeviceMemory {
  std::string name;
  size_t free_bytes = 0, total_bytes = 0;
};

// Device memory: `data` stays valid while `owner` lives.
struct DeviceAllocation {
  std::shared_ptr<void> owner;
  void* data = nullptr;
};

// What core needs of a device backend: core sits below the kernels, so it
// reaches the CUDA runtime only through this interface, which the CUDA
// backend (kernels/cuda/device_runtime.cpp) implements and registers before
// main. Errors are one-line xdit::Error, as the backend words them.
class DeviceRuntime {
 public:
  // Devices there are; 0 with `why` (when given) saying what the runtime reported.
  virtual int device_count(std::string* why) const = 0;
  // Throws when `index` is not a device.
  virtual DeviceMemory memory(int index) const = 0;
  // Makes `index` this thread's current device; throws one line when it cannot.
  virtual void set_device(int index) const = 0;
  // The same without checking: for DeviceScope's destructor, which restores
  // a device that was current before.
  virtual void restore_device(int index) const noexcept = 0;
  // `bytes` bytes of the current device's memory; throws one line (with what
  // is free) when it cannot.
  virtual DeviceAllocation allocate(size_t bytes) const = 0;
  // Copies between host and device memory or within a device; done when it returns.
  virtual void copy(void* dst, const void* src, size_t bytes) const = 0;
  // Sets `bytes` bytes of device memory to zero.
  virtual void zero(void* dst, size_t bytes) const = 0;
  // The host waits for the work queued on the current device's compute
  // stream (not the communicators' own streams).
  virtual void synchronize() const = 0;

 protected:
  // Not virtual: a runtime is a static that is never deleted through this
  // interface, and a trivial destructor keeps it usable while other statics
  // are destroyed at exit.
  ~DeviceRuntime() = default;
};

// Registers the backend (once, during static initialisation); nullptr unregisters.
void set_device_runtime(const DeviceRuntime* runtime);
// The registered backend; nullptr in a build without one.
const DeviceRuntime* device_runtime();
// The memory of CUDA device `index`; throws in a build without the backend.
DeviceMemory device_memory(int index);

}  // namespace xdit
