// UniPCMultistepScheduler as diffusers implements it
// (schedulers/scheduling_unipc_multistep.py) for the configurations Wan2.1
// and Wan2.2 ship: flow sigmas (use_flow_sigmas, flow_shift), flow_prediction
// (or epsilon / v_prediction / sample on the flow schedule), predict_x0, B(h)
// bh1 or bh2, orders 1–2 with the UniC corrector (disable_corrector),
// lower_order_final, final_sigmas_type zero / sigma_min, custom sigmas.
//
// Each step i: the corrector UniC refines the sample with this step's
// prediction and the last step's (when i > 0), then the predictor UniP moves
// it to σ[i+1]. Patch-aware as DPMSolverMultistep: step() updates the rows
// [row_begin, row_end) and keeps full-size history (the last two x0
// predictions and the last corrected sample), so PipeFusion can step one
// patch at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/json.h"
#include "schedulers/scheduler.h"

namespace xdit::schedulers {

struct UniPCConfig {
  int64_t num_train_timesteps = 1000;
  int64_t solver_order = 2;
  std::string prediction_type = "flow_prediction";
  std::string solver_type = "bh2";
  bool lower_order_final = true;
  std::vector<int64_t> disable_corrector;  // step indices whose next step skips UniC
  double flow_shift = 1.0;
  std::string final_sigmas_type = "zero";

  // Reads scheduler_config.json; options xdit does not implement (the VP
  // schedule without flow sigmas, karras / exponential / beta sigmas, dynamic
  // shifting, thresholding, predict_x0 false, order 3) and the combinations
  // that make diffusers' result NaN or inf are refused by name.
  static UniPCConfig from_json(const io::Json& j, const std::string& where);
};

class UniPCMultistep final : public Scheduler {
 public:
  explicit UniPCMultistep(UniPCConfig cfg);

  // hints.sigmas, when set, replace linspace(1, 1/N, steps + 1)[:-1] (and are
  // shifted by flow_shift as well); a mu is refused.
  void set_timesteps(int64_t num_inference_steps, const TimestepHints& hints) override;
  // The model's timestep: int(σ·num_train_timesteps), truncated, as floats.
  const std::vector<float>& timesteps() const override { return timesteps_; }
  const std::vector<float>& sigmas() const override { return sigmas_; }
  float init_noise_sigma() const override { return 1.0f; }
  int64_t step_index() const override { return step_index_; }
  void step(const float* model_output, float* sample, const Shape& latent_shape, int64_t row_begin,
            int64_t row_end) override;
  using Scheduler::step;

 private:
  UniPCConfig cfg_;
  std::vector<float> timesteps_, sigmas_;
  int64_t step_index_ = 0;
  int64_t lower_order_nums_ = 0;
  int64_t last_order_ = 0;  // the predictor's order at the last step (the corrector's now)
  // Full size, on the device the steps run on: the x0 predictions of the last
  // step (cur_) and the one before (prev_, overwritten with this step's),
  // and the last corrected sample.
  Tensor cur_, prev_, last_;
};

}  // namespace xdit::schedulers
