// The whole-pipeline goldens of tools/goldens/make_flux.py and make_sd3.py:
// tests/data/goldens/<stem>_pipeline.safetensors holds, per case, tensors
// named "caseK.*" and the request as JSON in the metadata key "caseK".
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>

#include "io/json.h"
#include "io/safetensors.h"
#include "pipeline/request.h"

namespace xdit::test {

// Calls f(case name, its request metadata, the goldens) for each case.
inline void for_each_pipeline_case(const std::string& stem,
                                   const std::function<void(const std::string&, const io::Json&,
                                                            std::map<std::string, Tensor>&)>& f) {
  const std::string file =
      std::string(XDIT_TEST_DATA) + "/goldens/" + stem + "_pipeline.safetensors";
  io::SafeTensorsFile sf(file);
  auto g = io::read_safetensors_f32(file);
  const int cases = std::stoi(sf.metadata().at("cases"));
  for (int k = 0; k < cases; ++k) {
    const std::string c = "case" + std::to_string(k);
    SCOPED_TRACE(stem + " " + sf.metadata().at(c));
    f(c, io::parse_json_text(sf.metadata().at(c), c), g);
  }
}

// The request fields every pipeline golden records: prompt, negative prompt
// (null: none), size, steps, guidance scale, seed, T5 length.
inline pipeline::ImageRequest image_request(const io::Json& m) {
  pipeline::ImageRequest r;
  r.prompts = {m["prompt"].get<std::string>()};
  if (!m["negative_prompt"].is_null()) r.negative_prompt = m["negative_prompt"].get<std::string>();
  r.height = m["height"].get<int64_t>();
  r.width = m["width"].get<int64_t>();
  r.num_inference_steps = m["steps"].get<int64_t>();
  r.guidance_scale = m["guidance_scale"].get<double>();
  r.seed = m["seed"].get<uint64_t>();
  r.max_sequence_length = m["max_sequence_length"].get<int64_t>();
  return r;
}

}  // namespace xdit::test
