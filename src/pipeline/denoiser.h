// The denoising loop, apart from what a model family or a parallel method
// is: one Denoiser over a DiT, a parallel runtime and a scheduler, with two
// strategies — the per-step loop (serial, sequence / patch / CFG parallel)
// and PipeFusion's per-patch pipeline (pipefusion.cpp) — and step hooks at
// fixed points of every step. Progress, fault injection, calibration of
// uneven devices and SD3's skip-layer guidance are step hooks; step caches
// are a step hook plus a block hook (models/block_hook.h).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/tensor.h"
#include "models/dit.h"
#include "parallel/runtime.h"
#include "pipeline/guidance/guider.h"
#include "pipeline/request.h"
#include "schedulers/scheduler.h"

namespace xdit::pipeline {

// Stops the run (throws one line naming the step and the likely causes) when
// the latents hold NaN or Inf after denoising step `step` of `total`: such
// latents decode to a black image.
void check_finite_latents(const Tensor& latents, int64_t step, int64_t total);

// The initial latents as diffusers draws them: torch.randn([P, C, F, h, w])
// from a CPU generator seeded with `seed` (FLUX packs them inside the model).
// F = 1 (an image) draws the values of torch.randn([P, C, h, w]), in order.
Tensor initial_noise(int64_t prompts, int64_t channels, int64_t frames, int64_t latent_h,
                     int64_t latent_w, uint64_t seed);

// Latents with their frame axis: [B, C, F, H, W] as they are; a 4-D
// [B, C, H, W] (latents saved for images) as F = 1, a view.
Tensor with_frame_axis(const Tensor& latents);

// What every transformer call of one denoising run shares: the batch's
// conditioning ([uncond; cond] under CFG, one half under CFG parallel).
struct LoopInputs {
  models::Conditioning cond;
  std::vector<int64_t> skip_blocks;  // SD3's skip-layer guidance call
  int64_t prompts = 0, batch = 0;
  // Guidance: the plan's guider and knobs; `cfg`: the batch holds both
  // halves' predictions (`cfg_split`: one CFG group's half, gathered after),
  // combined at `cfg_scale` (the running expert's).
  const Guider* guider = nullptr;
  GuidanceSettings guidance;
  bool cfg = false, cfg_split = false;
  double cfg_scale = 1.0, timestep_divisor = 1.0;
  bool timestep_reversed = false;  // models::DiTSpec's
  // The transformer's inputs for token rows [r0, r1) (0, 0: all) at timestep t.
  models::DiTInputs at(const Tensor& latents, double t, int64_t r0, int64_t r1) const;
};

class Denoiser;

// Where a step stands: step `step` (0-based) of `total`, at `timestep`.
struct StepInfo {
  int64_t step = 0, total = 0;
  double timestep = 0;
};

// Code at fixed points of every denoising step. Hooks run in the order they
// were added; every rank runs the same hooks (a hook that decides must
// decide alike on every rank). Under PipeFusion a step's noise is per patch
// and stage: the noise point is not offered there.
class StepHook {
 public:
  virtual ~StepHook() = default;
  // Before the first step (the model loaded, the latents drawn).
  virtual void begin_loop(Denoiser& /*d*/) {}
  virtual void before_step(const StepInfo& /*s*/) {}
  // The guided noise of the step before the scheduler's step, and `out`, the
  // whole transformer output it came from ([uncond; cond] under CFG); a hook
  // may change the noise (a guidance term).
  virtual void on_noise(const StepInfo& /*s*/, Tensor& /*noise*/, const Tensor& /*out*/,
                        Denoiser& /*d*/) {}
  // After the scheduler's step; `seconds` the step took.
  virtual void after_step(const StepInfo& /*s*/, double /*seconds*/) {}
};

// The app's progress callback as a step hook.
// A run of several parts (Wan2.2's experts, each a Denoiser run of its
// steps) counts them as one: `offset` steps before this part, `total` in all
// (0: the part's own).
class ProgressHook : public StepHook {
 public:
  explicit ProgressHook(std::function<void(const StepEvent&)> f, int64_t offset = 0,
                        int64_t total = 0)
      : f_(std::move(f)), offset_(offset), total_(total) {}
  void after_step(const StepInfo& s, double seconds) override {
    if (f_) f_({offset_ + s.step + 1, total_ > 0 ? total_ : s.total, seconds});
  }

