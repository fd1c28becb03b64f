// std::vector storage aligned to 64 bytes (a cache line, an AVX-512 vector).
// oneDNN's AMX kernels run about half as fast on operands that start 16 bytes
// past a cache line, which is where glibc's malloc puts large blocks; every
// buffer a GEMM reads or writes is therefore one of these.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace xdit {

inline constexpr std::size_t kBufferAlignment = 64;

template <class T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kBufferAlignment)));
  }
  void deallocate(T* p, std::size_t) noexcept {
    ::operator delete(p, std::align_val_t(kBufferAlignment));
  }
  template <class U>
  bool operator==(const AlignedAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace xdit
