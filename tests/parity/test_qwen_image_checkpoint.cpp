// Qwen-Image GGUF files as the community ships them (diffusers' own names,
// which diffusers reads with an identity mapping): the tiny Qwen-Image's
// transformer in Q8_0 and F32 (tools/goldens/make_qwen_image_gguf.py) gives
// diffusers' image of the same file (QwenImageTransformer2DModel
// .from_single_file with GGUFQuantizationConfig, f32) within 1/255, without
// and with true CFG, its Q8_0 matrices kept in their blocks.
#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "pipeline/pipeline.h"
#include "test_util.h"

namespace xdit {
namespace {

std::string data(const std::string& name) {
  return std::string(XDIT_TEST_DATA) + "/qwen_image_checkpoint/" + name;
}

pipeline::ImageRequest request(bool cfg) {
  pipeline::ImageRequest r;  // make_qwen_image_pipeline.py's CASES[0] and CASES[1]
  r.num_inference_steps = 3;
  if (cfg) {
    r.prompts = {"Two cats, sitting on a mat under the warm afternoon sun!"};
    r.negative_prompt = "blurry";
    r.height = 48;
    r.width = 64;
    r.true_cfg_scale = 2.5;
    r.seed = 7;
    r.max_sequence_length = 24;
  } else {
    r.prompts = {"a red fox in the snow"};
    r.height = 64;
    r.width = 48;
    r.seed = 0;
    r.max_sequence_length = 32;
  }
  return r;
}

TEST(QwenImageCheckpoint, ImageFromGgufIsDiffusers) {
  const std::string folder = std::string(XDIT_MODELS) + "/qwen-image-tiny";
  const auto want = io::read_safetensors_f32(data("qwen_image_tiny_q8_0_image.safetensors"));
  pipeline::Pipeline pipe(folder, DType::kF32), plain(folder, DType::kF32);
  pipe.set_transformer_file(data("qwen_image_tiny_q8_0.gguf"));
  pipe.load();
  plain.load();
  EXPECT_LT(pipe.linear_weight_bytes(), plain.linear_weight_bytes());  // Q8_0 kept in blocks
  for (const bool cfg : {false, true}) {
    SCOPED_TRACE(cfg ? "true CFG" : "no CFG");
    const auto got = pipe.generate(request(cfg)).rgb;
    EXPECT_LE(test::worst_pixel_difference(got, want.at(cfg ? "cfg_image" : "image").data<float>()),
              1);
    EXPECT_NE(got, plain.generate(request(cfg)).rgb);  // (Q8_0 rounds the weights)
  }
  // Another model's file: one line before any weight is read.
  const std::string zimage = test::error_message([&] {
    pipeline::Pipeline(folder, DType::kF32)
        .set_transformer_file(std::string(XDIT_TEST_DATA) +
                              "/zimage_checkpoint/zimage_tiny_q8_0.gguf");
  });
  EXPECT_NE(zimage.find("a checkpoint of another model?"), std::string::npos) << zimage;
  EXPECT_EQ(zimage.find('\n'), std::string::npos) << zimage;
}

}  // namespace
}  // namespace xdit
