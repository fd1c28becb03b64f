#include "pipeline/first_block_cache.h"

#include <cstring>

#include "core/error.h"

namespace xdit::pipeline {

FirstBlockCache::FirstBlockCache(double threshold, CacheSetup setup)
    : ResidualCache("First-Block-Cache", 1, std::move(setup)), threshold_(threshold) {}

void FirstBlockCache::sized(const Shape& whole) {
  clear(previous_, whole);
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
  // r = the head's image output − its input, against r_prev of the
  // context's last full step.
  const Tensor x = s.x.to_device(Device{});
  const std::vector<double> sums = change_sums(
      x.data<float>() + text_ * width_, x.dim(1) * width_, input_.data<float>(), previous_,
      [this](size_t c) { return last_full_[c]; }, residual_);
  if (new_step_) decide(sums);
  for (size_t c = 0; c < contexts(batch_).size(); ++c)  // r_prev moves only where all blocks run
    if (computes_[c]) keep(previous_, c, residual_);
  mark_start(s);
}

bool FirstBlockCache::wants_skip(size_t c, double change, double reference, double& indicator) {
  // diffusers: compute when ratio > threshold. A rank without a reference
  // sent Σ|r_prev| = 0 for its rows.
  if (!(reference > 0) || !rows_stamped(previous_.stamps, c, last_full_[c])) return false;
  indicator = change / reference;
  return !(indicator > threshold_);
}

}  // namespace xdit::pipeline
