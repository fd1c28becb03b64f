// Classifier-free guidance as PixArt's, SD3's and Wan's diffusers pipelines
// do it: uncond + guidance_scale·(cond − uncond) where guidance_scale > 1,
// the negative prompt "" when none is given; Wan2.2's second expert
// (transformer_2) at its own guidance_scale_2.
#pragma once

#include "pipeline/guidance/guider.h"

namespace xdit::pipeline {

class CfgGuider : public Guider {
 public:
  struct Options {
    double default_guidance = 1.0;  // the pipeline's guidance_scale default
    bool calls_apart = false;       // WanPipeline: the halves in two calls
  };
  explicit CfgGuider(Options o) : o_(o) {}
  double default_guidance() const override { return o_.default_guidance; }
  bool two_predictions(const GuidanceSettings& s) const override { return s.guidance_scale > 1.0; }
  const char* requirement() const override { return "--guidance_scale > 1"; }
  double scale(const GuidanceSettings& s, int expert) const override {
    return expert == 1 ? s.guidance_scale_2 : s.guidance_scale;
  }
  bool calls_apart() const override { return o_.calls_apart; }

 private:
  Options o_;
};

}  // namespace xdit::pipeline
