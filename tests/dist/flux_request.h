// The FLUX.1 request the distributed LoRA and quantization tests share:
// true CFG over random text and pooled embeddings, 56 × 40 pixels (7 patch
// rows: uneven over 2 and 4 ranks).
#pragma once

#include <cstdint>

#include "core/rng.h"
#include "pipeline/pipeline.h"

namespace xdit::test {

// The embeddings drawn from `embedding_seed`; the noise from `seed`.
inline pipeline::LatentRequest flux_true_cfg_request(const pipeline::Pipeline& p,
                                                     uint64_t embedding_seed, int64_t steps,
                                                     int64_t seed) {
  pipeline::LatentRequest r;
  TorchGenerator g(embedding_seed);
  for (models::Conditioning* c : {&r.cond, &r.uncond}) {
    c->set(models::kText, g.randn({1, 7, p.text_width()}));
    c->set(models::kPooled, g.randn({1, p.family().pooled_width()}));
  }
  r.height = 56;
  r.width = 40;
  r.true_cfg_scale = 2.5;
  r.num_inference_steps = steps;
  r.seed = seed;
  return r;
}

}  // namespace xdit::test
