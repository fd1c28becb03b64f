// Guidance as a strategy, after diffusers' `guiders/`: which predictions a
// denoising step needs (the cond prediction; cond and uncond; a third,
// skip-layer call), how they combine into the step's noise, its checks and
// warnings at plan time, and the defaults of the knobs it reads. A family
// names its guider (ModelFamily::guider()); the loop holds it and knows no
// family. One file each: cfg (PixArt, SD3, Wan), true_cfg (FLUX.1,
// Qwen-Image), zimage_cfg (Z-Image), skip_layer (SD3). FLUX.1 [dev]'s
// embedded guidance is conditioning (the family's), not a guider.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "pipeline/request.h"

namespace xdit::pipeline {

struct LoopInputs;
class StepHook;

// A plan's guidance knobs (defaults resolved), or a request's as asked
// (kDefaultGuidance where not given) for warn_unused.
struct GuidanceSettings {
  double guidance_scale = 0;
  double guidance_scale_2 = -1;  // Wan2.2's second expert's (−1: one transformer)
  double true_cfg_scale = 1;
  // Z-Image's (request.h): CFG off where (1000 − t)/1000 > cfg_truncation;
  // the guided norm capped at cfg_normalization × the cond's (> 0).
  double cfg_truncation = 1.0, cfg_normalization = 0.0;
  SkipLayerGuidance skip_layers;  // SD3's
  bool negative = false;          // a negative prompt (or its embeddings) given
};

// What the plan-time checks need of the model and the layout.
struct GuidanceLayout {
  std::string model;  // the family's name, for messages
  int64_t blocks = 0;
  bool pipefusion = false, patch_parallel = false;
};

// One step's combination: the two predictions at `scale` (on), or the cond
// prediction alone.
struct StepGuidance {
  bool on = false;
  double scale = 1.0;
};

class Guider {
 public:
  virtual ~Guider() = default;
  // The defaults of guidance_scale and true_cfg_scale (the family's
  // diffusers pipeline's).
  virtual double default_guidance() const = 0;
  virtual double default_true_cfg() const { return 1.0; }
  // `asked` with guidance_scale and true_cfg_scale left at kDefaultGuidance
  // replaced by the defaults above.
  GuidanceSettings resolved(GuidanceSettings asked) const;
  // Whether a plan's settings make each step take both predictions
  // ([uncond; cond]).
  virtual bool two_predictions(const GuidanceSettings& s) const = 0;
  // What turns the second prediction on, for messages ("--guidance_scale > 1").
  virtual const char* requirement() const = 0;
  // The combination's scale over the steps of expert `expert` (0, or
  // Wan2.2's 1: transformer_2).
  virtual double scale(const GuidanceSettings& s, int expert) const = 0;
  // Whether the family's diffusers pipeline calls the transformer on the
  // two halves apart (its cache contexts "cond" and "uncond"), so that a
  // step cache decides for each half on its own.
  virtual bool calls_apart() const { return false; }

  // The plan's knobs against this guider and the layout: one line each.
  // The scales' bounds, then Z-Image's limits (refused by other guiders).
  virtual void check(const GuidanceSettings& s, const GuidanceLayout& l) const;
  // The extra passes' knobs (skip-layer guidance: refused but by SD3's);
  // `two`: the plan takes both predictions.
  virtual void check_passes(const GuidanceSettings& s, bool two, const GuidanceLayout& l) const;
  // Warnings about knobs given (`asked`: kDefaultGuidance where not) that
  // have no effect with this guider.
  virtual void warn_unused(const GuidanceSettings& /*asked*/) const {}

  // A step hook adding an extra pass's term to the noise (SD3's skip-layer
  // call), or none; `prompt_only` makes the loop's inputs for the prompt
  // half alone (called only when a hook is made).
  virtual std::unique_ptr<StepHook> pass_hook(const GuidanceSettings& s,
                                              const std::function<LoopInputs()>& prompt_only) const;

  // The noise prediction [P, C, ...] from the transformer output `out`
  // [(2)P, out_channels, ...] (any trailing shape: [F, h, w], or token rows'
  // [rows, w]): out = [uncond; cond] when `g.on`, the first C channels
  // (PixArt's learned sigma), at step timestep `t`. On out's device.
  Tensor noise(const Tensor& out, int64_t P, int64_t C, const GuidanceSettings& s,
               const StepGuidance& g, double t) const;

 protected:
  // Whether the step at timestep t takes the cond prediction alone although
  // both were computed (Z-Image's cfg_truncation).
  virtual bool cond_only_at(const GuidanceSettings& /*s*/, double /*t*/) const { return false; }
  // After uncond + scale·(cond − uncond): a change of one item's guided
  // noise `guided` [C, rows, W] from its cond prediction (same layout).
  virtual void adjust(const float* /*cond*/, float* /*guided*/, int64_t /*C*/, int64_t /*rows*/,
                      int64_t /*W*/, const GuidanceSettings& /*s*/, bool /*cuda*/) const {}
  // The bounds every guider checks: the scales finite and >= 0; Z-Image's
  // limits finite and >= 0 (other guiders then refuse them).
  static void check_scales(const GuidanceSettings& s);
  static void check_limit_bounds(const GuidanceSettings& s);
};

}  // namespace xdit::pipeline
