#include "pipeline/guidance/true_cfg.h"

#include "core/log.h"
#include "kernels/kernels.h"

namespace xdit::pipeline {

void TrueCfgGuider::warn_unused(const GuidanceSettings& asked) const {
  if (!o_.unused_prefix.empty() && asked.guidance_scale != kDefaultGuidance)
    XDIT_WARN(o_.unused_prefix, asked.guidance_scale, o_.unused_suffix);
  const double t =
      asked.true_cfg_scale == kDefaultGuidance ? o_.default_true_cfg : asked.true_cfg_scale;
  if (t > 1.0 && !asked.negative && asked.true_cfg_scale != kDefaultGuidance)
    XDIT_WARN("true_cfg_scale ", t, " has no effect without a negative prompt: true CFG is off");
  if (asked.negative && t <= 1.0)
    XDIT_WARN("a negative prompt has no effect with true_cfg_scale ", t,
              " (<= 1): true CFG is off");
}

void TrueCfgGuider::adjust(const float* cond, float* guided, int64_t C, int64_t rows, int64_t W,
                           const GuidanceSettings& /*s*/, bool /*cuda*/) const {
  if (o_.renorm_patch > 0) kernels::cfg_renorm_patches(cond, guided, C, rows, W, o_.renorm_patch);
}

}  // namespace xdit::pipeline
