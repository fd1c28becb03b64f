// The CUDA runtime as xdit uses it: which devices there are, device memory
// (owning buffers) and streams. Only cudart (linked shared) is used, never
// the driver library directly, so a binary built with the backend starts on
// machines without a GPU or driver and says why when a device is asked for.
// Errors are xdit::Error with one line naming the call and CUDA's words.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

struct CUstream_st;  // cudaStream_t without cuda_runtime.h in every includer

namespace xdit::cuda {

using Stream = CUstream_st*;  // nullptr: the legacy default stream

// Devices cudart sees. 0 when none, with `why` (when given) saying what the
// runtime reported, e.g. "no CUDA device (driver error 35: CUDA driver
// version is insufficient for CUDA runtime version)".
int device_count(std::string* why = nullptr);

struct DeviceInfo {
  std::string name;
  int sm_major = 0, sm_minor = 0, multiprocessors = 0;
  size_t total_bytes = 0, free_bytes = 0;
};
// Throws when `index` is not a device.
DeviceInfo device_info(int index);

// Makes `index` this thread's current device; throws with the count when it
// is not one ("cuda:3 asked for, 2 devices").
void set_device(int index);

// Device memory of `bytes` bytes (cudaMalloc), freed on destruction. A
// failing allocation says how much was asked and how much is free.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

  // Host ↔ device copies of the whole buffer (synchronous).
  void upload(const void* host, size_t bytes);
  void download(void* host, size_t bytes) const;

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Waits for all work on `s`; throws the first error of the work queued there
// (kernel launch failures included).
void synchronize(Stream s = nullptr);

// Throws when the last kernel launch failed (after each launch).
void check_launch(const char* kernel);

}  // namespace xdit::cuda