 private:
  std::function<void(const StepEvent&)> f_;
  int64_t offset_, total_;
};

// A fault-injection knob for the load-balancing tests, like XDIT_FAULT:
// XDIT_SLOW_RANK=r XDIT_SLOW_FACTOR=f XDIT_SLOW_FROM=s makes world rank r's
// transformer forward compute f times as long from step s on (it sleeps
// (f − 1) × the forward's time less its waits for other ranks), as a device
// that slowed down would; --attn_layer_num_for_pp auto's measurement (before
// any step) counts f times its time. Multi-rank runs only.
struct SlowRank {
  double factor = 1.0;
  int64_t from = 0;
  static SlowRank from_env(int rank);
  bool on() const { return factor > 1.0; }
  void after_forward(int64_t step, double compute_seconds) const;
};

// What PipeFusion's pipeline did on this stage (for tests and the trace).
struct PipeFusionStats {
  int64_t patch_forwards = 0;  // patch forwards after the warm-up
  // The micro-steps (1-based) of the first and last of them; 0 when none ran.
  int64_t first_micro_step = 0, last_micro_step = 0;
};

class Denoiser {
 public:
  // `latent_channels`: of the latents the loop holds; `device`: where they
  // live during the loop (the scheduler's step included).
  Denoiser(models::DiT& model, parallel::ParallelRuntime& runtime, schedulers::Scheduler& sched,
           LoopInputs inputs, Device device);
  void add_hook(StepHook* hook) { hooks_.push_back(hook); }

  // The loop from `latents` [P, C, F, h, w] (host) to the final latents (host):
  // PipeFusion's pipeline where the runtime's method is PipeFusion, the
  // per-step loop otherwise. Over steps [begin, end) of the scheduler's
  // timesteps (end −1: to the last), which the scheduler continues from its
  // state: one expert's part of a Wan2.2 run. Hooks and the stale-K/V
  // methods' warm-up see the part as a run of its own (StepInfo's step from
  // 0, of end − begin).
  Tensor run(Tensor latents, int64_t begin = 0, int64_t end = -1);
  const PipeFusionStats& pipefusion_stats() const { return pf_stats_; }

  // For hooks: the loop's inputs, its current latents, the timesteps, and a
  // whole transformer call of `li` on latents `x` at timestep t over this
  // rank's rows, gathered and shaped as the latents (a skip-layer call, a
  // calibration call).
  const LoopInputs& inputs() const { return li_; }
  const Tensor& latents() const { return latents_; }
  const std::vector<float>& timesteps() const { return sched_.timesteps(); }
  Tensor call(const LoopInputs& li, const Tensor& x, double t);
  // The transformer's input of the step: the latents, twice under CFG (one
  // buffer, refilled).
  const Tensor& model_input();
  models::DiT& model() { return model_; }
  // Token rows of the latents (frames × patch rows): the unit of the row split.
  int64_t token_rows() const { return token_rows_; }
  parallel::ParallelRuntime& runtime() { return rt_; }
  Device device() const { return device_; }

 private:
  Tensor step_loop();
  Tensor pipefusion_loop();
  // The SP shares of token rows [r0, r1) and the CFG halves gathered, then
  // the guider's noise at the step's timestep `t`; shaped as the latents
  // when the rows are all of them.
  Tensor noise_prediction(const Tensor& out, int64_t r0, int64_t r1, Tensor* gathered, double t);
  // A gathered output over all token rows, [B, C, F·h, w], as [B, C, F, h, w] (a view).
  Tensor framed(const Tensor& whole) const;

  models::DiT& model_;
  parallel::ParallelRuntime& rt_;
  schedulers::Scheduler& sched_;
  LoopInputs li_;
  Device device_;
  Tensor latents_, model_in_;
  int64_t token_rows_ = 0;       // frames × patch rows of the latents
  int64_t begin_ = 0, end_ = 0;  // the steps this run takes
  int64_t row0_ = 0, row1_ = 0;  // this rank's share of them in the step loop
  std::vector<StepHook*> hooks_;
  PipeFusionStats pf_stats_;
};

}  // namespace xdit::pipeline
