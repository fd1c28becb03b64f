// A request checked once: Pipeline::plan turns an ImageRequest (prompts, from
// the CLI or HTTP) or a LatentRequest (embeddings) into a Plan — defaults
// filled, the size binned or floored, the CFG decision made, and the mesh,
// memory and every component's config checked before any weight loads.
// A Plan is immutable; what runs it (Pipeline::generate / generate_latents,
// the data-parallel wrappers, serve's rounds) checks nothing again. Derived
// plans (a data-parallel share, the plan with its prompts encoded) come
// from the plan's own methods, never from edited fields.
//
// The other ranks of a server receive plans as JSON written and read from
// one table of the plan's fields (plan.cpp), so no field travels one way only.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/conditioning.h"
#include "pipeline/guidance/guider.h"
#include "pipeline/request.h"

namespace xdit::pipeline {

class Pipeline;

// What a plan ends in: decoded images (the VAE is checked and counted) or
// the final latents.
enum class Output { kImages, kLatents };

// A plan's values. Read through Plan; only the planner and the plan's own
// methods write them.
struct PlanFields {
  // Conditioning: prompts the family encodes, or given embeddings (then
  // `prompts` is empty and `cond` holds the batch).
  std::vector<std::string> prompts;
  std::optional<std::string> negative_prompt;
  int64_t max_sequence_length = 0;  // T5 tokens (prompts only)
  models::Conditioning cond, uncond;
  Tensor latents;  // initial latents [P, C, F, h, w] (f32), or undefined: drawn from the seed
  // The size asked for (the images' size) and the size the model runs at
  // (the aspect-ratio bin under PixArt's binning, else the same).
  int64_t height = 0, width = 0;
  int64_t run_height = 0, run_width = 0;
  // Frames per prompt: written (diffusers' num_frames) and of the latents
  // (the VAE's temporal compression: Wan's 81 frames are 21 latent frames).
  int64_t num_frames = 1, latent_frames = 1;
  int64_t num_inference_steps = 0;
  double guidance_scale = 0;
  double guidance_scale_2 = -1;  // Wan2.2's second expert (< 0: one transformer)
  double true_cfg_scale = 1.0;
  double cfg_truncation = 1.0, cfg_normalization = 0.0;  // Z-Image (request.h)
  SkipLayerGuidance skip_layer_guidance;
  CacheSettings cache;         // resolved: the kind's defaults filled in
  std::vector<LoraRef> loras;  // applied beside the weights for this run (checked)
  uint64_t seed = 42;
  // The run is resized back from the bin to height x width after decoding.
  bool resize_back = false;
  bool cfg = false;  // both predictions each step (the guider's decision)
  Output output = Output::kImages;
  // The guidance knobs above, for the guider (`negative`: a negative prompt
  // or its embeddings).
  GuidanceSettings guidance() const;
};

class Plan {
 public:
  const PlanFields& operator*() const { return f_; }
  const PlanFields* operator->() const { return &f_; }
  // The number of images (prompts, or the embeddings' batch).
  int64_t batch() const;
  bool has_prompts() const { return !f_.prompts.empty(); }

  // Data-parallel share: items [begin, end) of the batch (prompts or
  // embeddings) with `latents` as their initial latents (undefined: drawn
  // from the seed by the run). A share of a checked plan needs no check.
  Plan share(int64_t begin, int64_t end, Tensor latents) const;
  // The plan with its prompts replaced by their embeddings (the family's
  // encoder output, checked there), e.g. to encode the whole batch once
  // before the data-parallel shares.
  Plan with_embeddings(PromptEmbeddings e) const;

  // The plan as the ranks of a server exchange it, and back (the same table
  // of fields both ways). Embeddings and initial latents do not travel: a
  // plan holding them is refused, not cut short.
  nlohmann::json to_json() const;
  static Plan from_json(const nlohmann::json& j);
  // The rows of that table (tests check every one travels).
  static size_t field_count();

 private:
  friend class Pipeline;
  explicit Plan(PlanFields f) : f_(std::move(f)) {}
  PlanFields f_;
};

}  // namespace xdit::pipeline
