// QwenImagePipeline against diffusers (tools/goldens/make_qwen_image_pipeline.py):
// a tiny random pipeline (Qwen2.5-VL encoder, the Qwen-Image transformer,
// AutoencoderKLQwenImage on one frame, dynamic-shift Flow-Match with
// shift_terminal) from the prompt to the latents (within 1e-4) and the image
// (within 1/255): no negative prompt (no CFG), true CFG at 2.5 with the
// per-token norm rescale, and the default true_cfg_scale 4 with a floored
// height. Then the family's defaults.
#include <gtest/gtest.h>

#include "core/error.h"
#include "pipeline/pipeline.h"
#include "pipeline_goldens.h"
#include "test_util.h"

namespace xdit {
namespace {

const std::string kModel = std::string(XDIT_MODELS) + "/qwen-image-tiny";

TEST(QwenImagePipeline, PromptToImageMatchesDiffusers) {
  pipeline::Pipeline pipe(kModel, DType::kF32);
  pipe.set_keep_text_encoder(true);
  EXPECT_EQ(pipe.family().name(), "Qwen-Image");
  test::for_each_pipeline_case(
      "qwen_image", [&](const std::string& c, const io::Json& m, std::map<std::string, Tensor>& g) {
        pipeline::ImageRequest r = test::image_request(m);
        r.guidance_scale = pipeline::kDefaultGuidance;  // (no guidance embedding)
        if (!m["true_cfg_scale"].is_null()) r.true_cfg_scale = m["true_cfg_scale"].get<double>();
        const pipeline::Plan plan = pipe.plan(r);
        EXPECT_EQ(plan->cfg, r.negative_prompt.has_value());
        const Tensor latents = pipe.generate_latents(plan);
        const Tensor& want = g[c + ".latents"];  // [1, 16, h, w]
        ASSERT_EQ(latents.numel(), want.numel());
        EXPECT_LE(test::rel_max_err(latents.to_vector(), want.to_vector()), 1e-4);
        const pipeline::ImageResult out = pipe.generate(plan);
        const Tensor& image = g[c + ".image"];  // [1, 3, H, W] in [-1, 1]
        ASSERT_EQ(out.rgb.size(), 1u);
        ASSERT_EQ(out.height, image.dim(2));
        ASSERT_EQ(out.width, image.dim(3));
        EXPECT_LE(test::worst_pixel_difference(out.rgb[0], image.data<float>(), image.dim(2),
                                               image.dim(3)),
                  1)
            << "largest per-pixel difference (of 255)";
      });
}

TEST(QwenImagePipeline, Defaults) {
  pipeline::Pipeline pipe(kModel, DType::kF32);
  pipeline::ImageRequest r;
  r.prompts = {"a fox"};
  pipeline::Plan plan = pipe.plan(r);
  EXPECT_EQ(plan->num_inference_steps, 50);
  EXPECT_EQ(plan->true_cfg_scale, 4.0);
  EXPECT_FALSE(plan->cfg);  // no negative prompt
  EXPECT_EQ(plan->run_height, 128 * pipe.vae_scale_factor());
  r.negative_prompt = "blurry";
  plan = pipe.plan(r);
  EXPECT_TRUE(plan->cfg);  // the default 4 with a negative prompt
  r.true_cfg_scale = 1.0;
  EXPECT_FALSE(pipe.plan(r)->cfg);
}

}  // namespace
}  // namespace xdit
