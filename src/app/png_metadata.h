// The PNG text chunks of a generated image (generate and serve): how it was
// made, readable with any PNG tool.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "parallel/config.h"
#include "pipeline/request.h"

namespace xdit::app {

// The values a run used (defaults resolved). What a caller leaves empty,
// at 1 (true_cfg: FLUX.1's default; Qwen-Image's 4 is written), at 0
// (max_sequence_length) or off (slg) is left out of the file.
struct ImageMetadata {
  std::string prompt, negative_prompt;
  uint64_t seed = 0;
  int64_t steps = 0, width = 0, height = 0, max_sequence_length = 0;
  double guidance = 0, true_cfg = 1.0;
  double guidance_2 = -1;                                // Wan2.2's second expert; < 0: none
  double cfg_truncation = 1.0, cfg_normalization = 0.0;  // Z-Image's, at their defaults
  pipeline::SkipLayerGuidance slg;                       // SD3
  std::string model;                                     // the id in the HF cache, or the folder
  std::string model_revision, model_folder, pipeline, dtype, parallel;
  // The step cache and what it did (ImageResult::cache); empty: none.
  std::string cache;
  std::string lora;           // Pipeline::lora_label(); empty: none
  std::string software_note;  // after "xdit VERSION": which front end ("serve"), if any
};

std::map<std::string, std::string> png_metadata(const ImageMetadata& m);

// The layout for the metadata, the log and serve's answer: "serial (1
// process)", or ParallelConfig::label (method, degrees, warm-up, patches,
// sync mode, and exact / stale / approximate) for a run of `steps` steps
// over `token_rows` rows (0: unknown). After a run, pass the mesh's config:
// it holds the weights --patch_weights auto and dynamic chose.
std::string parallel_label(const parallel::ParallelConfig& c, int64_t steps,
                           int64_t token_rows = 0);

}  // namespace xdit::app
