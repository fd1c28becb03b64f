// SD3's skip-layer guidance (diffusers' StableDiffusion3Pipeline): its
// classifier-free guidance plus, at steps i with start·N < i < stop·N, a
// third call on the prompt half that skips `layers`; the noise gains
// scale · (cond − skipped). Only under CFG; the third call is a step hook.
#pragma once

#include "pipeline/denoiser.h"
#include "pipeline/guidance/cfg.h"

namespace xdit::pipeline {

class SkipLayerGuider : public CfgGuider {
 public:
  explicit SkipLayerGuider(Options o) : CfgGuider(o) {}
  void check_passes(const GuidanceSettings& s, bool two, const GuidanceLayout& l) const override;
  std::unique_ptr<StepHook> pass_hook(
      const GuidanceSettings& s, const std::function<LoopInputs()>& prompt_only) const override;
};

// The skip-layer call and its term, as a step hook.
class SkipGuidanceHook : public StepHook {
 public:
  // `prompt_only`: the loop's inputs for the prompt half (batch P, no mask).
  SkipGuidanceHook(const SkipLayerGuidance& slg, LoopInputs prompt_only);
  // Whether step i of n takes the skipping call.
  static bool skips_at(const SkipLayerGuidance& s, int64_t i, int64_t n);
  void begin_loop(Denoiser& d) override;
  void on_noise(const StepInfo& s, Tensor& noise, const Tensor& out, Denoiser& d) override;

 private:
  SkipLayerGuidance slg_;
  LoopInputs li_;
};

}  // namespace xdit::pipeline
