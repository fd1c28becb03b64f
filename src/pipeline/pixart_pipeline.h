// The PixArt-α / PixArt-Σ pipeline (diffusers PixArtAlphaPipeline /
// PixArtSigmaPipeline) from prompt embeddings to latents: CFG batch, the
// micro-conditions, the transformer, guidance, learned-sigma split and the
// DPM-Solver++ step. Construction reads and checks every config and opens the
// weight files (header checks only); load() builds the transformer.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "io/model_folder.h"
#include "io/weights.h"
#include "models/pixart.h"
#include "schedulers/dpm_solver.h"

namespace xdit::pipeline {

struct LatentRequest {
  Tensor prompt_embeds;    // [P, L, caption_channels]
  Tensor prompt_mask;      // [P, L] or undefined (all tokens valid)
  Tensor negative_embeds;  // [P, L', caption_channels]; needed when guidance_scale > 1
  Tensor negative_mask;
  Tensor latents;      // [P, C, H/8, W/8] or undefined (drawn from the seed)
  int64_t height = 0;  // pixels; 0 = the model's default (sample_size · 8)
  int64_t width = 0;
  int64_t num_inference_steps = 20;
  double guidance_scale = 4.5;
  uint64_t seed = 42;
};

struct StepEvent {
  int64_t step = 0, total = 0;
  double seconds = 0;  // this step
};

class PixArtPipeline {
 public:
  static constexpr int64_t kVaeScaleFactor = 8;

  PixArtPipeline(const std::string& folder, DType dtype);
  ~PixArtPipeline();

  const models::PixArtConfig& config() const { return cfg_; }
  const io::ModelFolder& folder() const { return folder_; }
  // Fills defaults (height/width) and checks the request against the model;
  // throws a one-line error. Cheap: call before load().
  void validate(LatentRequest& r) const;
  void load();
  // Runs the denoising loop; returns the final latents [P, C, H/8, W/8].
  Tensor generate_latents(const LatentRequest& r,
                          const std::function<void(const StepEvent&)>& on_step = {});

 private:
  io::ModelFolder folder_;
  DType dtype_;
  models::PixArtConfig cfg_;
  schedulers::DPMSolverConfig sched_cfg_;
  std::unique_ptr<io::WeightStore> weights_;
  std::unique_ptr<models::PixArtTransformer> transformer_;
};

}  // namespace xdit::pipeline
