#include "pipeline/guidance/guider.h"

#include <cmath>

#include "core/error.h"
#include "kernels/kernels.h"
#include "pipeline/denoiser.h"

namespace xdit::pipeline {

GuidanceSettings Guider::resolved(GuidanceSettings asked) const {
  if (asked.guidance_scale == kDefaultGuidance) asked.guidance_scale = default_guidance();
  if (asked.true_cfg_scale == kDefaultGuidance) asked.true_cfg_scale = default_true_cfg();
  return asked;
}

void Guider::check(const GuidanceSettings& s, const GuidanceLayout& l) const {
  check_scales(s);
  check_limit_bounds(s);
  XDIT_CHECK(s.cfg_truncation == 1.0 && s.cfg_normalization == 0.0,
             "cfg_truncation and cfg_normalization are Z-Image's (ZImagePipeline); ", l.model,
             " has neither");
}

void Guider::check_scales(const GuidanceSettings& s) {
  XDIT_CHECK(std::isfinite(s.guidance_scale) && s.guidance_scale >= 0,
             "guidance_scale must be a finite number >= 0, got ", s.guidance_scale);
  XDIT_CHECK(std::isfinite(s.true_cfg_scale) && s.true_cfg_scale >= 0,
             "true_cfg_scale must be a finite number >= 0, got ", s.true_cfg_scale);
}

void Guider::check_limit_bounds(const GuidanceSettings& s) {
  XDIT_CHECK(std::isfinite(s.cfg_truncation) && s.cfg_truncation >= 0,
             "cfg_truncation must be a finite number >= 0, got ", s.cfg_truncation);
  XDIT_CHECK(std::isfinite(s.cfg_normalization) && s.cfg_normalization >= 0,
             "cfg_normalization must be a finite number >= 0 (0: off), got ", s.cfg_normalization);
}

void Guider::check_passes(const GuidanceSettings& s, bool /*two*/, const GuidanceLayout& l) const {
  XDIT_CHECK(!s.skip_layers.on(),
             "skip-layer guidance (--skip_guidance_layers) is a Stable "
             "Diffusion 3 option; ",
             l.model, " does not take it");
}

std::unique_ptr<StepHook> Guider::pass_hook(
    const GuidanceSettings& /*s*/, const std::function<LoopInputs()>& /*prompt_only*/) const {
  return nullptr;
}

Tensor Guider::noise(const Tensor& out, int64_t P, int64_t C, const GuidanceSettings& s,
                     const StepGuidance& g, double t) const {
  // Two predictions: uncond + scale·(cond − uncond) with out = [uncond P;
  // cond P], then the guider's adjustment; learned sigma: keep the first C of
  // the out_channels. On out's device (ops).
  const bool combine = g.on && !cond_only_at(s, t);
  const int64_t oc = out.dim(1), hw = out.numel() / (out.dim(0) * oc), plane = C * hw;
  const int64_t W = out.dim(out.ndim() - 1);
  const auto scale = static_cast<float>(g.scale);
  Shape shape = out.shape();
  shape[0] = P;
  shape[1] = C;
  Tensor noise = Tensor::empty(shape, DType::kF32, out.device());
  const float* ob = out.data<float>();
  for (int64_t b = 0; b < P; ++b) {
    const float* cond = ob + (g.on ? P + b : b) * oc * hw;
    float* nb = noise.data<float>() + b * plane;
    if (combine) {
      kernels::guidance_combine(ob + b * oc * hw, cond, scale, nb, plane);
      adjust(cond, nb, C, hw / W, W, s, out.device().cuda());
    } else {
      kernels::copy_rows(nb, plane, cond, plane, 1, plane);
    }
  }
  return noise;
}

}  // namespace xdit::pipeline
