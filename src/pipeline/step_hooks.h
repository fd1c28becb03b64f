// The step hooks the pipeline itself installs (denoiser.h): `--patch_weights
// auto`'s calibration step, `--patch_weights dynamic`'s re-split between
// steps and SD3's skip-layer guidance. (Progress and the
// fault injection of the tests ride on denoiser.h's ProgressHook.)
#pragma once

#include <cstdint>
#include <vector>

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

// --patch_weights dynamic: after each step (but the first, and the one right
// after a move, which time first touches and resized buffers) the compute of
// every rank of the data-parallel replica (the step's wall time, on a GPU
// from the device idle to the device idle, less its waits inside the
// row-splitting and CFG communicators) is gathered over the replica (under
// serve the replicas run different requests); when the slowest sequence-parallel position took more
// than kImbalance longer than the fastest, and a split in proportion to the measured speeds would
// shorten the slowest by more than kGain, the mesh's weights change and the next step runs on the
// new split (logged). The thresholds are the hysteresis: a balanced split, or one a row from it,
// stays. Exact methods stay exact: the split only moves rows between ranks.
class DynamicBalanceHook : public StepHook {
 public:
  static constexpr double kImbalance = 0.15, kGain = 0.08;
  void begin_loop(Denoiser& d) override;
  void before_step(const StepInfo& s) override;
  void after_step(const StepInfo& s, double seconds) override;
  // The token rows of each SP position in every step so far (tests).
  const std::vector<std::vector<int64_t>>& rows_per_step() const { return rows_; }

 private:
  Denoiser* d_ = nullptr;
  double t0_ = 0, waited0_ = 0;
  int64_t moved_at_ = -2;  // the last step after which the rows moved
  std::vector<std::vector<int64_t>> rows_;
};

}  // namespace xdit::pipeline
