#include "parallel/gather.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace xdit::parallel {

int64_t latent_rows(const Shape& s) {
  XDIT_CHECK(s.size() >= 3, "latent rows of ", shape_str(s), ": expected [B, C, (F,) H, W]");
  int64_t rows = 1;
  for (size_t i = 2; i + 1 < s.size(); ++i) rows *= s[i];
  return rows;
}

Tensor take_rows(const Tensor& t, int64_t r0, int64_t r1) {
  const int64_t BC = t.dim(0) * t.dim(1), H = latent_rows(t.shape()), W = t.shape().back();
  XDIT_CHECK(0 <= r0 && r0 <= r1 && r1 <= H, "take_rows: rows [", r0, ", ", r1, ") outside the ", H,
             " of ", shape_str(t.shape()));
  const int64_t rows = r1 - r0;
  Tensor out = Tensor::empty({t.dim(0), t.dim(1), rows, W});
  for (int64_t bc = 0; bc < BC; ++bc)
    std::memcpy(out.data<float>() + bc * rows * W, t.data<float>() + (bc * H + r0) * W,
                static_cast<size_t>(rows * W) * 4);
  return out;
}

void put_rows(Tensor& t, const Tensor& rows, int64_t r0) {
  const int64_t BC = t.dim(0) * t.dim(1), H = latent_rows(t.shape()), W = t.shape().back();
  const int64_t n = rows.ndim() == 4 ? rows.dim(2) : -1;
  XDIT_CHECK(n >= 0 && rows.dim(0) == t.dim(0) && rows.dim(1) == t.dim(1) && rows.dim(3) == W &&
                 r0 >= 0 && r0 + n <= H,
             "put_rows: a slice ", shape_str(rows.shape()), " at row ", r0, " does not fit ",
             shape_str(t.shape()));
  for (int64_t bc = 0; bc < BC; ++bc)
    std::memcpy(t.data<float>() + (bc * H + r0) * W, rows.data<float>() + bc * n * W,
                static_cast<size_t>(n * W) * 4);
}

Tensor gather_rows(comm::Communicator& group, const Tensor& local,
                   const std::vector<int64_t>& rows) {
  const int n = group.size();
  if (n == 1) return local;
  const int64_t B = local.dim(0), C = local.dim(1), W = local.shape().back();
  const int64_t mine_rows = latent_rows(local.shape());
  std::vector<int64_t> h = rows;
  if (h.empty()) h.assign(static_cast<size_t>(n), mine_rows);
  XDIT_CHECK(static_cast<int>(h.size()) == n && h[static_cast<size_t>(group.rank())] == mine_rows,
             "gather_rows: ", mine_rows, " local rows against the split");
  // Every slice padded to the tallest, so that one all-gather of equal blocks moves them.
  const int64_t tall = *std::max_element(h.begin(), h.end()), total = [&] {
    int64_t t = 0;
    for (int64_t x : h) t += x;
    return t;
  }();
  const size_t count = static_cast<size_t>(B * C * tall * W);
  std::vector<float> mine(count, 0.0f), all(count * static_cast<size_t>(n));
  for (int64_t bc = 0; bc < B * C; ++bc)
    std::memcpy(mine.data() + bc * tall * W, local.data<float>() + bc * mine_rows * W,
                static_cast<size_t>(mine_rows * W) * 4);
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
