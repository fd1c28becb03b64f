#include "parallel/gather.h"

#include <cstring>
#include <vector>

namespace xdit::parallel {

Tensor gather_rows(comm::Communicator& group, const Tensor& local) {
  const int n = group.size();
  if (n == 1) return local;
  const int64_t B = local.dim(0), C = local.dim(1), rows = local.dim(2), W = local.dim(3);
  const size_t count = static_cast<size_t>(local.numel());
  std::vector<float> all(count * static_cast<size_t>(n));
  group.allgather(local.data<float>(), all.data(), count, comm::Type::kF32);
  Tensor out = Tensor::empty({B, C, rows * n, W});
  for (int i = 0; i < n; ++i)
    for (int64_t bc = 0; bc < B * C; ++bc)
      std::memcpy(out.data<float>() + (bc * rows * n + i * rows) * W,
                  all.data() + static_cast<size_t>(i) * count + static_cast<size_t>(bc * rows * W),
                  static_cast<size_t>(rows * W) * 4);
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
