#include "pipeline/step_hooks.h"

#include <string>

#include "core/error.h"
#include "core/log.h"
#include "core/trace.h"
#include "kernels/kernels.h"
#include "parallel/calibrate.h"

namespace xdit::pipeline {

void CalibrationHook::begin_loop(Denoiser& d) {
  parallel::ParallelRuntime& rt = d.runtime();
  parallel::Mesh& mesh = *rt.mesh();
  const int64_t rows = d.token_rows();
  const double t = d.timesteps().front();
  // The weights are still unset, so my_rows splits evenly and tells the backend.
  const parallel::Calibration c =
      parallel::calibrate_weights(mesh, rows, [&](int64_t b, int64_t e) {
        const auto mine = rt.my_rows(0, rows);
        XDIT_CHECK(mine.first == b && mine.second == e, "calibration: row split mismatch");
        const Tensor model_in = d.model_input();
        if (nn::AttentionBackend* backend = rt.backend()) backend->begin_step(0, 1, true);
        trace::Span span("calibration step", "compute");
        d.model().forward(d.inputs().at(model_in, t, b, e));
      });
  mesh.set_patch_weights(c.weights);
  if (mesh.world().rank() == 0) {
    XDIT_INFO("--patch_weights auto: calibrated on one step: ", c.describe());
    if (mesh.config().ulysses_degree > 1)
      XDIT_WARN(
          "--patch_weights with Ulysses moves only the projections and MLP: its attention "
          "splits by heads over the whole sequence (the shorter shares padded to the "
          "longest), so a slow rank keeps its share of it; Ring or patch parallelism "
          "follow the rows (docs/PERFORMANCE.md)");
  }
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
