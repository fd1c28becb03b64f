// First-Block-Cache, as diffusers' FirstBlockCacheConfig(threshold) applies
// it (hooks/first_block_cache.py; docs/research/step_caches.md §1):
//   - the head is block 0. r = its image-stream output − its input;
//   - ratio = mean|r − r_prev| / mean|r_prev| over the context's image rows,
//     r_prev from the last step that ran every block (the first step of a
//     run always runs them);
//   - ratio > threshold: run every block, keep r as r_prev and the tail
//     residual (the last block's output − the head's output) of the text and
//     image streams;
//   - otherwise skip blocks 1 … end and add the kept tail residual to the
//     head's output.
// Contexts, rank groups, PipeFusion stages and state by row: residual_cache.h
// (stage 0's residual runs from the head's output).
#pragma once

#include "pipeline/residual_cache.h"

namespace xdit::pipeline {

class FirstBlockCache final : public ResidualCache {
 public:
  FirstBlockCache(double threshold, CacheSetup setup);

  void after_block(int64_t b, models::Streams& s) override;

 private:
  bool wants_skip(size_t c, double change, double reference, double& indicator) override;
  void call_began(const models::Streams& s) override;
  void sized(const Shape& whole) override;
  // The head ran (stage 0): a new step's decision, and r_prev moves where
  // the step computes.
  void head_ran(const models::Streams& s);

  double threshold_;
  RowReference previous_;    // r_prev
  Tensor input_, residual_;  // host: this call's head input and residual (image rows)
};

}  // namespace xdit::pipeline
