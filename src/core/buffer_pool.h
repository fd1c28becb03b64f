// Reuse of large buffers between layers. A layer-by-layer decoder (the VAE at
// 1024 px) frees and allocates tensors of the same few sizes hundreds of
// times; each one of hundreds of MB went back to the kernel (glibc maps
// blocks that large) and came back as fresh zeroed pages, so page faults and
// page clearing were a fifth of the decoder's time.
//
// Blocks of at least kPooledBufferMin bytes are kept when released and handed
// out again for a request of exactly the same size. A request that no kept
// block fits first returns every kept block to the system: the memory held
// (in use + kept) therefore never exceeds what was in use at some earlier
// moment, so the peak is no higher than without the pool.
#pragma once

#include <cstddef>

namespace xdit {

inline constexpr std::size_t kPooledBufferMin = std::size_t{32} << 20;

// 64-byte aligned, at least `bytes` (rounded up to 64); nullptr when the
// system has no memory left.
void* pool_alloc(std::size_t bytes);
// Releases a block from pool_alloc with the same `bytes`.
void pool_free(void* p, std::size_t bytes) noexcept;
// Returns every kept block to the system (when a phase of work ends).
void release_pooled_buffers() noexcept;
// Bytes kept for reuse now.
std::size_t pooled_bytes() noexcept;

}  // namespace xdit
