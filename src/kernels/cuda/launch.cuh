// Launch shapes the CUDA op files (elementwise.cu, norms.cu, layout.cu)
// share: the block size, grid extents, and launch macros that check each
// launch.
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"

namespace xdit::kernels::cuda {

constexpr int kThreads = 256;  // per block: 8 warps

// A grid's y extent for `rows` rows (at most 65535: kernels loop over the rest).
inline unsigned grid_rows(int64_t rows) {
  return static_cast<unsigned>(rows < 65535 ? rows : 65535);
}

inline unsigned elementwise_blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

}  // namespace xdit::kernels::cuda

// One block of kThreads per row.
#define XDIT_LAUNCH_ROWS(kernel, rows, s, ...)                            \
  do {                                                                    \
    if ((rows) == 0) return;                                              \
    kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(__VA_ARGS__); \
    xdit::cuda::check_launch(#kernel);                                    \
  } while (0)

#define XDIT_LAUNCH(kernel, n, s, ...)                              \
  do {                                                              \
    if ((n) == 0) return;                                           \
    kernel<<<elementwise_blocks(n), kThreads, 0, s>>>(__VA_ARGS__); \
    xdit::cuda::check_launch(#kernel);                              \
  } while (0)
