#include "pipeline/guidance/zimage_cfg.h"

#include <cmath>

#include "core/error.h"
#include "core/log.h"

namespace xdit::pipeline {

void ZImageGuider::check(const GuidanceSettings& s, const GuidanceLayout& l) const {
  check_scales(s);
  check_limit_bounds(s);
  XDIT_CHECK(s.cfg_normalization == 0.0 || !l.pipefusion,
             "cfg_normalization needs each step's whole image: not with PipeFusion, whose "
             "steps after the warm-up finish a patch at a time");
}

void ZImageGuider::warn_unused(const GuidanceSettings& asked) const {
  if (asked.true_cfg_scale > 1.0)
    XDIT_WARN("true_cfg_scale has no effect on Z-Image: its guidance is guidance_scale > 0");
  const double g =
      asked.guidance_scale == kDefaultGuidance ? default_guidance() : asked.guidance_scale;
  if (asked.negative && g <= 0)
    XDIT_WARN("a negative prompt has no effect with guidance_scale ", g,
              " (Z-Image's CFG needs guidance_scale > 0)");
}

bool ZImageGuider::cond_only_at(const GuidanceSettings& s, double t) const {
  // (1000 − t) / 1000 in f32, as the pipeline's.
  const float t_norm = (1000.0f - static_cast<float>(t)) / 1000.0f;
  return s.cfg_truncation <= 1.0 && t_norm > s.cfg_truncation;
}

void ZImageGuider::adjust(const float* cond, float* guided, int64_t C, int64_t rows, int64_t W,
                          const GuidanceSettings& s, bool cuda) const {
  if (s.cfg_normalization <= 0) return;
  // When ‖guided‖ > cap · ‖cond‖ over the item, guided *= cap · ‖cond‖ /
  // ‖guided‖ (the norms in f32, as torch's vector_norm of f32 tensors; their
  // sums here in f64). Host memory: Z-Image runs on the CPU.
  XDIT_CHECK(!cuda, "cfg_normalization runs on the CPU only so far");
  const int64_t n = C * rows * W;
  double cs = 0, gs = 0;
  for (int64_t i = 0; i < n; ++i) {
    cs += static_cast<double>(cond[i]) * cond[i];
    gs += static_cast<double>(guided[i]) * guided[i];
  }
  const auto ori = static_cast<float>(std::sqrt(cs)), now = static_cast<float>(std::sqrt(gs));
  const float most = ori * static_cast<float>(s.cfg_normalization);
  if (now <= most) return;
  const float scale = most / now;
  for (int64_t i = 0; i < n; ++i) guided[i] *= scale;
}

}  // namespace xdit::pipeline
