// std::vector storage aligned to 64 bytes (a cache line, an AVX-512 vector).
// oneDNN's AMX kernels run about half as fast on operands that start 16 bytes
// past a cache line, which is where glibc's malloc puts large blocks; every
// buffer a GEMM reads or writes is therefore one of these.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

#include "core/buffer_pool.h"

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
    void* p = pool_alloc(n * sizeof(T));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept { pool_free(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const AlignedAllocator<U>&) const noexcept {
    return true;
  }
};

template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

// Grows a reusable buffer to at least n elements, discarding its contents:
// the old block is released before the new one is allocated, so the two are
// never held together (std::vector::resize would copy, holding both).
template <class T>
void grow_discarding(AlignedVector<T>& v, std::size_t n) {
  if (v.size() >= n) return;
  AlignedVector<T>().swap(v);
  v.resize(n);
}

}  // namespace xdit
