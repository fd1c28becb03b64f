#include "parallel/gather.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace xdit::parallel {

Tensor gather_rows(comm::Communicator& group, const Tensor& local,
                   const std::vector<int64_t>& rows) {
  const int n = group.size();
  if (n == 1) return local;
  const int64_t B = local.dim(0), C = local.dim(1), W = local.dim(3);
  std::vector<int64_t> h = rows;
  if (h.empty()) h.assign(static_cast<size_t>(n), local.dim(2));
  XDIT_CHECK(
      static_cast<int>(h.size()) == n && h[static_cast<size_t>(group.rank())] == local.dim(2),
      "gather_rows: ", local.dim(2), " local rows against the split");
  // Every slice padded to the tallest, so that one all-gather of equal blocks moves them.
  const int64_t tall = *std::max_element(h.begin(), h.end()), total = [&] {
    int64_t t = 0;
    for (int64_t x : h) t += x;
    return t;
  }();
  const size_t count = static_cast<size_t>(B * C * tall * W);
  std::vector<float> mine(count, 0.0f), all(count * static_cast<size_t>(n));
  for (int64_t bc = 0; bc < B * C; ++bc)
    std::memcpy(mine.data() + bc * tall * W, local.data<float>() + bc * local.dim(2) * W,
                static_cast<size_t>(local.dim(2) * W) * 4);
  group.allgather(mine.data(), all.data(), count, comm::Type::kF32);
  Tensor out = Tensor::empty({B, C, total, W});
  int64_t at = 0;
  for (int i = 0; i < n; ++i) {
    const int64_t hi = h[static_cast<size_t>(i)];
    for (int64_t bc = 0; bc < B * C; ++bc)
      std::memcpy(out.data<float>() + (bc * total + at) * W,
                  all.data() + static_cast<size_t>(i) * count + static_cast<size_t>(bc * tall * W),
                  static_cast<size_t>(hi * W) * 4);
    at += hi;
  }
  return out;
}

Tensor gather_batch(comm::Communicator& group, const Tensor& local) {
  if (group.size() == 1) return local;
  Shape s = local.shape();
  s[0] *= group.size();
  Tensor out = Tensor::empty(s);
  group.allgather(local.data<float>(), out.data<float>(), static_cast<size_t>(local.numel()),
                  comm::Type::kF32);
  return out;
}

}  // namespace xdit::parallel
