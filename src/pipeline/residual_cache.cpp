#include "pipeline/residual_cache.h"

#include <cstring>

#include "comm/communicator.h"
#include "core/error.h"
#include "kernels/kernels.h"
#include "models/dit.h"

namespace xdit::pipeline {

ResidualCache::ResidualCache(const char* name, int64_t skip_from, CacheSetup setup)
    : name_(name), skip_from_(skip_from), setup_(std::move(setup)) {
  XDIT_CHECK(setup_.blocks >= 2, name_, " needs a model of two blocks or more, this has ",
             setup_.blocks);
  XDIT_CHECK(setup_.contexts == 1 || setup_.contexts == 2, name_,
             " decides per call or per CFG half, not in ", setup_.contexts, " parts");
  XDIT_CHECK(setup_.token_rows > 0, name_, " needs the run's token rows");
  stats_.full.resize(static_cast<size_t>(setup_.contexts));
  stats_.indicator.resize(static_cast<size_t>(setup_.contexts));
}

ResidualCache::~ResidualCache() {
  for (auto& s : sends_) s.second->wait();
}

namespace {
constexpr int kDecisionTag = 6 << 20;  // + the step (PipeFusion's tags: 1 … 4 << 20)
}  // namespace

void ResidualCache::send_decision(const std::vector<uint8_t>& decision) {
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

std::vector<uint8_t> ResidualCache::receive_decision() {
  std::vector<uint8_t> d(static_cast<size_t>(setup_.contexts), 1);
  setup_.stage_group->recv(d.data(), d.size(), comm::Type::kByte, 0,
                           kDecisionTag + static_cast<int>(step_no_ % (1 << 19)));
  return d;
}

void ResidualCache::begin_loop(Denoiser& /*d*/) {
  // A run starts with no state: its first step runs in full.
  image_residual_ = Tensor();
  text_residual_.clear();
  armed_ = in_step_ = active_ = false;
}

void ResidualCache::before_step(const StepInfo& s) {
  armed_ = in_step_ = true;
  step_ = s;
}

std::vector<std::pair<int64_t, int64_t>> ResidualCache::contexts(int64_t batch) const {
  if (setup_.contexts == 1 || batch % 2 != 0) return {{0, batch}};
  return {{0, batch / 2}, {batch / 2, batch}};
}

bool ResidualCache::rows_stamped(const std::vector<std::vector<int64_t>>& stamps, size_t c,
                                 int64_t step) const {
  if (stamps.empty() || step < 1) return false;
  for (int64_t r = row0_; r < row1_; ++r)
    if (stamps[c][static_cast<size_t>(r)] != step) return false;
  return true;
}

void ResidualCache::mark_rows(std::vector<std::vector<int64_t>>& stamps, size_t c) const {
  for (int64_t r = row0_; r < row1_; ++r) stamps[c][static_cast<size_t>(r)] = step_no_;
}

std::vector<std::vector<int64_t>> ResidualCache::no_stamps() const {
  return std::vector<std::vector<int64_t>>(
      static_cast<size_t>(setup_.contexts),
      std::vector<int64_t>(static_cast<size_t>(setup_.token_rows), -1));
}

float* ResidualCache::whole_rows(Tensor& t, int64_t b) const {
  return t.data<float>() + (b * setup_.token_rows * per_row_ + row0_ * per_row_) * width_;
}

const float* ResidualCache::whole_rows(const Tensor& t, int64_t b) const {
  return t.data<float>() + (b * setup_.token_rows * per_row_ + row0_ * per_row_) * width_;
}

void ResidualCache::clear(RowReference& ref, const Shape& whole) const {
  ref.values = Tensor::empty(whole);
  ref.stamps = no_stamps();
}

std::vector<double> ResidualCache::change_sums(const float* out, int64_t out_stride,
                                               const float* in, const RowReference& ref,
                                               const std::function<int64_t(size_t)>& from,
                                               Tensor& v) const {
  const int64_t n = (row1_ - row0_) * per_row_ * width_;
  if (v.numel() != batch_ * n) v = Tensor::empty({batch_, n / width_, width_});
  const auto ctx = contexts(batch_);
  std::vector<double> sums(2 * ctx.size(), 0.0);
  for (size_t c = 0; c < ctx.size(); ++c) {
    const bool reference = new_step_ && rows_stamped(ref.stamps, c, from(c));
    for (int64_t b = ctx[c].first; b < ctx[c].second; ++b)
      kernels::residual_change(out + b * out_stride, in != nullptr ? in + b * n : nullptr,
                               reference ? whole_rows(ref.values, b) : nullptr,
                               v.data<float>() + b * n, n, &sums[2 * c]);
    if (!reference) sums[2 * c + 1] = 0;  // no reference here: this rank votes to compute
  }
  return sums;
}

void ResidualCache::keep(RowReference& ref, size_t c, const Tensor& v) const {
  const auto ctx = contexts(batch_)[c];
  const int64_t n = (row1_ - row0_) * per_row_ * width_;
  for (int64_t b = ctx.first; b < ctx.second; ++b)
    std::memcpy(whole_rows(ref.values, b), v.data<float>() + b * n,
                static_cast<size_t>(n) * sizeof(float));
  mark_rows(ref.stamps, c);
}

void ResidualCache::begin_call(const models::DiTInputs& in, const models::Streams& s) {
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
  XDIT_CHECK(N % (row1_ - row0_) == 0, name_, ": ", N, " image tokens over ", row1_ - row0_,
             " token rows");
  per_row_ = N / (row1_ - row0_);
  const Shape whole{batch_, setup_.token_rows * per_row_, width_};
  if (!image_residual_.defined() || image_residual_.shape() != whole) {  // a new run or size
    image_residual_ = Tensor::empty(whole, DType::kF32, s.x.device());
    residual_stamp_ = no_stamps();
    last_full_.assign(static_cast<size_t>(setup_.contexts), -1);
    text_residual_.clear();
    step_no_ = 0;
    sized(whole);
  }
  if (new_step_) ++step_no_;
  if (!setup_.stage.first) {
    if (new_step_) {  // stage 0's decision for this step
      const std::vector<uint8_t> d = receive_decision();
      computes_.assign(d.begin(), d.end());
      record_step(std::vector<double>(computes_.size(), -1.0));
    }
    mark_start(s);
    return;
  }
  call_began(s);
}

bool ResidualCache::at_boundary(int64_t b) const {
  if (!active_) return false;
  const int64_t start = setup_.stage.first ? skip_from_ : setup_.stage.block_begin;
  return b == start || b == setup_.stage.block_end;
}

models::BlockSkip ResidualCache::before_block(int64_t b, models::Streams& /*s*/) {
  const int64_t start = setup_.stage.first ? skip_from_ : setup_.stage.block_begin;
  if (b != start || !skip_all_ || b >= setup_.stage.block_end) return {};
  return {setup_.stage.block_end, &call_residual()};
}

void ResidualCache::after_block(int64_t b, models::Streams& s) {
  if (b == setup_.stage.block_end - 1 && !skip_all_) stage_ran(s);
}

void ResidualCache::mark_start(const models::Streams& s) {
  if (!skip_all_) start_ = s.x.clone();
}

void ResidualCache::decide(const std::vector<double>& sums_here) {
  std::vector<double> sums = sums_here;
  for (comm::Communicator* g : setup_.sum_groups)
    if (g->size() > 1) g->allreduce_sum(sums.data(), sums.size());
  const size_t n = sums.size() / 2;
  computes_.assign(n, true);
  std::vector<uint8_t> decision(n, 1);
  std::vector<double> indicators(n, -1.0);
  for (size_t c = 0; c < n; ++c) {
    // Every rank of the agree groups votes on every context all the same.
    bool skip = wants_skip(c, sums[2 * c], sums[2 * c + 1], indicators[c]);
    for (comm::Communicator* g : setup_.agree_groups) skip = models::all_ranks_agree(*g, skip);
    computes_[c] = !skip;
    decision[c] = skip ? 0 : 1;
    decided(c, computes_[c]);
  }
  if (setup_.stage_group != nullptr && setup_.stage_group->size() > 1) send_decision(decision);
  record_step(indicators);
}

void ResidualCache::record_step(const std::vector<double>& indicators) {
  skip_all_ = true;
  for (size_t c = 0; c < computes_.size(); ++c) {
    skip_all_ = skip_all_ && !computes_[c];
    if (computes_[c]) last_full_[c] = step_no_;
    stats_.full[c].push_back(computes_[c]);
    stats_.indicator[c].push_back(indicators[c]);
  }
  const int64_t blocks = setup_.stage.block_end - setup_.stage.block_begin;
  ++stats_.steps;
  stats_.blocks += blocks;
  // (a skipped step still runs stage 0's blocks before skip_from)
  stats_.blocks_run += skip_all_ ? (setup_.stage.first ? skip_from_ : 0) : blocks;
  stats_.full_steps += skip_all_ ? 0 : 1;
}

const Tensor& ResidualCache::call_residual() {
  const auto ctx = contexts(batch_);
  for (size_t c = 0; c < ctx.size(); ++c)  // (a computing context's residual is being replaced)
    XDIT_CHECK(computes_[c] || rows_stamped(residual_stamp_, c, last_full_[c]), name_,
               ": token rows [", row0_, ", ", row1_, ") skip without a residual of their own");
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
    XDIT_CHECK(it != text_residual_.end(), name_, ": no text-stream residual kept");
    kernels::copy_rows(out, L * width_, it->second.data<float>(), text_ * width_, batch_,
                       text_ * width_);
  }
  return call_residual_;
}

void ResidualCache::stage_ran(models::Streams& s) {
  const auto ctx = contexts(batch_);
  const int64_t L = s.x.dim(1), N = L - text_;
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
        float* img = whole_rows(image_residual_, b);
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

void ResidualCache::end_call(models::Streams& /*s*/) {
  active_ = new_step_ = false;
}

}  // namespace xdit::pipeline
