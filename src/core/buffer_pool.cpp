#include "core/buffer_pool.h"

#include <cstdlib>
#include <map>
#include <mutex>

namespace xdit {

namespace {

struct Pool {
  std::mutex mu;
  std::multimap<std::size_t, void*> kept;  // size → block
  std::size_t bytes = 0;

  void drop_all() {
    for (auto& [size, p] : kept) std::free(p);
    kept.clear();
    bytes = 0;
  }
};

// Never destroyed: blocks may be released by objects destroyed after any
// static (other statics, OpenMP threads' thread-locals); what is kept at exit
// stays reachable from here.
Pool& pool() {
  static Pool* c = new Pool;
  return *c;
}

std::size_t rounded(std::size_t bytes) {
  return bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
}

}  // namespace

void* pool_alloc(std::size_t bytes) {
  bytes = rounded(bytes);
  if (bytes >= kPooledBufferMin) {
    Pool& c = pool();
    std::lock_guard<std::mutex> lock(c.mu);
    const auto it = c.kept.find(bytes);
    if (it != c.kept.end()) {
      void* p = it->second;
      c.kept.erase(it);
      c.bytes -= bytes;
      return p;
    }
    c.drop_all();
  }
  return std::aligned_alloc(64, bytes);
}

void pool_free(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  bytes = rounded(bytes);
  if (bytes >= kPooledBufferMin) {
    Pool& c = pool();
    std::lock_guard<std::mutex> lock(c.mu);
    c.kept.emplace(bytes, p);
    c.bytes += bytes;
    return;
  }
  std::free(p);
}

void release_pooled_buffers() noexcept {
  Pool& c = pool();
  std::lock_guard<std::mutex> lock(c.mu);
  c.drop_all();
}

std::size_t pooled_bytes() noexcept {
  Pool& c = pool();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.bytes;
}

}  // namespace xdit
