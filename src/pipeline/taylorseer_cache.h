// TaylorSeer, as diffusers' TaylorSeerCacheConfig(cache_interval,
// disable_cache_before_step, max_order) applies it
// (hooks/taylorseer_cache.py; docs/research/step_caches.md §2): every
// attention module the model offers (models/block_hook.h,
// AttentionOutputHook) at denoising step s
//   - runs when s < W or (s − W − 1) mod I = 0 (so step W itself is
//     forecast), and its factors update: F0 = y, F(j+1) = (Fj_new − Fj_old)
//     / (s − s_last), one order more per update up to K;
//   - otherwise returns Σ_k F_k Δ^k / k!, Δ = s − s_last, without running.
// The schedule depends on the step alone, so every rank runs or forecasts
// alike and the modules' collectives pair up. The factors are kept in f32
// (diffusers' default is bf16). State is per module and per call rows; a
// run starts without any. Rows without factors on a forecast step (a
// PipeFusion patch after the whole-image warm-up, rows a dynamic re-split
// moved) run the module and start theirs, agreed over the groups that
// compute the call together.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>

#include "pipeline/step_cache.h"

namespace xdit::pipeline {

class TaylorSeerCache final : public StepCache, public models::AttentionOutputHook {
 public:
  TaylorSeerCache(int64_t interval, int64_t warmup, int64_t order, CacheSetup setup);
  // Whether step s runs the attention modules (diffusers' schedule).
  static bool computes(int64_t s, int64_t interval, int64_t warmup);

  void begin_loop(Denoiser& d) override;
  void before_step(const StepInfo& s) override;
  void begin_call(const models::DiTInputs& in, const models::Streams& s) override;
  void end_call(models::Streams& s) override;
  bool at_boundary(int64_t /*b*/) const override { return false; }
  models::AttentionOutputHook* attention_hook() override { return this; }

  bool replace(int64_t block, int module, float* out, int64_t n) override;
  void ran(int64_t block, int module, const float* out, int64_t n) override;

 private:
  struct Factors {
    Tensor f;  // [orders stored ≤ K + 1][n]
    int64_t stored = 0, last_step = -1;
  };
  int64_t interval_, warmup_, order_;
  CacheSetup setup_;
  int64_t step_ = 0;
  bool in_step_ = false, active_ = false, compute_ = true;
  int64_t row0_ = 0, row1_ = 0;
  int64_t modules_ = 0, modules_run_ = 0;  // this call's
  std::map<std::tuple<int64_t, int, int64_t, int64_t>, Factors> factors_;
};

}  // namespace xdit::pipeline
