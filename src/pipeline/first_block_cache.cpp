#include "pipeline/first_block_cache.h"

#include <cstring>

#include "core/error.h"
#include "kernels/kernels.h"

namespace xdit::pipeline {

FirstBlockCache::FirstBlockCache(double threshold, CacheSetup setup)
    : ResidualCache("First-Block-Cache", 1, std::move(setup)), threshold_(threshold) {}

void FirstBlockCache::sized(const Shape& whole) {
  previous_ = Tensor::empty(whole);
  previous_stamp_ = no_stamps();
}

void FirstBlockCache::call_began(const models::Streams& s) {
  // The head's image input, on the host, for its residual.
  const int64_t L = s.x.dim(1), N = L - text_;
  if (!input_.defined() || input_.shape() != Shape{batch_, N, width_})
    input_ = Tensor::empty({batch_, N, width_});
  const Tensor x = s.x.to_device(Device{});
  for (int64_t b = 0; b < batch_; ++b)
    std::memcpy(input_.data<float>() + b * N * width_, x.data<float>() + (b * L + text_) * width_,
                static_cast<size_t>(N * width_) * sizeof(float));
}

void FirstBlockCache::after_block(int64_t b, models::Streams& s) {
  if (setup_.stage.first && b == 0) head_ran(s);
  // (A stage 0 of the head alone ends at the head: nothing ran after it on
  // a skipped step, and its residual is zero.)
  ResidualCache::after_block(b, s);
}

void FirstBlockCache::head_ran(const models::Streams& s) {
  const int64_t L = s.x.dim(1), N = L - text_;
  const auto ctx = contexts(batch_);
  const Tensor x = s.x.to_device(Device{});
  if (residual_.numel() != input_.numel()) residual_ = Tensor::empty(input_.shape());
  // Per context: Σ|r − r_prev| and Σ|r_prev| over its image rows here.
  std::vector<double> sums(2 * ctx.size(), 0.0);
  for (size_t c = 0; c < ctx.size(); ++c) {
    const bool reference = new_step_ && rows_stamped(previous_stamp_, c, last_full_[c]);
    for (int64_t b = ctx[c].first; b < ctx[c].second; ++b)
      kernels::residual_change(x.data<float>() + (b * L + text_) * width_,
                               input_.data<float>() + b * N * width_,
                               reference ? whole_rows(previous_, b) : nullptr,
                               residual_.data<float>() + b * N * width_, N * width_, &sums[2 * c]);
    if (!reference) sums[2 * c + 1] = 0;  // no reference here: this rank votes to compute
  }
  if (new_step_) decide(sums);
  for (size_t c = 0; c < ctx.size(); ++c) {
    if (!computes_[c]) continue;
    // The reference moves only where the step runs every block.
    for (int64_t b = ctx[c].first; b < ctx[c].second; ++b)
      std::memcpy(whole_rows(previous_, b), residual_.data<float>() + b * N * width_,
                  static_cast<size_t>(N * width_) * sizeof(float));
    mark_rows(previous_stamp_, c);
  }
  mark_start(s);
}

bool FirstBlockCache::wants_skip(size_t c, double change, double reference, double& indicator) {
  // diffusers: compute when ratio > threshold. A rank without a reference
  // sent Σ|r_prev| = 0 for its rows.
  if (!(reference > 0) || !rows_stamped(previous_stamp_, c, last_full_[c])) return false;
  indicator = change / reference;
  return !(indicator > threshold_);
}

}  // namespace xdit::pipeline
