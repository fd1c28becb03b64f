// Step caches (docs/caches.md): a block hook (models/block_hook.h) that
// skips work inside a transformer call, plus the step hook (denoiser.h) that
// tells it which calls are the denoising steps' own. The pipeline makes one
// per run from the request's CacheSettings; its state lives for that run.
//
// Calls that are not a step's own call — --patch_weights auto's calibration
// call, SD3's skip-layer call — run in full and leave the state alone.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/block_hook.h"
#include "pipeline/cache_settings.h"
#include "pipeline/denoiser.h"

namespace xdit::comm {
class Communicator;
}

namespace xdit::pipeline {

// Where the cache sits and whom its decisions must agree with.
struct CacheSetup {
  std::string model;   // DiT::name(): "FLUX", "SD3", "PixArt"
  int64_t blocks = 0;  // the model's flat block list
  models::DiTStage stage;
  int64_t token_rows = 0;  // the run's (frames × patch rows): state is kept by token row
  // Decisions per call: 1 (the whole batch decides once: PixArt's and SD3's
  // batched [uncond; cond]), or 2 (the CFG halves decide apart, as
  // diffusers' FluxPipeline calls them in contexts "cond" and "uncond").
  int64_t contexts = 1;
  // The indicator's sums add up over these groups (the ranks that split the
  // rows; the CFG group where one decision covers both halves) ...
  std::vector<comm::Communicator*> sum_groups;
  // ... and every rank of these takes the same decision (those, plus the
  // tensor-parallel group), or their collectives would no longer pair up.
  std::vector<comm::Communicator*> agree_groups;
  // PipeFusion: the stages' group, over which stage 0 sends each step's
  // decision (null, or one rank: no stages).
  comm::Communicator* stage_group = nullptr;
};

// What a cache did over a run.
struct CacheStats {
  int64_t steps = 0, full_steps = 0;  // the steps' calls, and those that ran every block
  int64_t blocks = 0,
          blocks_run = 0;  // this stage's blocks (or `unit`) over those calls, and those run
  std::string unit = "blocks";
  // Per context, per step: whether it ran every block, and the indicator's
  // value (−1 where there was no reference).
  std::vector<std::vector<bool>> full;
  std::vector<std::vector<double>> indicator;
  // "6 of 10 steps in full, 34 of 57 blocks run".
  std::string summary() const;
  // A later part of the run (Wan2.2's second expert, with a cache of its
  // own) added: its counts, and its steps after these.
  void append(const CacheStats& part);
};

class StepCache : public models::BlockHook, public StepHook {
 public:
  const CacheStats& stats() const { return stats_; }
  // The attention modules' hook, for a cache that forecasts their outputs.
  virtual models::AttentionOutputHook* attention_hook() { return nullptr; }

 protected:
  CacheStats stats_;
};

// The cache `s` (resolved, validated, on) asks for; throws one line when the
// model cannot take it.
std::unique_ptr<StepCache> make_step_cache(const CacheSettings& s, const CacheSetup& setup);

}  // namespace xdit::pipeline
