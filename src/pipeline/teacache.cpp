#include "pipeline/teacache.h"

#include <cstring>

#include "core/error.h"
#include "kernels/kernels.h"

namespace xdit::pipeline {

TeaCache::TeaCache(double threshold, CacheSetup setup)
    : ResidualCache("TeaCache", 0, std::move(setup)),
      threshold_(threshold),
      rescale_(rescale_for(setup_.model)) {
  acc_.assign(static_cast<size_t>(setup_.contexts), 0.0);
  pending_ = acc_;
}

std::vector<double> TeaCache::rescale_for(const std::string& model) {
  // TeaCache4FLUX's fit (xDiT's flux_coef): P(x) = 498.651651x⁴ −
  // 283.781631x³ + 55.8554382x² − 3.82021401x + 0.264230861.
  if (model == "FLUX")
    return {4.98651651e+02, -2.83781631e+02, 5.58554382e+01, -3.82021401e+00, 2.64230861e-01};
  return {};
}

double TeaCache::rescaled(const std::vector<double>& coefficients, double x) {
  if (coefficients.empty()) return x;
  double p = 0;
  for (const double c : coefficients) p = p * x + c;
  return p;
}

void TeaCache::sized(const Shape& whole) {
  previous_ = Tensor::empty(whole);
  previous_stamp_ = no_stamps();
  acc_.assign(acc_.size(), 0.0);
}

bool TeaCache::wants_modulated_input(int64_t b) const {
  return active_ && setup_.stage.first && b == 0;
}

void TeaCache::modulated_input(int64_t /*b*/, const Tensor& m, const models::Streams& s) {
  const int64_t N = m.dim(1);
  XDIT_CHECK(
      m.ndim() == 3 && m.dim(0) == batch_ && m.dim(2) == width_ && N == (row1_ - row0_) * per_row_,
      "TeaCache: the modulated input ", shape_str(m.shape()), " does not match the call's ", batch_,
      " × ", (row1_ - row0_) * per_row_, " image tokens × ", width_);
  const Tensor here = m.to_device(Device{});
  if (current_.numel() != here.numel()) current_ = Tensor::empty(here.shape());
  const auto ctx = contexts(batch_);
  // Per context: Σ|m − m_prev| and Σ|m_prev| over its image rows here.
  std::vector<double> sums(2 * ctx.size(), 0.0);
  for (size_t c = 0; c < ctx.size(); ++c) {
    const bool reference = new_step_ && rows_stamped(previous_stamp_, c, step_no_ - 1);
    for (int64_t b = ctx[c].first; b < ctx[c].second; ++b)
      kernels::residual_change(here.data<float>() + b * N * width_, nullptr,
                               reference ? whole_rows(previous_, b) : nullptr,
                               current_.data<float>() + b * N * width_, N * width_, &sums[2 * c]);
    if (!reference) sums[2 * c + 1] = 0;  // no reference here: this rank votes to compute
  }
  if (new_step_) decide(sums);
  // Every step keeps its m, whether it runs or skips.
  for (size_t c = 0; c < ctx.size(); ++c) {
    for (int64_t b = ctx[c].first; b < ctx[c].second; ++b)
      std::memcpy(whole_rows(previous_, b), current_.data<float>() + b * N * width_,
                  static_cast<size_t>(N * width_) * sizeof(float));
    mark_rows(previous_stamp_, c);
  }
  mark_start(s);
}

bool TeaCache::wants_skip(size_t c, double change, double reference, double& indicator) {
  pending_[c] = 0;
  if (!(reference > 0) || !rows_stamped(previous_stamp_, c, step_no_ - 1)) return false;
  pending_[c] = acc_[c] + rescaled(rescale_, change / reference);
  indicator = pending_[c];
  const bool forced = step_.step == 0 || step_.step == step_.total - 1;
  return pending_[c] < threshold_ && !forced;
}

void TeaCache::decided(size_t c, bool computes) {
  acc_[c] = computes ? 0.0 : pending_[c];
}

}  // namespace xdit::pipeline
