// The large-block cache behind Tensor and AlignedVector (core/block_cache.h):
// a released block comes back for the same size, a size no kept block fits
// returns every kept block first (so nothing is held beyond an earlier peak),
// small blocks are never kept, and every block is 64-byte aligned.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "core/aligned.h"
#include "core/block_cache.h"
#include "core/tensor.h"

namespace xdit {
namespace {

constexpr size_t kBig = kCachedBlockMin + 4096 + 13;  // an odd size: rounded up to 64

TEST(BlockCache, SameSizeIsReusedOtherSizesDropTheKeptBlocks) {
  release_cached_blocks();
  void* a = block_alloc(kBig);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  std::memset(a, 7, kBig);
  block_free(a, kBig);
  EXPECT_GE(cached_block_bytes(), kBig);
  void* b = block_alloc(kBig);
  EXPECT_EQ(b, a) << "the kept block of the same size is handed out again";
  EXPECT_EQ(cached_block_bytes(), 0u);
  block_free(b, kBig);
  void* c = block_alloc(kBig + 64 * 1024);  // no kept block fits: they are returned first
  EXPECT_EQ(cached_block_bytes(), 0u);
  block_free(c, kBig + 64 * 1024);
  release_cached_blocks();
  EXPECT_EQ(cached_block_bytes(), 0u);
}

TEST(BlockCache, SmallBlocksAreNotKept) {
  release_cached_blocks();
  void* p = block_alloc(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  block_free(p, 1000);
  EXPECT_EQ(cached_block_bytes(), 0u);
}

TEST(BlockCache, TensorsAndBuffersGoThroughIt) {
  release_cached_blocks();
  const int64_t n = static_cast<int64_t>(kCachedBlockMin / 4) + 100;
  const void* first = nullptr;
  {
    Tensor t = Tensor::empty({n});
    first = t.raw();
  }
  EXPECT_GT(cached_block_bytes(), 0u);
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
  release_cached_blocks();
}

}  // namespace
}  // namespace xdit
