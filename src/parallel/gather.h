// Assembling sharded activations after a parallel forward.
#pragma once

#include "comm/communicator.h"
#include "core/tensor.h"

namespace xdit::parallel {

// All-gathers row slices [B, C, rows, W] of equal height over `group` into the
// whole [B, C, rows·n, W], slices in rank order (sequence parallelism).
Tensor gather_rows(comm::Communicator& group, const Tensor& local);

// Concatenates equal-sized f32 blocks from every rank of `group` along the
// first dimension, in rank order (CFG parallel's two halves).
Tensor gather_batch(comm::Communicator& group, const Tensor& local);

}  // namespace xdit::parallel
