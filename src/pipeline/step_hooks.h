// The step hooks the pipeline itself installs (denoiser.h): `--patch_weights
// auto`'s calibration step and SD3's skip-layer guidance. (Progress and the
// fault injection of the tests ride on denoiser.h's ProgressHook.)
#pragma once

#include "pipeline/denoiser.h"

namespace xdit::pipeline {

// --patch_weights auto: before the first step, one calibration step on even
// bands at the first timestep sets the mesh's weights (parallel/calibrate.h)
// and logs them; its output is dropped, and the loop's first step starts the
// backends afresh.
class CalibrationHook : public StepHook {
 public:
  void begin_loop(Denoiser& d) override;
};

// SD3's skip-layer guidance (diffusers' StableDiffusion3Pipeline): at steps
// i with start·N < i < stop·N, a third call on the prompt half skips
// `layers`, and the noise gains scale · (cond − skipped). Only under CFG.
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
