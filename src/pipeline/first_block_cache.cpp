#include "pipeline/first_block_cache.h"

#include <cstring>

#include "comm/communicator.h"
#include "core/error.h"
#include "kernels/kernels.h"
#include "models/dit.h"

namespace xdit::pipeline {

namespace {

// Items [i0, i1) of a [B, L, D] tensor: their first value and count.
struct ItemRange {
  int64_t offset = 0, count = 0;
};
ItemRange items(const Tensor& t, std::pair<int64_t, int64_t> r) {
  const int64_t per = t.numel() / t.dim(0);
  return {r.first * per, (r.second - r.first) * per};
}

}  // namespace

FirstBlockCache::FirstBlockCache(double threshold, CacheSetup setup)
    : threshold_(threshold), setup_(std::move(setup)) {
  XDIT_CHECK(setup_.blocks >= 2, "First-Block-Cache needs a model of two blocks or more, this has ",
             setup_.blocks);
  XDIT_CHECK(setup_.contexts == 1 || setup_.contexts == 2,
             "First-Block-Cache decides per call or per CFG half, not in ", setup_.contexts,
             " parts");
  stats_.full.resize(static_cast<size_t>(setup_.contexts));
  stats_.indicator.resize(static_cast<size_t>(setup_.contexts));
}

void FirstBlockCache::begin_loop(Denoiser& /*d*/) {
  key_.clear();  // a run starts with no reference: its first step runs in full
  armed_ = active_ = false;
}

void FirstBlockCache::before_step(const StepInfo& /*s*/) {
  armed_ = true;
}

std::vector<std::pair<int64_t, int64_t>> FirstBlockCache::contexts(int64_t batch) const {
  if (setup_.contexts == 1 || batch % 2 != 0) return {{0, batch}};
  return {{0, batch / 2}, {batch / 2, batch}};
}

void FirstBlockCache::begin_call(const models::DiTInputs& in, const models::Streams& s) {
  // Only a step's own call (not a calibration or skip-layer call) of a
  // stage that holds the head uses the cache.
  active_ = armed_ && in.skip_blocks.empty() && setup_.stage.first;
  armed_ = false;
  if (!active_) return;
  const int64_t B = s.x.dim(0), L = s.x.dim(1), D = s.x.dim(2), N = L - s.text;
  call_key_ = {B, L, D, s.text, in.row_begin, in.row_end};
  if (call_key_ != key_) {  // a new run, or rows that moved: no reference here
    key_ = call_key_;
    previous_ = Tensor::empty({B, N, D});
    residual_ = Tensor::empty({B, N, D});
    has_previous_.assign(static_cast<size_t>(setup_.contexts), false);
    tail_ = Tensor();
  }
  if (!input_.defined() || input_.shape() != Shape{B, N, D}) input_ = Tensor::empty({B, N, D});
  const Tensor x = s.x.to_device(Device{});
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(input_.data<float>() + b * N * D, x.data<float>() + (b * L + s.text) * D,
                static_cast<size_t>(N * D) * sizeof(float));
}

bool FirstBlockCache::at_boundary(int64_t b) const {
  return active_ && (b == 1 || b == setup_.blocks);
}

void FirstBlockCache::after_block(int64_t b, models::Streams& s) {
  if (b == 0)
    decide(s);
  else if (b == setup_.blocks - 1)
    finish(s);
}

models::BlockSkip FirstBlockCache::before_block(int64_t b, models::Streams& /*s*/) {
  if (b == 1 && skip_all_) return {setup_.blocks, &tail_};
  return {};
}

void FirstBlockCache::decide(const models::Streams& s) {
  const int64_t B = s.x.dim(0), L = s.x.dim(1), D = s.x.dim(2), N = L - s.text;
  const auto ctx = contexts(B);
  const Tensor x = s.x.to_device(Device{});
  // Per context: Σ|r − r_prev| and Σ|r_prev| over its image rows here.
  std::vector<double> sums(2 * ctx.size(), 0.0);
  for (size_t c = 0; c < ctx.size(); ++c)
    for (int64_t b = ctx[c].first; b < ctx[c].second; ++b)
      kernels::residual_change(x.data<float>() + (b * L + s.text) * D,
                               input_.data<float>() + b * N * D,
                               has_previous_[c] ? previous_.data<float>() + b * N * D : nullptr,
                               residual_.data<float>() + b * N * D, N * D, &sums[2 * c]);
  for (comm::Communicator* g : setup_.sum_groups)
    if (g->size() > 1) g->allreduce_sum(sums.data(), sums.size());
  computes_.assign(ctx.size(), true);
  ratios_.assign(ctx.size(), -1.0);
  bool any = false;
  for (size_t c = 0; c < ctx.size(); ++c) {
    // diffusers: compute when ratio > threshold. A reference of all zeros
    // (0 / 0) computes here rather than skipping on a NaN.
    // Every rank of the agree groups votes on every context, with a
    // reference or without (rows that moved on some ranks only).
    bool skip = false;
    if (has_previous_[c] && sums[2 * c + 1] > 0) {
      ratios_[c] = sums[2 * c] / sums[2 * c + 1];
      skip = !(ratios_[c] > threshold_);
    }
    for (comm::Communicator* g : setup_.agree_groups) skip = models::all_ranks_agree(*g, skip);
    computes_[c] = !skip;
    any = any || computes_[c];
    if (computes_[c]) {  // the reference moves only on a call that runs every block
      const ItemRange r = items(residual_, ctx[c]);
      std::memcpy(previous_.data<float>() + r.offset, residual_.data<float>() + r.offset,
                  static_cast<size_t>(r.count) * sizeof(float));
      has_previous_[c] = true;
    }
    stats_.full[c].push_back(computes_[c]);
    stats_.indicator[c].push_back(ratios_[c]);
  }
  skip_all_ = !any;
  const int64_t blocks = setup_.stage.block_end - setup_.stage.block_begin;
  ++stats_.steps;
  stats_.blocks += blocks;
  stats_.blocks_run += skip_all_ ? 1 : blocks;
  if (any) {
    ++stats_.full_steps;
    head_out_ = s.x.clone();
  }
}

void FirstBlockCache::finish(models::Streams& s) {
  if (!tail_.defined()) tail_ = Tensor::zeros(s.x.shape(), DType::kF32, s.x.device());
  const auto ctx = contexts(s.x.dim(0));
  for (size_t c = 0; c < ctx.size(); ++c) {
    const ItemRange r = items(s.x, ctx[c]);
    float* x = s.x.data<float>() + r.offset;
    float* tail = tail_.data<float>() + r.offset;
    const float* head = head_out_.data<float>() + r.offset;
    if (computes_[c]) {  // tail residual = the last block's output − the head's
      kernels::zero_bytes(tail, static_cast<size_t>(r.count) * sizeof(float));
      kernels::guidance_add(tail, x, head, 1.0f, r.count);
    } else {  // this half skips: the head's output + its kept residual
      kernels::copy_rows(x, r.count, head, r.count, 1, r.count);
      kernels::gated_residual_add(x, tail, 1, 1, r.count, nullptr, 0);
    }
  }
}

void FirstBlockCache::end_call(models::Streams& /*s*/) {
  active_ = false;
}

}  // namespace xdit::pipeline
