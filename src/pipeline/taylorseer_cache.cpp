#include "pipeline/taylorseer_cache.h"

#include "comm/communicator.h"
#include "core/error.h"
#include "kernels/kernels.h"
#include "models/dit.h"

namespace xdit::pipeline {

TaylorSeerCache::TaylorSeerCache(int64_t interval, int64_t warmup, int64_t order, CacheSetup setup)
    : interval_(interval), warmup_(warmup), order_(order), setup_(std::move(setup)) {
  XDIT_CHECK(interval_ >= 1 && order_ >= 0 && order_ <= 3 && (warmup_ >= 1 || interval_ == 1),
             "TaylorSeer: interval ", interval_, ", warm-up ", warmup_, ", order ", order_,
             " out of range");
  XDIT_CHECK(setup_.token_rows > 0, "TaylorSeer needs the run's token rows");
  stats_.full.resize(static_cast<size_t>(setup_.contexts));
  stats_.indicator.resize(static_cast<size_t>(setup_.contexts));
  stats_.unit = "attention modules";
}

bool TaylorSeerCache::computes(int64_t s, int64_t interval, int64_t warmup) {
  if (s < warmup) return true;
  const int64_t m = ((s - warmup - 1) % interval + interval) % interval;  // Python's floor mod
  return m == 0;
}

void TaylorSeerCache::begin_loop(Denoiser& /*d*/) {
  factors_.clear();
  in_step_ = active_ = false;
}

void TaylorSeerCache::before_step(const StepInfo& s) {
  step_ = s.step;
  in_step_ = true;
  compute_ = computes(step_, interval_, warmup_);
  for (size_t c = 0; c < stats_.full.size(); ++c) {
    stats_.full[c].push_back(compute_);
    stats_.indicator[c].push_back(-1);
  }
  ++stats_.steps;
  stats_.full_steps += compute_ ? 1 : 0;
}

void TaylorSeerCache::begin_call(const models::DiTInputs& in, const models::Streams& /*s*/) {
  active_ = in_step_ && in.skip_blocks.empty();
  if (!active_) return;
  std::tie(row0_, row1_) = in.rows(setup_.token_rows);
  modules_ = modules_run_ = 0;
}

void TaylorSeerCache::end_call(models::Streams& /*s*/) {
  if (!active_) return;
  stats_.blocks += modules_;
  stats_.blocks_run += modules_run_;
  active_ = false;
}

bool TaylorSeerCache::replace(int64_t block, int module, float* out, int64_t n) {
  if (!active_) return false;
  ++modules_;
  if (compute_) return false;
  // Rows with no factors yet (PipeFusion's first patch steps after its
  // whole-image warm-up, rows a --patch_weights dynamic re-split moved)
  // run the module, and their factors start there. Every rank that
  // computes the call together runs or forecasts it alike.
  auto it = factors_.find({block, module, row0_, row1_});
  bool have =
      it != factors_.end() && it->second.stored > 0 && it->second.f.numel() == (order_ + 1) * n;
  for (comm::Communicator* g : setup_.agree_groups) have = models::all_ranks_agree(*g, have);
  if (!have) return false;
  const Factors& f = it->second;
  // coeff_k = Δ^k / k!, as Python computes it (in double), then f32.
  float coeff[4];
  const double delta = static_cast<double>(step_ - f.last_step);
  double c = 1;
  for (int64_t k = 0; k < f.stored; ++k) {
    if (k > 0) c = c * delta / static_cast<double>(k);
    coeff[k] = static_cast<float>(c);
  }
  kernels::taylor_predict(f.f.data<float>(), coeff, f.stored, out, n);
  return true;
}

void TaylorSeerCache::ran(int64_t block, int module, const float* out, int64_t n) {
  if (!active_) return;
  ++modules_run_;
  Factors& f = factors_[{block, module, row0_, row1_}];
  if (!f.f.defined() || f.f.numel() != (order_ + 1) * n) {  // first update, or a new size
    f.f = Tensor::empty({order_ + 1, n}, DType::kF32, current_device());
    f.stored = 0;
    f.last_step = -1;
  }
  const int64_t have = f.stored == 0 ? 0 : std::min(f.stored, order_);
  const auto delta = static_cast<float>(f.stored == 0 ? 1 : step_ - f.last_step);
  kernels::taylor_update(out, f.f.data<float>(), have, delta, n);
  f.stored = have + 1;
  f.last_step = step_;
}

}  // namespace xdit::pipeline
