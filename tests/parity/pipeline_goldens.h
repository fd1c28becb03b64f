// The whole-pipeline goldens of tools/goldens/make_flux.py, make_sd3.py and
// the Wan scripts:
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
#include "test_util.h"

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

// A video pipeline's frames (ImageResult: prompt 0's frames) against
// diffusers' video [1, 3, F, H, W] in [-1, 1]: the count, the size, and each
// frame within 1/255.
inline void expect_video_frames(const pipeline::ImageResult& out, const Tensor& video) {
  ASSERT_EQ(out.frames, video.dim(2));
  ASSERT_EQ(out.rgb.size(), static_cast<size_t>(video.dim(2)));
  ASSERT_EQ(out.height, video.dim(3));
  ASSERT_EQ(out.width, video.dim(4));
  const int64_t F = video.dim(2), plane = video.dim(3) * video.dim(4);
  for (int64_t f = 0; f < F; ++f) {
    std::vector<float> frame(static_cast<size_t>(3 * plane));  // frame f as [3, H, W]
    for (int64_t c = 0; c < 3; ++c)
      std::copy_n(video.data<float>() + (c * F + f) * plane, plane, frame.begin() + c * plane);
    EXPECT_LE(worst_pixel_difference(out.rgb[static_cast<size_t>(f)], frame.data(), video.dim(3),
                                     video.dim(4)),
              1)
        << "frame " << f << ": largest per-pixel difference (of 255)";
  }
}

}  // namespace xdit::test
