// Z-Image's guidance (diffusers' ZImagePipeline): CFG where guidance_scale
// > 0, at 1 + guidance_scale; off at the steps whose (1000 − t)/1000
// exceeds cfg_truncation (≤ 1; above 1: never); with cfg_normalization > 0
// each image's guided prediction's norm capped at cfg_normalization × its
// cond prediction's.
#pragma once

#include "pipeline/guidance/guider.h"

namespace xdit::pipeline {

class ZImageGuider : public Guider {
 public:
  double default_guidance() const override { return 0.0; }
  bool two_predictions(const GuidanceSettings& s) const override { return s.guidance_scale > 0; }
  const char* requirement() const override { return "--guidance_scale > 0"; }
  double scale(const GuidanceSettings& s, int /*expert*/) const override {
    return 1.0 + s.guidance_scale;
  }
  void check(const GuidanceSettings& s, const GuidanceLayout& l) const override;
  void warn_unused(const GuidanceSettings& asked) const override;

 protected:
  bool cond_only_at(const GuidanceSettings& s, double t) const override;
  void adjust(const float* cond, float* guided, int64_t C, int64_t rows, int64_t W,
              const GuidanceSettings& s, bool cuda) const override;
};

}  // namespace xdit::pipeline
