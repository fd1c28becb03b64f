// The request of the FLUX.1 LoRA goldens (tools/goldens/make_lora.py's
// FAMILIES["flux"]["image"]), shared by the LoRA parity tests.
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

}  // namespace xdit::test
