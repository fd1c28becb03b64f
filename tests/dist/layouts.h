// The parallel layouts the distributed tests build, by their degrees.
#pragma once

#include <utility>
#include <vector>

#include "parallel/config.h"

namespace xdit::test::layouts {

using parallel::ParallelConfig;

inline ParallelConfig layout(int dp, bool cfg, int u, int r, int pp = 1, int m = 0,
                             int warmup = 1) {
  ParallelConfig c;
  c.data_parallel_degree = dp;
  c.use_cfg_parallel = cfg;
  c.ulysses_degree = u;
  c.ring_degree = r;
  c.pipefusion_parallel_degree = pp;
  c.num_pipeline_patch = m;
  if (pp > 1) c.warmup_steps = warmup;  // PipeFusion's flag (a no-op elsewhere)
  return c;
}

// Patch parallelism over n ranks (DistriFusion "displaced" or "naive").
inline ParallelConfig patch(int dp, bool cfg, int n, bool full_sync, int warmup = 1) {
  ParallelConfig c = layout(dp, cfg, 1, 1);
  c.patch_parallel_degree = n;
  c.patch_mode = "displaced";
  c.full_sync = full_sync;
  if (!full_sync) c.warmup_steps = warmup;  // full_sync: every step synchronous already
  return c;
}

// Uneven devices: rows in proportion to the weights.
inline ParallelConfig weighted(ParallelConfig c, std::vector<double> w) {
  c.patch_weights = std::move(w);
  return c;
}

// --patch_weights auto.
inline ParallelConfig auto_weighted(ParallelConfig c) {
  c.auto_weights = true;
  return c;
}

}  // namespace xdit::test::layouts
