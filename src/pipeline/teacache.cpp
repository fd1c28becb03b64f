#include "pipeline/teacache.h"

#include "core/error.h"

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
  clear(previous_, whole);
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
  // m against m_prev of the step before; every step keeps its m, whether
  // it runs or skips.
  const Tensor here = m.to_device(Device{});
  const std::vector<double> sums = change_sums(
      here.data<float>(), N * width_, nullptr, previous_, [this](size_t) { return step_no_ - 1; },
      current_);
  if (new_step_) decide(sums);
  for (size_t c = 0; c < contexts(batch_).size(); ++c) keep(previous_, c, current_);
  mark_start(s);
}

bool TeaCache::wants_skip(size_t c, double change, double reference, double& indicator) {
  pending_[c] = 0;
  if (!(reference > 0) || !rows_stamped(previous_.stamps, c, step_no_ - 1)) return false;
  pending_[c] = acc_[c] + rescaled(rescale_, change / reference);
  indicator = pending_[c];
  const bool forced = step_.step == 0 || step_.step == step_.total - 1;
  return pending_[c] < threshold_ && !forced;
}

void TeaCache::decided(size_t c, bool computes) {
  acc_[c] = computes ? 0.0 : pending_[c];
}

}  // namespace xdit::pipeline
