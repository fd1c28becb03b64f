// What a caller asks of a pipeline, and what it gets back. The same structs
// serve every model family: what differs per family (its text embeddings,
// per-item scalars) travels as named tensors (models/conditioning.h); a
// field a family does not use is ignored (and the family says so where that
// matters, e.g. a guidance scale for FLUX.1 [schnell]).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "models/conditioning.h"
#include "pipeline/cache_settings.h"

namespace xdit::pipeline {

// "Use the model's default" for the numeric fields below.
constexpr int64_t kDefaultSteps = -1;
constexpr double kDefaultGuidance = -1.0;

// Prompt embeddings as the transformer takes them: the family's named
// tensors for the prompts and, under CFG, for the negative prompts.
struct PromptEmbeddings {
  models::Conditioning cond;
  models::Conditioning uncond;  // empty without CFG
};

// SD3's skip-layer guidance (diffusers' names and defaults): at steps i with
// start·N < i < stop·N, a third call on the prompt skips `layers`, and the
// noise gains scale · (cond − skipped). Empty layers: off.
struct SkipLayerGuidance {
  std::vector<int64_t> layers;
  double scale = 2.8, start = 0.01, stop = 0.2;
  bool on() const { return !layers.empty(); }
};

// A LoRA a request applies beside the loaded weights (a low-rank side path,
// switched per request: xdit serve's `loras`), by path, at its scale.
struct LoraRef {
  std::string path;
  double scale = 1.0;
  // Its tensors and modules that match nothing in the model are skipped,
  // not refused (serve's per-LoRA "ignore_unmatched", as the CLI's
  // --lora_ignore_unmatched); `skipped` counts them (the planner's check).
  bool ignore_unmatched = false;
  int64_t skipped = 0;
  bool operator==(const LoraRef& o) const {
    return path == o.path && scale == o.scale && ignore_unmatched == o.ignore_unmatched;
  }
};
// "a.safetensors:0.7, b.safetensors:-0.4 (3 unmatched skipped)" (file
// names), "" for none: how xdit labels LoRAs in logs and PNG metadata.
std::string lora_list_label(const std::vector<LoraRef>& loras);

// Embeddings → final latents.
struct LatentRequest {
  // The prompts' embeddings, [P, ...] per name (models::kText [P, L, text
  // width] at least; kTextMask [P, L] or none: all tokens valid; FLUX's and
  // SD3's kPooled [P, pooled width]).
  models::Conditioning cond;
  // The negative prompts' (the same names): needed for CFG (PixArt and SD3:
  // guidance_scale > 1).
  models::Conditioning uncond;
  // [P, C, F, H/f, W/f] (an image: F = 1; a 4-D [P, C, H/f, W/f] is taken
  // as F = 1) or undefined (one frame drawn from the seed).
  Tensor latents;
  int64_t height = 0;  // pixels; 0 = the model's default
  int64_t width = 0;
  // Frames per prompt (a video model's; 0 = the model's default, or the
  // frames the given latents decode to).
  int64_t num_frames = 0;
  int64_t num_inference_steps = kDefaultSteps;
  // diffusers' guidance_scale: classifier-free guidance for PixArt, the
  // embedded guidance of FLUX.1 [dev].
  double guidance_scale = kDefaultGuidance;
  // Wan2.2: the second expert's (transformer_2's) guidance scale; the
  // default is guidance_scale. Classifier-free guidance is on by
  // guidance_scale alone, as in diffusers.
  double guidance_scale_2 = kDefaultGuidance;
  // FLUX, Qwen-Image: classifier-free guidance with the negative embeddings
  // when > 1 (kDefaultGuidance: the model's — FLUX 1, Qwen-Image 4).
  double true_cfg_scale = kDefaultGuidance;
  // Z-Image (ZImagePipeline's cfg_truncation, cfg_normalization): CFG off at
  // the steps whose (1000 − t) / 1000 exceeds cfg_truncation (≤ 1; above 1:
  // never); cfg_normalization > 0 caps each image's guided prediction's norm
  // at that many times its cond prediction's.
  double cfg_truncation = 1.0, cfg_normalization = 0.0;
  SkipLayerGuidance skip_layer_guidance;  // SD3
  CacheSettings cache;                    // a step cache (none by default)
  std::vector<LoraRef> loras;             // per-request LoRAs (none by default)
  uint64_t seed = 42;
};

// Prompts → images, with diffusers' defaults (Pipeline::plan fills them).
struct ImageRequest {
  std::vector<std::string> prompts;            // one image per prompt
  std::optional<std::string> negative_prompt;  // PixArt: "" when absent, as diffusers
  int64_t height = 0, width = 0;               // pixels; 0 = the model's default
  // Frames per prompt: 0 = the model's default (an image model: 1, Wan 81,
  // or what given latents decode to). A video VAE's count (Wan: 4k + 1) is
  // rounded down to one as diffusers does, with a warning.
  int64_t num_frames = 0;
  int64_t num_inference_steps = kDefaultSteps;
  double guidance_scale = kDefaultGuidance;
  double guidance_scale_2 = kDefaultGuidance;            // Wan2.2's second expert
  double true_cfg_scale = kDefaultGuidance;              // FLUX, Qwen-Image (the model's: 1, 4)
  double cfg_truncation = 1.0, cfg_normalization = 0.0;  // Z-Image (LatentRequest's)
  SkipLayerGuidance skip_layer_guidance;                 // SD3
  CacheSettings cache;                                   // a step cache (none by default)
  std::vector<LoraRef> loras;                            // per-request LoRAs (none by default)
  uint64_t seed = 42;
  bool resolution_binning = true;  // PixArt
  int64_t max_sequence_length =
      0;  // 0 = the model's default (PixArt-α 120, Σ 300, FLUX 512, SD3 256)
  // Initial latents [P, C, F, h, w] (or [P, C, h, w]: one frame) at the size
  // the model runs at, F latent frames; undefined = drawn from the seed.
  Tensor latents;
};

// A service's per-request limits (xdit serve's --max_pixels, --max_steps,
// --max_frames, --max_batch), checked by the planner on the request as
// resolved (defaults filled in); 0: no limit.
struct RequestLimits {
  int64_t max_pixels = 0;  // width x height, written and run
  int64_t max_steps = 0;
  int64_t max_frames = 0;  // frames per prompt
  int64_t max_batch = 0;   // images (prompts) per request
};

// Per prompt a sequence of `frames` frames (an image model: one).
struct ImageResult {
  // Prompt-major: rgb[p · frames + f] is prompt p's frame f, height·width·3
  // bytes (one frame per prompt: rgb[p] is prompt p's image).
  std::vector<std::vector<uint8_t>> rgb;
  int64_t frames = 1;
  int64_t height = 0, width = 0;
  double text_seconds = 0, denoise_seconds = 0, decode_seconds = 0;
  // The step cache and what it did: "fbcache threshold 0.05: 6 of 10 steps
  // in full, 34 of 57 blocks run"; empty without one.
  std::string cache;
};

struct StepEvent {
  int64_t step = 0, total = 0;
  double seconds = 0;  // this step
};

}  // namespace xdit::pipeline
