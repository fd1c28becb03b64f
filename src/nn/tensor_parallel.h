// Tensor parallelism (Megatron-style): a rank's share of a layer's weights
// and the all-reduce that joins the shares. A column-parallel linear keeps
// rows [r·out/T, (r+1)·out/T) of W [out, in] (its share of the heads or
// hidden units, whole outputs); a row-parallel linear keeps the matching
// columns of the next W, so its outputs are partial sums that one all-reduce
// over the T ranks completes (docs/ARCHITECTURE.md, "Tensor parallelism").
#pragma once

#include <cstdint>
#include <string>

#include "comm/communicator.h"

namespace xdit::nn {

struct TensorParallel {
  int rank = 0;  // this rank's share
  int size = 1;  // T: 1 = the whole layer
  // The T ranks that share the layers; null with size 1, or when only
  // loading (weight-memory figures for layouts larger than this job).
  comm::Communicator* comm = nullptr;

  // The shares of the tensor-parallel group `c`.
  static TensorParallel of(comm::Communicator& c) { return {c.rank(), c.size(), &c}; }
  bool split() const { return size > 1; }
  // n / T, or one line naming `what` when T does not divide it (what: "the
  // transformer's attention heads"; a value checked before loading anyway).
  int64_t part(int64_t n, const std::string& what) const;
  // The first of this rank's part(n) elements.
  int64_t begin(int64_t n) const { return n / size * rank; }
  // Sums the T ranks' partial results in place (nothing with size 1).
  void all_reduce(float* x, int64_t n) const;
};

// One line (thrown) when `n` units named `what` (e.g. "attention heads of the
// transformer") cannot be split over `degree` ranks of `flag`; `degree` 1
// always passes.
void check_divisible(int64_t n, int64_t degree, const std::string& what, const std::string& flag);

}  // namespace xdit::nn
