// FlowMatchEulerDiscreteScheduler as diffusers implements it
// (schedulers/scheduling_flow_match_euler_discrete.py), for FLUX.1 and SD3:
// a static `shift`, or resolution-dependent shifting with `mu`
// (exponential or linear time shift), custom sigmas, `shift_terminal`,
// `invert_sigmas`; the Euler step x ← x + (σ_next − σ)·v.
//
// Precision follows diffusers step by step: the training sigmas are f32
// (torch), the inference schedule is f64 (numpy) when it is derived from them
// and f32 when the pipeline passes sigmas, and both end as f32. SD3's default
// path shifts twice (once in the constructor, again in set_timesteps), and so
// does this one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/json.h"
#include "schedulers/scheduler.h"

namespace xdit::schedulers {

struct FlowMatchConfig {
  int64_t num_train_timesteps = 1000;
  double shift = 1.0;
  bool use_dynamic_shifting = false;
  double base_shift = 0.5;
  double max_shift = 1.15;
  int64_t base_image_seq_len = 256;
  int64_t max_image_seq_len = 4096;
  bool invert_sigmas = false;
  double shift_terminal = 0.0;  // 0: off (diffusers tests `if shift_terminal:`)
  std::string time_shift_type = "exponential";

  // Reads scheduler_config.json; options xdit does not implement
  // (karras / exponential / beta sigmas, stochastic sampling) are refused by
  // name.
  static FlowMatchConfig from_json(const io::Json& j, const std::string& where);
  // mu for an image of `image_seq_len` latent tokens, as the FLUX and SD3
  // pipelines compute it (calculate_shift: linear between the base and max
  // sequence lengths).
  double mu(int64_t image_seq_len) const;
};

class FlowMatchEuler final : public Scheduler {
 public:
  explicit FlowMatchEuler(FlowMatchConfig cfg);

  // hints.mu is required with use_dynamic_shifting; hints.sigmas, when set,
  // must hold num_inference_steps values.
  void set_timesteps(int64_t num_inference_steps, const TimestepHints& hints) override;
  const std::vector<float>& timesteps() const override { return timesteps_; }
  const std::vector<float>& sigmas() const override { return sigmas_; }
  float init_noise_sigma() const override { return 1.0f; }
  int64_t step_index() const override { return step_index_; }
  void step(const float* model_output, float* sample, const Shape& latent_shape, int64_t row_begin,
            int64_t row_end) override;
  using Scheduler::step;

 private:
  FlowMatchConfig cfg_;
  float sigma_max_ = 1.0f, sigma_min_ = 0.0f;  // of the training schedule
  std::vector<float> timesteps_, sigmas_;
  int64_t step_index_ = 0;
};

}  // namespace xdit::schedulers
