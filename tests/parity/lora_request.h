// The requests of the LoRA goldens (tools/goldens/make_lora.py's
// FAMILIES[...]["image"]), shared by the LoRA and checkpoint parity tests.
#pragma once

#include "pipeline/request.h"

namespace xdit::test {

inline pipeline::ImageRequest flux_lora_request() {
  pipeline::ImageRequest r;
  r.prompts = {"a red fox in the snow"};
  r.num_inference_steps = 4;
  r.max_sequence_length = 32;
  r.height = 48;
  r.width = 80;
  r.guidance_scale = 0.0;
  r.seed = 0;
  return r;
}

// FAMILIES["sd35"]["image"] (the tiny SD3.5, with CFG).
inline pipeline::ImageRequest sd35_lora_request() {
  pipeline::ImageRequest r;
  r.prompts = {"Two cats, sitting on a mat!"};
  r.negative_prompt = "blurry";
  r.num_inference_steps = 4;
  r.max_sequence_length = 24;
  r.height = 40;
  r.width = 56;
  r.guidance_scale = 4.0;
  r.seed = 5;
  return r;
}

}  // namespace xdit::test
