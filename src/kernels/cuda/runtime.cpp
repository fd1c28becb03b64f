#include "kernels/cuda/runtime.h"

#include <cuda_runtime.h>

#include <utility>

#include "core/error.h"

namespace xdit::cuda {

namespace {

// One line: the call, CUDA's error name and its words.
[[noreturn]] void fail(const char* call, cudaError_t e, const std::string& more = "") {
  throw Error(std::string(call) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
              ")" + more);
}

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) fail(call, e);
}

}  // namespace

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    if (why != nullptr)
      *why = std::string("no CUDA device (driver error ") + std::to_string(static_cast<int>(e)) +
             ": " + cudaGetErrorString(e) + ")";
    return 0;
  }
  if (n == 0 && why != nullptr) *why = "no CUDA device (the driver reports none)";
  return n;
}

DeviceInfo device_info(int index) {
  set_device(index);
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, index), "cudaGetDeviceProperties");
  DeviceInfo d;
  d.name = p.name;
  d.sm_major = p.major;
  d.sm_minor = p.minor;
  d.multiprocessors = p.multiProcessorCount;
  check(cudaMemGetInfo(&d.free_bytes, &d.total_bytes), "cudaMemGetInfo");
  return d;
}

void set_device(int index) {
  std::string why;
  const int n = device_count(&why);
  if (n == 0) throw Error("--device cuda:" + std::to_string(index) + ": " + why);
  if (index < 0 || index >= n)
    throw Error("--device cuda:" + std::to_string(index) + " asked for, but there " +
                (n == 1 ? "is 1 device" : "are " + std::to_string(n) + " devices") +
                " (cuda:0 … cuda:" + std::to_string(n - 1) + ")");
  check(cudaSetDevice(index), "cudaSetDevice");
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t e = cudaMalloc(&ptr_, bytes);
  if (e != cudaSuccess) {
    ptr_ = nullptr;
    size_t free = 0, total = 0;
    cudaGetLastError();
    cudaMemGetInfo(&free, &total);
    fail("cudaMalloc", e,
         ": " + std::to_string(bytes >> 20) + " MiB asked, " + std::to_string(free >> 20) +
             " MiB free of " + std::to_string(total >> 20) + " MiB");
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
  if (bytes > bytes_)
    throw Error("DeviceBuffer::upload: " + std::to_string(bytes) + " bytes into " +
                std::to_string(bytes_));
  check(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (to device)");
}

void DeviceBuffer::download(void* host, size_t bytes) const {
  if (bytes > bytes_)
    throw Error("DeviceBuffer::download: " + std::to_string(bytes) + " bytes from " +
                std::to_string(bytes_));
  check(cudaMemcpy(host, ptr_, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (to host)");
}

void copy(void* dst, const void* src, size_t bytes, Stream s) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize (after a copy)");
}

void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
               size_t rows, Stream s) {
  if (rows == 0 || row_bytes == 0) return;
  check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDefault, s),
        "cudaMemcpy2DAsync");
}

void fill_bytes(void* dst, int value, size_t bytes, Stream s) {
  if (bytes == 0) return;
  check(cudaMemsetAsync(dst, value, bytes, s), "cudaMemsetAsync");
}

OwnedStream::OwnedStream() {
  check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
}

OwnedStream::~OwnedStream() {
  if (s_ != nullptr) cudaStreamDestroy(s_);
}

Event::Event(bool timing) {
  check(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming),
        "cudaEventCreateWithFlags");
}

Event::~Event() {
  if (e_ != nullptr) cudaEventDestroy(e_);
}

void Event::record(Stream s) {
  check(cudaEventRecord(e_, s), "cudaEventRecord");
}

void Event::wait(Stream s) const {
  check(cudaStreamWaitEvent(s, e_, 0), "cudaStreamWaitEvent");
}

void Event::synchronize() const {
  check(cudaEventSynchronize(e_), "cudaEventSynchronize");
}

float Event::ms_since(const Event& start) const {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start.e_, e_), "cudaEventElapsedTime");
  return ms;
}

void synchronize(Stream s) {
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail((std::string("launching ") + kernel).c_str(), e);
}

}  // namespace xdit::cuda
