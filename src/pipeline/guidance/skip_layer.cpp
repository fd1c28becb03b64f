#include "pipeline/guidance/skip_layer.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "core/trace.h"
#include "kernels/kernels.h"

namespace xdit::pipeline {

void SkipLayerGuider::check_passes(const GuidanceSettings& g, bool two,
                                   const GuidanceLayout& l) const {
  const SkipLayerGuidance& s = g.skip_layers;
  if (!s.on()) return;
  for (const int64_t layer : s.layers)
    XDIT_CHECK(layer >= 0 && layer < l.blocks, "skip-guidance layer ", layer,
               " is outside the model's blocks 0 … ", l.blocks - 1);
  XDIT_CHECK(std::isfinite(s.scale) && std::isfinite(s.start) && std::isfinite(s.stop) &&
                 s.start >= 0 && s.stop <= 1 && s.start <= s.stop,
             "skip_layer_guidance_scale must be finite and 0 <= start <= stop <= 1, got scale ",
             s.scale, ", start ", s.start, ", stop ", s.stop);
  XDIT_CHECK(!l.pipefusion && !l.patch_parallel,
             "skip-layer guidance does not run with PipeFusion or patch parallelism yet: use "
             "sequence, CFG or data parallelism");
  if (!two)
    XDIT_WARN(
        "skip-layer guidance has no effect without classifier-free guidance "
        "(guidance_scale > 1), as in diffusers");
}

std::unique_ptr<StepHook> SkipLayerGuider::pass_hook(
    const GuidanceSettings& s, const std::function<LoopInputs()>& prompt_only) const {
  if (!s.skip_layers.on()) return nullptr;
  LoopInputs li = prompt_only();
  li.skip_blocks = s.skip_layers.layers;
  return std::make_unique<SkipGuidanceHook>(s.skip_layers, std::move(li));
}

SkipGuidanceHook::SkipGuidanceHook(const SkipLayerGuidance& slg, LoopInputs prompt_only)
    : slg_(slg), li_(std::move(prompt_only)) {}

bool SkipGuidanceHook::skips_at(const SkipLayerGuidance& s, int64_t i, int64_t n) {
  // diffusers: i > num_inference_steps · start and i < num_inference_steps · stop.
  const double di = static_cast<double>(i), dn = static_cast<double>(n);
  return s.on() && di > dn * s.start && di < dn * s.stop;
}

void SkipGuidanceHook::begin_loop(Denoiser& d) {
  if (!d.device().cuda()) return;  // the conditioning goes up once, as the loop's does
  li_.cond = li_.cond.as(DType::kF32, d.device());
}

void SkipGuidanceHook::on_noise(const StepInfo& s, Tensor& noise, const Tensor& out, Denoiser& d) {
  if (!d.inputs().cfg || !skips_at(slg_, s.step, s.total)) return;
  // The prompt half again, with blocks skipped.
  trace::Span span("skip-layer guidance " + std::to_string(s.step), "compute");
  const Tensor skipped = d.call(li_, d.latents(), s.timestep);
  // noise + (noise_pred_text − noise_pred_skip_layers) · scale, in f32.
  const int64_t P = li_.prompts, C = noise.dim(1);
  const int64_t oc = out.dim(1), hw = out.numel() / (out.dim(0) * oc), plane = C * hw;
  for (int64_t b = 0; b < P; ++b)
    kernels::guidance_add(noise.data<float>() + b * plane, out.data<float>() + (P + b) * oc * hw,
                          skipped.data<float>() + b * oc * hw, static_cast<float>(slg_.scale),
                          plane);
}

}  // namespace xdit::pipeline
