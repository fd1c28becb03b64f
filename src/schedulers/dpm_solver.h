// DPMSolverMultistepScheduler as diffusers implements it
// (schedulers/scheduling_dpmsolver_multistep.py) for the configurations
// PixArt-α/Σ ship: dpmsolver++ (or dpmsolver), orders 1–2, midpoint/heun,
// epsilon / v_prediction / sample, linspace / leading / trailing spacing,
// lower_order_final, final_sigmas_type zero / sigma_min.
//
// Patch-aware: step() updates the rows [row_begin, row_end) of the latent
// (all batches and channels), keeping full-size model-output history, so
// PipeFusion can step one patch at a time; the step index advances only after
// the step that covers the last row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/json.h"
#include "schedulers/scheduler.h"

namespace xdit::schedulers {

struct DPMSolverConfig {
  int64_t num_train_timesteps = 1000;
  double beta_start = 0.0001;
  double beta_end = 0.02;
  std::string beta_schedule = "linear";
  int64_t solver_order = 2;
  std::string prediction_type = "epsilon";
  std::string algorithm_type = "dpmsolver++";
  std::string solver_type = "midpoint";
  bool lower_order_final = true;
  bool euler_at_final = false;
  std::string final_sigmas_type = "zero";
  std::string timestep_spacing = "linspace";
  int64_t steps_offset = 0;
  double lambda_min_clipped = -1.0 / 0.0;

  // Reads scheduler_config.json; options xdit does not implement are rejected
  // with a message naming them (never silently ignored).
  static DPMSolverConfig from_json(const io::Json& j, const std::string& where);
};

class DPMSolverMultistep final : public Scheduler {
 public:
  explicit DPMSolverMultistep(DPMSolverConfig cfg);

  // Takes no hints (a mu or custom sigmas are refused).
  void set_timesteps(int64_t num_inference_steps, const TimestepHints& hints) override;
  void set_timesteps(int64_t num_inference_steps) { set_timesteps(num_inference_steps, {}); }
  // Integer training timesteps, as floats.
  const std::vector<float>& timesteps() const override { return timesteps_; }
  const std::vector<float>& sigmas() const override { return sigmas_; }
  float init_noise_sigma() const override { return 1.0f; }
  int64_t step_index() const override { return step_index_; }
  void step(const float* model_output, float* sample, const Shape& latent_shape, int64_t row_begin,
            int64_t row_end) override;
  using Scheduler::step;

 private:
  DPMSolverConfig cfg_;
  std::vector<float> alphas_cumprod_;
  std::vector<float> sigmas_;
  std::vector<float> timesteps_;
  int64_t step_index_ = 0;
  int64_t lower_order_nums_ = 0;
  // Converted model outputs of the current and previous step, full latent size.
  // The converted predictions of this step and the last, full size, on the
  // device the steps run on (the thread's current device at the first step).
  Tensor cur_, prev_;
};

}  // namespace xdit::schedulers
