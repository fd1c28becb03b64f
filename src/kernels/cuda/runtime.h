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
struct CUevent_st;   // cudaEvent_t

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

// Copies between host and device memory or within a device (the direction
// comes from unified addressing). Synchronous on the host side: the copy is
// done when the call returns (it waits for the work queued on `s` first).
void copy(void* dst, const void* src, size_t bytes, Stream s = nullptr);
// `rows` rows of `row_bytes`, `src_pitch` / `dst_pitch` bytes apart; queued
// on `s` (device to device: the caller synchronises before a host reads).
void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
               size_t rows, Stream s = nullptr);
// Sets `bytes` bytes of device memory to `value`, queued on `s`.
void fill_bytes(void* dst, int value, size_t bytes, Stream s = nullptr);

// A stream of its own (non-blocking with respect to the legacy stream),
// destroyed with the object.
class OwnedStream {
 public:
  OwnedStream();
  ~OwnedStream();
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  Stream get() const { return s_; }

 private:
  Stream s_ = nullptr;
};

// An event: record on one stream, make another wait for it, or time the work
// between two events.
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(Stream s = nullptr);
  void wait(Stream s = nullptr) const;  // work queued on `s` later waits for the event
  void synchronize() const;             // the host waits
  float ms_since(const Event& start) const;

 private:
  CUevent_st* e_ = nullptr;
};

// Waits for all work on `s`; throws the first error of the work queued there
// (kernel launch failures included).
void synchronize(Stream s = nullptr);

// Throws when the last kernel launch failed (after each launch).
void check_launch(const char* kernel);

}  // namespace xdit::cuda
