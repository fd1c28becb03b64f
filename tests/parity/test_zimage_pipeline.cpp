// ZImagePipeline against diffusers (tools/goldens/make_zimage_pipeline.py): a
// tiny random pipeline (Qwen3 encoder, the Z-Image transformer, the
// 16-channel VAE, Flow-Match at shift 3) from the prompt to the latents
// (within 1e-4) and the image (within 1/255): without CFG (guidance 0, as
// Z-Image-Turbo runs), with CFG and a negative prompt shorter than the
// prompt, and with two prompts of different lengths and the default
// negative prompt "" (four captions of four lengths in one call), and with
// ZImagePipeline's cfg_truncation and cfg_normalization. Then the family's
// defaults and its checks.
#include <gtest/gtest.h>

#include "core/error.h"
#include "pipeline/pipeline.h"
#include "pipeline_goldens.h"
#include "test_util.h"

namespace xdit {
namespace {

const std::string kModel = std::string(XDIT_MODELS) + "/zimage-tiny";

pipeline::ImageRequest golden_request(const io::Json& m) {
  io::Json one = m;
  if (m["prompt"].is_array()) one["prompt"] = m["prompt"][0];
  pipeline::ImageRequest r = test::image_request(one);
  if (m["prompt"].is_array()) r.prompts = m["prompt"].get<std::vector<std::string>>();
  if (m.contains("cfg_truncation")) r.cfg_truncation = m["cfg_truncation"].get<double>();
  if (m.contains("cfg_normalization")) r.cfg_normalization = m["cfg_normalization"].get<double>();
  return r;
}

TEST(ZImagePipeline, PromptToImageMatchesDiffusers) {
  pipeline::Pipeline pipe(kModel, DType::kF32);
  pipe.set_keep_text_encoder(true);
  EXPECT_EQ(pipe.family().name(), "Z-Image");
  test::for_each_pipeline_case(
      "zimage", [&](const std::string& c, const io::Json& m, std::map<std::string, Tensor>& g) {
        const pipeline::ImageRequest r = golden_request(m);
        const pipeline::Plan plan = pipe.plan(r);
        EXPECT_EQ(plan->cfg, r.guidance_scale > 0);
        const Tensor latents = pipe.generate_latents(plan);
        const Tensor& want = g[c + ".latents"];  // [B, 16, h, w]
        ASSERT_EQ(latents.numel(), want.numel());
        EXPECT_LE(test::rel_max_err(latents.to_vector(), want.to_vector()), 1e-4);
        const pipeline::ImageResult out = pipe.generate(plan);
        const Tensor& image = g[c + ".image"];  // [B, 3, H, W] in [-1, 1]
        ASSERT_EQ(out.rgb.size(), static_cast<size_t>(image.dim(0)));
        ASSERT_EQ(out.height, image.dim(2));
        ASSERT_EQ(out.width, image.dim(3));
        const int64_t plane = 3 * image.dim(2) * image.dim(3);
        for (int64_t b = 0; b < image.dim(0); ++b)
          EXPECT_LE(test::worst_pixel_difference(out.rgb[static_cast<size_t>(b)],
                                                 image.data<float>() + b * plane, image.dim(2),
                                                 image.dim(3)),
                    1)
              << "image " << b << ": largest per-pixel difference (of 255)";
      });
}

TEST(ZImagePipeline, CfgLimitsAreZImagesAndBounded) {
  pipeline::ImageRequest r;
  r.prompts = {"a fox"};
  r.height = r.width = 256;  // within the tiny model's RoPE table
  r.cfg_normalization = -1;
  pipeline::Pipeline z(kModel, DType::kF32);
  EXPECT_NE(test::error_message([&] { z.plan(r); }).find("cfg_normalization must be"),
            std::string::npos);
  r.cfg_normalization = 0;
  r.cfg_truncation = 0.5;
  EXPECT_EQ(test::error_message([&] { z.plan(r); }), "(no error)");
  pipeline::Pipeline flux(std::string(XDIT_MODELS) + "/flux-schnell-tiny", DType::kF32);
  EXPECT_NE(test::error_message([&] { flux.plan(r); }).find("are Z-Image's"), std::string::npos);
}

TEST(ZImagePipeline, TurboDefaultsAndSizeRule) {
  pipeline::Pipeline pipe(kModel, DType::kF32);
  pipeline::ImageRequest r;
  r.prompts = {"a fox"};
  // The default size, 1024 px, is beyond this tiny model's RoPE table
  // (axes_lens: 64 x 64 patches of 8 px): the planner refuses it, naming it.
  EXPECT_NE(test::error_message([&] {
              pipe.plan(r);
            }).find("positional table covers 64 x 64 patches; 1024x1024 px"),
            std::string::npos);
  r.height = r.width = 512;
  const pipeline::Plan plan = pipe.plan(r);
  EXPECT_EQ(plan->num_inference_steps, 9);
  EXPECT_EQ(plan->guidance_scale, 0.0);
  EXPECT_FALSE(plan->cfg);
  EXPECT_EQ(plan->run_height, 512);
  EXPECT_EQ(plan->run_width, 512);
  // Sizes must be multiples of the VAE factor x 2 (this VAE: 4 x 2).
  r.height = 60;
  r.width = 48;
  EXPECT_NE(test::error_message([&] { pipe.plan(r); }).find("multiples of 8"), std::string::npos);
}

}  // namespace
}  // namespace xdit
