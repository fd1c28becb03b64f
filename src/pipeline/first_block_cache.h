// First-Block-Cache, as diffusers' FirstBlockCacheConfig(threshold) applies
// it (hooks/first_block_cache.py; docs/research/step_caches.md §1):
//   - the head is block 0. r = its image-stream output − its input;
//   - ratio = mean|r − r_prev| / mean|r_prev| over the context's image rows,
//     r_prev from the last call that ran every block (the first call of a
//     run always runs them);
//   - ratio > threshold: run every block, keep r as r_prev and, after the
//     last block, the tail residual (its output − the head's output) of the
//     text and image streams;
//   - otherwise skip blocks 1 … end and add the kept tail residual to the
//     head's output.
// A context is a range of the call's batch that decides for itself: the
// whole batch, or each CFG half (CacheSetup::contexts). When the halves
// disagree the call runs every block, and the half that skips takes the
// head's output plus its kept residual at the end, as its own call would.
// Under a row split the sums add up over the ranks; every rank that computes
// the blocks together takes the same decision (CacheSetup).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "pipeline/step_cache.h"

namespace xdit::pipeline {

class FirstBlockCache final : public StepCache {
 public:
  FirstBlockCache(double threshold, CacheSetup setup);

  void begin_loop(Denoiser& d) override;
  void before_step(const StepInfo& s) override;

  void begin_call(const models::DiTInputs& in, const models::Streams& s) override;
  void end_call(models::Streams& s) override;
  bool at_boundary(int64_t b) const override;
  models::BlockSkip before_block(int64_t b, models::Streams& s) override;
  void after_block(int64_t b, models::Streams& s) override;

 private:
  // The head ran: each context's indicator, agreed, decides.
  void decide(const models::Streams& s);
  // The last block ran: the computing contexts keep their tail residual,
  // the skipping ones take head + theirs.
  void finish(models::Streams& s);
  // The call's contexts as batch-item ranges.
  std::vector<std::pair<int64_t, int64_t>> contexts(int64_t batch) const;

  double threshold_;
  CacheSetup setup_;
  bool armed_ = false, active_ = false;
  // What the state was made for: batch, stream length and width, rows.
  std::vector<int64_t> key_, call_key_;
  Tensor input_;     // host: this call's image rows going into the head [B, N, D]
  Tensor residual_;  // host: this call's head residual r
  Tensor previous_;  // host: r_prev, per context from its last full call
  std::vector<bool> has_previous_;
  Tensor head_out_;  // the head's output this call (the streams' device)
  Tensor tail_;      // the kept tail residuals [B, T + N, D]
  std::vector<bool> computes_;
  bool skip_all_ = false;
  std::vector<double> ratios_;
};

}  // namespace xdit::pipeline
