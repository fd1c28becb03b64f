// True classifier-free guidance as FluxPipeline and QwenImagePipeline do it:
// a negative prompt and true_cfg_scale > 1 turn on a second call on the
// negative prompt, combined at true_cfg_scale (guidance_scale is FLUX.1
// [dev]'s embedded guidance, conditioning, and no effect elsewhere);
// QwenImagePipeline rescales each token's guided noise to its cond
// prediction's norm.
#pragma once

#include <string>

#include "pipeline/guidance/guider.h"

namespace xdit::pipeline {

class TrueCfgGuider : public Guider {
 public:
  struct Options {
    double default_guidance = 1.0;  // guidance_scale's default (FLUX.1 [dev]: 3.5, embedded)
    double default_true_cfg = 1.0;  // true_cfg_scale's (FluxPipeline 1: off; QwenImagePipeline 4)
    // The side in latent pixels of the tokens whose guided noise is rescaled
    // to the cond prediction's norm (Qwen-Image: 2; 0: no rescale).
    int64_t renorm_patch = 0;
    // Where guidance_scale has no effect: the warning, as
    // `unused_prefix` + the scale + `unused_suffix` (empty: it has one).
    std::string unused_prefix, unused_suffix;
  };
  explicit TrueCfgGuider(Options o) : o_(std::move(o)) {}
  double default_guidance() const override { return o_.default_guidance; }
  double default_true_cfg() const override { return o_.default_true_cfg; }
  bool two_predictions(const GuidanceSettings& s) const override {
    return s.true_cfg_scale > 1.0 && s.negative;
  }
  const char* requirement() const override { return "a negative prompt and --true_cfg_scale > 1"; }
  double scale(const GuidanceSettings& s, int /*expert*/) const override {
    return s.true_cfg_scale;
  }
  bool calls_apart() const override { return true; }
  void warn_unused(const GuidanceSettings& asked) const override;

 protected:
  void adjust(const float* cond, float* guided, int64_t C, int64_t rows, int64_t W,
              const GuidanceSettings& s, bool cuda) const override;

 private:
  Options o_;
};

}  // namespace xdit::pipeline
