// Assembling sharded activations after a parallel forward, and the row
// slices of latents they are made of.
//
// Latents [B, C, F, H, W] split by token rows (docs/ARCHITECTURE.md, "The
// frame axis"): frame-major, frame × patch rows. With a patch of p latent
// pixels, token row t is the latent rows [t·p, (t+1)·p) of the frame-major
// row axis F·H, so for each (b, c) a range of token rows is one contiguous
// run of latent rows, which may cross frames. A slice of them is
// [B, C, rows, W] (rows of that axis); for an image (F = 1) the axis is H.
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace xdit::parallel {

// The rows of the frame-major row axis of [B, C, F, H, W] (F·H) or of a
// slice [B, C, rows, W] (rows).
int64_t latent_rows(const Shape& s);

// Latent rows [r0, r1) of `t` ([B, C, F, H, W] or a slice) as a slice
// [B, C, r1 − r0, W] (f32, host).
Tensor take_rows(const Tensor& t, int64_t r0, int64_t r1);

// Writes the slice `rows` [B, C, n, W] into latent rows [r0, r0 + n) of `t`.
void put_rows(Tensor& t, const Tensor& rows, int64_t r0);

// All-gathers row slices [B, C, rows_i, W] over `group` into the whole
// [B, C, Σ rows_i, W], slices in rank order (sequence parallelism; rows of
// the frame-major row axis, so a slice may cross frames). `rows` holds every
// rank's height (empty: all equal to the local one).
Tensor gather_rows(comm::Communicator& group, const Tensor& local,
                   const std::vector<int64_t>& rows = {});

// Concatenates equal-sized f32 blocks from every rank of `group` along the
// first dimension, in rank order (CFG parallel's two halves).
Tensor gather_batch(comm::Communicator& group, const Tensor& local);

}  // namespace xdit::parallel
