// One interface for every scheduler the denoising loops drive (DPM-Solver++
// for PixArt, Flow-Match Euler for FLUX and SD3). Neither the serial loop nor
// PipeFusion names a scheduler type: they call set_timesteps once, feed
// timesteps() to the model as floats, and step() whole latents or row ranges.
// A further scheduler is one file implementing this plus a line in
// SchedulerConfig (scheduler_config.h).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace xdit::schedulers {

// What a pipeline knows that the scheduler config does not (diffusers passes
// these to set_timesteps): `mu` for resolution-dependent shifting, custom
// `sigmas` (FLUX passes linspace(1, 1/N, N)).
struct TimestepHints {
  std::optional<double> mu;
  std::vector<double> sigmas;
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  virtual void set_timesteps(int64_t num_inference_steps, const TimestepHints& hints) = 0;
  // The model's timestep input per step (fractional for Flow-Match).
  virtual const std::vector<float>& timesteps() const = 0;
  // Noise levels per step plus the final one (one more than timesteps()).
  virtual const std::vector<float>& sigmas() const = 0;
  // The factor the initial noise is scaled by.
  virtual float init_noise_sigma() const = 0;
  virtual int64_t step_index() const = 0;
  // One step on rows [row_begin, row_end) of latents shaped [B, C, F, H, W]
  // (or [B, C, H, W]), rows of the frame-major row axis F·H: `model_output`
  // and `sample` hold just those rows ([B, C, rows, W], contiguous; a range
  // may cross frames); `sample` is updated in place. The step index advances
  // after the call that completes all F·H rows, so PipeFusion can step patch
  // by patch.
  virtual void step(const float* model_output, float* sample, const Shape& latent_shape,
                    int64_t row_begin, int64_t row_end) = 0;
  // The whole latent (any shape [B, C, ..., W]; both shapes equal).
  void step(const Tensor& model_output, Tensor& sample);
  // The rows of the frame-major row axis of `latent_shape`: F·H (H for 4-D).
  static int64_t latent_rows(const Shape& latent_shape);

 protected:
  // The row-range bookkeeping every scheduler shares. begin_rows checks a
  // step's arguments (after set_timesteps, not past the last of `steps`, a
  // valid range of a [B, C, (F,) H, W] shape) and returns true when the shape is
  // new, so the caller resets any full-size history; end_rows counts the rows
  // and returns true when they complete the step.
  bool begin_rows(const Shape& shape, int64_t row_begin, int64_t row_end, size_t steps,
                  int64_t index);
  bool end_rows(int64_t rows);
  void reset_rows() {
    rows_done_ = 0;
    rows_shape_.clear();  // the next step re-initialises any history
  }

 private:
  Shape rows_shape_;
  int64_t rows_done_ = 0;
};

}  // namespace xdit::schedulers
