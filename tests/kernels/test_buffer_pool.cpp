// The pool of large buffers behind Tensor and AlignedVector (core/buffer_pool.h):
// a released block comes back for the same size, a size no kept block fits
// returns every kept block first (so nothing is held beyond an earlier peak),
// small blocks are never kept, and every block is 64-byte aligned.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "core/aligned.h"
#include "core/buffer_pool.h"
#include "core/tensor.h"

namespace xdit {
namespace {

constexpr size_t kBig = kPooledBufferMin + 4096 + 13;  // an odd size: rounded up to 64

TEST(BufferPool, SameSizeIsReusedOtherSizesDropTheKeptBlocks) {
  release_pooled_buffers();
  void* a = pool_alloc(kBig);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  std::memset(a, 7, kBig);
  pool_free(a, kBig);
  EXPECT_GE(pooled_bytes(), kBig);
  void* b = pool_alloc(kBig);
  EXPECT_EQ(b, a) << "the kept block of the same size is handed out again";
  EXPECT_EQ(pooled_bytes(), 0u);
  pool_free(b, kBig);
  void* c = pool_alloc(kBig + 64 * 1024);  // no kept block fits: they are returned first
  EXPECT_EQ(pooled_bytes(), 0u);
  pool_free(c, kBig + 64 * 1024);
  release_pooled_buffers();
  EXPECT_EQ(pooled_bytes(), 0u);
}

TEST(BufferPool, SmallBlocksAreNotKept) {
  release_pooled_buffers();
  void* p = pool_alloc(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  pool_free(p, 1000);
  EXPECT_EQ(pooled_bytes(), 0u);
}

TEST(BufferPool, TensorsAndBuffersGoThroughIt) {
  release_pooled_buffers();
  const int64_t n = static_cast<int64_t>(kPooledBufferMin / 4) + 100;
  const void* first = nullptr;
  {
    Tensor t = Tensor::empty({n});
    first = t.raw();
  }
  EXPECT_GT(pooled_bytes(), 0u);
  {
    Tensor t = Tensor::empty({n});
    EXPECT_EQ(t.raw(), first);
  }
  AlignedVector<float> v;
  grow_discarding(v, static_cast<size_t>(n));  // the tensor's bytes: its kept block again
  EXPECT_EQ(static_cast<const void*>(v.data()), first);
  grow_discarding(v, static_cast<size_t>(n) / 2);  // large enough already: kept as is
  EXPECT_EQ(static_cast<const void*>(v.data()), first);
  AlignedVector<float>().swap(v);
  release_pooled_buffers();
}

}  // namespace
}  // namespace xdit
