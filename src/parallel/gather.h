// Assembling sharded activations after a parallel forward.
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace xdit::parallel {

// All-gathers row slices [B, C, rows_i, W] over `group` into the whole
// [B, C, Σ rows_i, W], slices in rank order (sequence parallelism). `rows`
// holds every rank's height (empty: all equal to the local one).
Tensor gather_rows(comm::Communicator& group, const Tensor& local,
                   const std::vector<int64_t>& rows = {});

// Concatenates equal-sized f32 blocks from every rank of `group` along the
// first dimension, in rank order (CFG parallel's two halves).
Tensor gather_batch(comm::Communicator& group, const Tensor& local);

}  // namespace xdit::parallel
