// From prompt to image against diffusers' own pipelines on the tiny PixArt-α
// and PixArt-Σ folders (tools/goldens/make_pixart.py): tokenizer, T5, seeded
// noise, CFG loop, VAE, resolution binning; equal within 1/255 per pixel.
#include <gtest/gtest.h>

#include <cmath>

#include "io/json.h"
#include "io/safetensors.h"
#include "pipeline/pipeline.h"
#include "pipeline/resolution.h"
#include "test_util.h"

namespace xdit {
namespace {

// `one_shot`: as xdit generate runs it (the transformer freed before the
// VAE decodes); a second image from that pipeline is then refused.
void check_against_diffusers(const std::string& variant, bool one_shot = false) {
  const std::string golden =
      std::string(XDIT_TEST_DATA) + "/goldens/pipeline_" + variant + ".safetensors";
  io::SafeTensorsFile f(golden);
  const auto req = io::parse_json_text(f.metadata().at("request"), "request");
  pipeline::Pipeline pipe(std::string(XDIT_MODELS) + "/pixart-" + variant + "-tiny", DType::kF32);
  pipe.set_one_shot(one_shot);
  pipeline::ImageRequest r;
  r.prompts = req["prompts"].get<std::vector<std::string>>();
  r.negative_prompt = req["negative"].get<std::string>();
  r.height = req["height"].get<int64_t>();
  r.width = req["width"].get<int64_t>();
  r.num_inference_steps = req["steps"].get<int64_t>();
  r.guidance_scale = req["guidance"].get<double>();
  r.seed = req["seed"].get<uint64_t>();
  r.resolution_binning = req["binning"].get<bool>();
  pipeline::ImageResult out = pipe.generate(r);
  Tensor want = f.get("image").to(DType::kF32);  // [B, H, W, 3] in [0, 1]
  ASSERT_EQ(out.rgb.size(), static_cast<size_t>(want.dim(0)));
  ASSERT_EQ(out.height, want.dim(1));
  ASSERT_EQ(out.width, want.dim(2));
  EXPECT_LE(test::worst_pixel_difference(out.rgb, want.data<float>()), 1)
      << "largest per-pixel difference (of 255)";
  if (one_shot) {
    const std::string again = test::error_message([&] { pipe.generate(r); });
    EXPECT_NE(again.find("this one-shot pipeline released its transformer after its image"),
              std::string::npos)
        << again;
  }
}

TEST(PipelineParity, AlphaPromptToImage) {
  check_against_diffusers("alpha");
}
TEST(PipelineParity, OneShotPromptToImage) {
  check_against_diffusers("alpha", true);
}
TEST(PipelineParity, SigmaBatchWithResolutionBinning) {
  check_against_diffusers("sigma");
}

TEST(Resolution, BinsLikeDiffusers) {
  // 256-px table: 40x72 (ratio 0.556) → the 0.57 bin (192x336).
  EXPECT_EQ(pipeline::classify_height_width_bin(40, 72, 256),
            (std::pair<int64_t, int64_t>{192, 336}));
  EXPECT_EQ(pipeline::classify_height_width_bin(1024, 1024, 1024),
            (std::pair<int64_t, int64_t>{1024, 1024}));
  EXPECT_EQ(pipeline::classify_height_width_bin(720, 1280, 1024),
            (std::pair<int64_t, int64_t>{768, 1344}));
  EXPECT_THROW(pipeline::bin_table_for_sample_size(48), Error);
}

TEST(Resolution, ResizeAndCropKeepsAConstantImageConstant) {
  Tensor img = Tensor::from_vector(std::vector<float>(2 * 3 * 10 * 14, 0.25f), {2, 3, 10, 14});
  Tensor out = pipeline::resize_and_crop(img, 7, 13);
  EXPECT_EQ(out.shape(), (Shape{2, 3, 7, 13}));
  for (float v : out.to_vector()) ASSERT_FLOAT_EQ(v, 0.25f);
}

}  // namespace
}  // namespace xdit
