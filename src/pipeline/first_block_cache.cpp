#include "pipeline/first_block_cache.h"

#include <cstring>

#include "comm/communicator.h"
#include "core/error.h"
#include "kernels/kernels.h"
#include "models/dit.h"

namespace xdit::pipeline {

FirstBlockCache::FirstBlockCache(double threshold, CacheSetup setup)
    : threshold_(threshold), setup_(std::move(setup)) {
  XDIT_CHECK(setup_.blocks >= 2, "First-Block-Cache needs a model of two blocks or more, this has ",
             setup_.blocks);
  XDIT_CHECK(setup_.contexts == 1 || setup_.contexts == 2,
             "First-Block-Cache decides per call or per CFG half, not in ", setup_.contexts,
             " parts");
  XDIT_CHECK(setup_.token_rows > 0, "First-Block-Cache needs the run's token rows");
  stats_.full.resize(static_cast<size_t>(setup_.contexts));
  stats_.indicator.resize(static_cast<size_t>(setup_.contexts));
}

FirstBlockCache::~FirstBlockCache() {
  for (auto& s : sends_) s.second->wait();
}

namespace {
constexpr int kDecisionTag = 6 << 20;  // + the step (PipeFusion's tags: 1 … 4 << 20)
}  // namespace

void FirstBlockCache::send_decision(const std::vector<uint8_t>& decision) {
  comm::Communicator& g = *setup_.stage_group;
  for (auto& s : sends_) s.second->wait();  // long since sent: the stages moved on
  sends_.clear();
  for (int to = 1; to < g.size(); ++to) {
    sends_.emplace_back(decision, nullptr);
    auto& bytes = sends_.back().first;
    sends_.back().second = g.isend(bytes.data(), bytes.size(), comm::Type::kByte, to,
                                   kDecisionTag + static_cast<int>(step_no_ % (1 << 19)));
  }
}

std::vector<uint8_t> FirstBlockCache::receive_decision() {
  std::vector<uint8_t> d(static_cast<size_t>(setup_.contexts), 1);
  setup_.stage_group->recv(d.data(), d.size(), comm::Type::kByte, 0,
                           kDecisionTag + static_cast<int>(step_no_ % (1 << 19)));
  return d;
}

void FirstBlockCache::begin_loop(Denoiser& /*d*/) {
  // A run starts with no reference: its first step runs in full.
  previous_ = image_residual_ = Tensor();
  text_residual_.clear();
  armed_ = in_step_ = active_ = false;
}

void FirstBlockCache::before_step(const StepInfo& /*s*/) {
  armed_ = in_step_ = true;
}

std::vector<std::pair<int64_t, int64_t>> FirstBlockCache::contexts(int64_t batch) const {
  if (setup_.contexts == 1 || batch % 2 != 0) return {{0, batch}};
  return {{0, batch / 2}, {batch / 2, batch}};
}

bool FirstBlockCache::rows_valid(const std::vector<std::vector<int64_t>>& stamps, size_t c) const {
  if (stamps.empty() || last_full_[c] < 0) return false;
  for (int64_t r = row0_; r < row1_; ++r)
    if (stamps[c][static_cast<size_t>(r)] != last_full_[c]) return false;
  return true;
}

void FirstBlockCache::mark_rows(std::vector<std::vector<int64_t>>& stamps, size_t c) {
  for (int64_t r = row0_; r < row1_; ++r) stamps[c][static_cast<size_t>(r)] = step_no_;
}

void FirstBlockCache::begin_call(const models::DiTInputs& in, const models::Streams& s) {
  // Only the steps' own calls (not a calibration or skip-layer call).
  active_ = in_step_ && in.skip_blocks.empty();
  new_step_ = active_ && armed_;
  if (!active_) return;
  armed_ = false;
  batch_ = s.x.dim(0);
  text_ = s.text;
  width_ = s.x.dim(2);
  std::tie(row0_, row1_) = in.rows(setup_.token_rows);
  const int64_t N = s.x.dim(1) - text_;
  XDIT_CHECK(N % (row1_ - row0_) == 0, "First-Block-Cache: ", N, " image tokens over ",
             row1_ - row0_, " token rows");
  per_row_ = N / (row1_ - row0_);
  const Shape whole{batch_, setup_.token_rows * per_row_, width_};
  if (!previous_.defined() || previous_.shape() != whole) {  // a new run or size
    previous_ = Tensor::empty(whole);
    image_residual_ = Tensor::empty(whole, DType::kF32, s.x.device());
    const std::vector<int64_t> none(static_cast<size_t>(setup_.token_rows), -1);
    previous_stamp_.assign(static_cast<size_t>(setup_.contexts), none);
    residual_stamp_ = previous_stamp_;
    last_full_.assign(static_cast<size_t>(setup_.contexts), -1);
    text_residual_.clear();
    step_no_ = 0;
  }
  if (new_step_) ++step_no_;
  const bool later_stage = !setup_.stage.first;
  if (later_stage && new_step_) {  // stage 0's decision for this step
    const std::vector<uint8_t> d = receive_decision();
    computes_.assign(d.begin(), d.end());
    record_step(std::vector<double>(computes_.size(), -1.0));
  }
  if (later_stage) {
    if (!skip_all_) start_ = s.x.clone();
    return;
  }
  // Stage 0: the head's image input, on the host, for its residual.
  const int64_t L = s.x.dim(1);
  if (!input_.defined() || input_.shape() != Shape{batch_, N, width_})
    input_ = Tensor::empty({batch_, N, width_});
  const Tensor x = s.x.to_device(Device{});
  for (int64_t b = 0; b < batch_; ++b)
    std::memcpy(input_.data<float>() + b * N * width_, x.data<float>() + (b * L + text_) * width_,
                static_cast<size_t>(N * width_) * sizeof(float));
}

bool FirstBlockCache::at_boundary(int64_t b) const {
  if (!active_) return false;
  const int64_t start = setup_.stage.first ? 1 : setup_.stage.block_begin;
  return b == start || b == setup_.stage.block_end;
}

void FirstBlockCache::after_block(int64_t b, models::Streams& s) {
  if (setup_.stage.first && b == 0) head_ran(s);
  // (A stage 0 of the head alone ends at the head: nothing ran after it on
  // a skipped step, and its residual is zero.)
  if (b == setup_.stage.block_end - 1 && !skip_all_) stage_ran(s);
}

models::BlockSkip FirstBlockCache::before_block(int64_t b, models::Streams& /*s*/) {
  const int64_t start = setup_.stage.first ? 1 : setup_.stage.block_begin;
  if (b != start || !skip_all_ || b >= setup_.stage.block_end) return {};
  return {setup_.stage.block_end, &call_residual()};
}

void FirstBlockCache::head_ran(const models::Streams& s) {
  const int64_t L = s.x.dim(1), N = L - text_, whole = setup_.token_rows * per_row_;
  const auto ctx = contexts(batch_);
  const Tensor x = s.x.to_device(Device{});
  if (residual_.numel() != input_.numel()) residual_ = Tensor::empty(input_.shape());
  // Per context: Σ|r − r_prev| and Σ|r_prev| over its image rows here.
  std::vector<double> sums(2 * ctx.size(), 0.0);
  for (size_t c = 0; c < ctx.size(); ++c) {
    const bool reference = new_step_ && rows_valid(previous_stamp_, c);
    for (int64_t b = ctx[c].first; b < ctx[c].second; ++b)
      kernels::residual_change(
          x.data<float>() + (b * L + text_) * width_, input_.data<float>() + b * N * width_,
          reference ? previous_.data<float>() + (b * whole + row0_ * per_row_) * width_ : nullptr,
          residual_.data<float>() + b * N * width_, N * width_, &sums[2 * c]);
    if (!reference) sums[2 * c + 1] = 0;  // no reference here: this rank votes to compute
  }
  if (new_step_) decide(sums);
  for (size_t c = 0; c < ctx.size(); ++c) {
    if (!computes_[c]) continue;
    // The reference moves only where the step runs every block.
    for (int64_t b = ctx[c].first; b < ctx[c].second; ++b)
      std::memcpy(previous_.data<float>() + (b * whole + row0_ * per_row_) * width_,
                  residual_.data<float>() + b * N * width_,
                  static_cast<size_t>(N * width_) * sizeof(float));
    mark_rows(previous_stamp_, c);
  }
  if (!skip_all_) start_ = s.x.clone();
}

void FirstBlockCache::decide(const std::vector<double>& sums_here) {
  std::vector<double> sums = sums_here;
  for (comm::Communicator* g : setup_.sum_groups)
    if (g->size() > 1) g->allreduce_sum(sums.data(), sums.size());
  const size_t n = sums.size() / 2;
  computes_.assign(n, true);
  std::vector<uint8_t> decision(n, 1);
  std::vector<double> ratios(n, -1.0);
  for (size_t c = 0; c < n; ++c) {
    // diffusers: compute when ratio > threshold. A rank without a reference
    // sent Σ|r_prev| = 0 for its rows; every rank of the agree groups votes
    // on every context all the same.
    bool skip = false;
    if (sums[2 * c + 1] > 0 && rows_valid(previous_stamp_, c)) {
      ratios[c] = sums[2 * c] / sums[2 * c + 1];
      skip = !(ratios[c] > threshold_);
    }
    for (comm::Communicator* g : setup_.agree_groups) skip = models::all_ranks_agree(*g, skip);
    computes_[c] = !skip;
    decision[c] = skip ? 0 : 1;
  }
  if (setup_.stage_group != nullptr && setup_.stage_group->size() > 1) send_decision(decision);
  record_step(ratios);
}

void FirstBlockCache::record_step(const std::vector<double>& ratios) {
  skip_all_ = true;
  for (size_t c = 0; c < computes_.size(); ++c) {
    skip_all_ = skip_all_ && !computes_[c];
    if (computes_[c]) last_full_[c] = step_no_;
    stats_.full[c].push_back(computes_[c]);
    stats_.indicator[c].push_back(ratios[c]);
  }
  const int64_t blocks = setup_.stage.block_end - setup_.stage.block_begin;
  ++stats_.steps;
  stats_.blocks += blocks;
  // (a skipped step still runs stage 0's head)
  stats_.blocks_run += skip_all_ ? (setup_.stage.first ? 1 : 0) : blocks;
  stats_.full_steps += skip_all_ ? 0 : 1;
}

const Tensor& FirstBlockCache::call_residual() {
  const auto ctx = contexts(batch_);
  for (size_t c = 0; c < ctx.size(); ++c)  // (a computing context's residual is being replaced)
    XDIT_CHECK(computes_[c] || rows_valid(residual_stamp_, c), "First-Block-Cache: token rows [",
               row0_, ", ", row1_, ") skip without a residual of their own");
  const int64_t N = (row1_ - row0_) * per_row_, L = text_ + N, whole = setup_.token_rows * per_row_;
  if (call_residual_.numel() != batch_ * L * width_ ||
      call_residual_.device() != image_residual_.device())
    call_residual_ = Tensor::empty({batch_, L, width_}, DType::kF32, image_residual_.device());
  float* out = call_residual_.data<float>();
  kernels::copy_rows(out + text_ * width_, L * width_,
                     image_residual_.data<float>() + row0_ * per_row_ * width_, whole * width_,
                     batch_, N * width_);
  if (text_ > 0) {
    auto it = text_residual_.find({row0_, row1_});
    if (it == text_residual_.end()) it = text_residual_.begin();  // rows never run apart
    XDIT_CHECK(it != text_residual_.end(), "First-Block-Cache: no text-stream residual kept");
    kernels::copy_rows(out, L * width_, it->second.data<float>(), text_ * width_, batch_,
                       text_ * width_);
  }
  return call_residual_;
}

void FirstBlockCache::stage_ran(models::Streams& s) {
  const auto ctx = contexts(batch_);
  const int64_t L = s.x.dim(1), N = L - text_, whole = setup_.token_rows * per_row_;
  Tensor& text = text_residual_[{row0_, row1_}];
  if (text_ > 0 && !text.defined())
    text = Tensor::zeros({batch_, text_, width_}, DType::kF32, s.x.device());
  // The skipping contexts' residual before this call's computing ones replace theirs.
  const bool mixed = [&] {
    for (const bool c : computes_)
      if (!c) return true;
    return false;
  }();
  const Tensor kept = mixed ? call_residual() : Tensor();
  for (size_t c = 0; c < ctx.size(); ++c) {
    for (int64_t b = ctx[c].first; b < ctx[c].second; ++b) {
      float* x = s.x.data<float>() + b * L * width_;
      const float* start = start_.data<float>() + b * L * width_;
      if (computes_[c]) {  // residual = the stage's output − its start, by row
        float* img = image_residual_.data<float>() + (b * whole + row0_ * per_row_) * width_;
        kernels::zero_bytes(img, static_cast<size_t>(N * width_) * sizeof(float));
        kernels::guidance_add(img, x + text_ * width_, start + text_ * width_, 1.0f, N * width_);
        if (text_ > 0) {
          float* t = text.data<float>() + b * text_ * width_;
          kernels::zero_bytes(t, static_cast<size_t>(text_ * width_) * sizeof(float));
          kernels::guidance_add(t, x, start, 1.0f, text_ * width_);
        }
      } else {  // this half skips: its start + its kept residual
        kernels::copy_rows(x, L * width_, start, L * width_, 1, L * width_);
        kernels::gated_residual_add(x, kept.data<float>() + b * L * width_, 1, 1, L * width_,
                                    nullptr, 0);
      }
    }
    if (computes_[c]) mark_rows(residual_stamp_, c);
  }
}

void FirstBlockCache::end_call(models::Streams& /*s*/) {
  active_ = new_step_ = false;
}

}  // namespace xdit::pipeline
