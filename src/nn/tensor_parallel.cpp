#include "nn/tensor_parallel.h"

#include "core/error.h"

namespace xdit::nn {

int64_t TensorParallel::part(int64_t n, const std::string& what) const {
  check_divisible(n, size, what, "--tensor_parallel_degree");
  return n / size;
}

void TensorParallel::all_reduce(float* x, int64_t n) const {
  if (size == 1) return;
  XDIT_CHECK(comm != nullptr,
             "tensor parallelism: this model was loaded without its group "
             "(load-only), so it cannot run");
  comm->allreduce_sum(x, static_cast<size_t>(n));
}

void check_divisible(int64_t n, int64_t degree, const std::string& what, const std::string& flag) {
  if (degree <= 1) return;
  XDIT_CHECK(degree <= n, flag, " ", degree, " is larger than the ", n, " ", what,
             ": each rank needs at least one; use a degree that divides ", n);
  XDIT_CHECK(n % degree == 0, "the ", n, " ", what, " are not divisible by ", flag, " ", degree,
             ": use a degree that divides ", n);
}

}  // namespace xdit::nn
