// WanPipeline (Wan2.1 text-to-video) against diffusers
// (tools/goldens/make_wan_pipeline.py): a tiny random pipeline run from the
// prompt — UMT5 over the cleaned prompt, zero-padded to max_sequence_length;
// the initial noise [1, 16, F', h, w] drawn from the seed; the UniPC loop with
// CFG (each half its own call in diffusers); the causal VAE into F frames —
// with 9 frames, 6 frames (rounded to 5 as diffusers rounds them) and one
// frame without CFG. Then the frame rules and the family's checks.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/json.h"
#include "models/wan.h"
#include "models/wan_vae.h"
#include "pipeline/denoiser.h"
#include "pipeline/memory_estimate.h"
#include "pipeline/pipeline.h"
#include "pipeline_goldens.h"
#include "test_util.h"

namespace xdit {
namespace {

using models::kText;

const std::string kModel = std::string(XDIT_MODELS) + "/wan21-tiny";

TEST(WanPipeline, PromptToVideoMatchesDiffusers) {
  pipeline::Pipeline pipe(kModel, DType::kF32);
  pipe.set_keep_text_encoder(true);
  EXPECT_EQ(pipe.family().name(), "Wan2.1");
  test::for_each_pipeline_case("wan", [&](const std::string& c, const io::Json& m,
                                          std::map<std::string, Tensor>& g) {
    pipeline::ImageRequest r = test::image_request(m);
    r.num_frames = m["num_frames"].get<int64_t>();
    const pipeline::Plan plan = pipe.plan(r);
    const Tensor& init = g[c + ".initial_latents"];
    EXPECT_EQ(plan->latent_frames, init.dim(2));
    EXPECT_EQ(plan->num_frames, g[c + ".video"].dim(2));
    // The noise drawn from the seed is torch's.
    const Tensor noise =
        pipeline::initial_noise(1, 16, plan->latent_frames, init.dim(3), init.dim(4), plan->seed);
    EXPECT_EQ(noise.to_vector(), init.to_vector());
    const pipeline::PromptEmbeddings e = pipe.encode_prompts(plan);
    EXPECT_FALSE(e.cond.has(models::kTextMask));  // the cross-attention takes no mask
    EXPECT_LE(test::rel_max_err(e.cond.at(kText).to_vector(), g[c + ".prompt_embeds"].to_vector()),
              1e-4);
    if (plan->cfg) {
      EXPECT_LE(test::rel_max_err(e.uncond.at(kText).to_vector(),
                                  g[c + ".negative_prompt_embeds"].to_vector()),
                1e-4);
    }
    const Tensor latents = pipe.generate_latents(plan.with_embeddings(e));
    ASSERT_EQ(latents.shape(), g[c + ".latents"].shape());
    EXPECT_LE(test::rel_max_err(latents.to_vector(), g[c + ".latents"].to_vector()), 1e-4);
    // The whole run from the prompt: every frame within 1/255 of diffusers'.
    const pipeline::ImageResult out = pipe.generate(plan);
    const Tensor& video = g[c + ".video"];
    test::expect_video_frames(out, video);
  });
}

pipeline::ImageRequest small(int64_t frames) {
  pipeline::ImageRequest r;
  r.prompts = {"a fox"};
  r.height = 32;
  r.width = 48;
  r.num_frames = frames;
  r.num_inference_steps = 2;
  r.max_sequence_length = 8;
  return r;
}

TEST(WanPipeline, FrameCountsAndDefaults) {
  pipeline::Pipeline pipe(kModel, DType::kF32);
  EXPECT_EQ(pipe.vae_factors().spatial, 8);
  EXPECT_EQ(pipe.vae_factors().temporal, 4);
  // diffusers' rounding: F // 4 · 4 + 1 when F − 1 is not a multiple of 4.
  for (const auto& [asked, frames] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {2, 1}, {3, 1}, {4, 5}, {5, 5}, {7, 5}, {8, 9}, {13, 13}, {16, 17}}) {
    const pipeline::Plan p = pipe.plan(small(asked));
    EXPECT_EQ(p->num_frames, frames) << asked;
    EXPECT_EQ(p->latent_frames, (frames - 1) / 4 + 1) << asked;
    EXPECT_EQ(pipe.token_rows(*p), p->latent_frames * 2) << asked;  // 32 px: 2 patch rows a frame
  }
  // The family's defaults: 480 x 832, 81 frames, 50 steps, guidance 5, 512 tokens.
  pipeline::ImageRequest d;
  d.prompts = {"a fox"};
  const pipeline::Plan p = pipe.plan(d, pipeline::Output::kLatents);
  EXPECT_EQ(p->height, 480);
  EXPECT_EQ(p->width, 832);
  EXPECT_EQ(p->num_frames, 81);
  EXPECT_EQ(p->latent_frames, 21);
  EXPECT_EQ(p->num_inference_steps, 50);
  EXPECT_EQ(p->guidance_scale, 5.0);
  EXPECT_EQ(p->max_sequence_length, 512);
  EXPECT_TRUE(p->cfg);
  // Given latents set the frames: 3 latent frames decode to 9.
  pipeline::ImageRequest g = small(0);
  g.latents = Tensor::from_vector(test::randn(16 * 3 * 4 * 6, 5), {1, 16, 3, 4, 6});
  EXPECT_EQ(pipe.plan(g)->num_frames, 9);
  g.num_frames = 5;
  EXPECT_NE(test::error_message([&] { pipe.plan(g); }).find("does not match the given latents' 3"),
            std::string::npos);
}

TEST(WanPipeline, BadRequestsAreOneLine) {
  pipeline::Pipeline pipe(kModel, DType::kF32);
  EXPECT_NE(
      test::error_message([&] { pipe.plan(small(-3)); }).find("num_frames must be at least 1"),
      std::string::npos);
  EXPECT_NE(test::error_message([&] { pipe.plan(small(int64_t{1} << 40)); }).find("at most"),
            std::string::npos);
  // Sizes off the 16 px grid are refused, as WanPipeline.check_inputs does.
  pipeline::ImageRequest odd = small(5);
  odd.height = 40;
  odd.width = 50;
  EXPECT_NE(test::error_message([&] { pipe.plan(odd); }).find("multiples of 16"),
            std::string::npos);
  // A service's --max_frames counts the frames as rounded.
  pipeline::RequestLimits limits;
  limits.max_frames = 5;
  pipe.set_request_limits(limits);
  EXPECT_EQ(pipe.plan(small(7))->num_frames, 5);
  EXPECT_NE(test::error_message([&] {
              pipe.plan(small(8));
            }).find("9 frames per image are over this server's limit of 5 (--max_frames)"),
            std::string::npos);
  pipe.set_request_limits({});
  // An absurd video is refused by the memory estimate before anything loads.
  pipeline::ImageRequest huge = small(4001);
  huge.height = 1280;
  huge.width = 1280;
  EXPECT_NE(test::error_message([&] { pipe.plan(huge); }).find("of memory"), std::string::npos);
}

// The estimate a 480p, 81-frame Wan2.1-1.3B request is checked against
// before anything loads counts every frame: 21 latent frames of 30 x 52
// tokens in the loop, 81 frames out of the VAE.
TEST(WanPipeline, MemoryEstimateCountsEveryFrame) {
  const models::WanConfig cfg = models::WanConfig::t2v_1_3b();
  models::WanVaeConfig vae;
  pipeline::MemoryQuery q;
  q.run_height = q.out_height = 480;
  q.run_width = q.out_width = 832;
  q.text_tokens = 512;
  q.wan_vae = &vae;
  const pipeline::MemoryEstimate one =
      pipeline::estimate_memory(cfg.spec(), cfg.parameter_count(), q);
  q.frames = 81;
  q.latent_frames = 21;
  const pipeline::MemoryEstimate clip =
      pipeline::estimate_memory(cfg.spec(), cfg.parameter_count(), q);
  EXPECT_NEAR(clip.transformer, 2.0 * static_cast<double>(cfg.parameter_count()), 1.0);  // bf16
  // 2 x 32760 tokens x 1536 wide, about 12 widths a token in f32: over 4 GB.
  EXPECT_GT(clip.denoise, 4e9);
  EXPECT_GT(clip.denoise, 15 * one.denoise);
  EXPECT_GT(clip.output, 80 * one.output);
  // The decoder streams one latent frame at a time: its working set does
  // not grow with the clip (the frames it writes are `output`).
  EXPECT_EQ(clip.decode, one.decode);
  EXPECT_LT(clip.peak(), 64e9);
}

TEST(WanPipeline, ImageModelsRefuseFrames) {
  pipeline::Pipeline pipe(std::string(XDIT_MODELS) + "/pixart-alpha-tiny", DType::kF32);
  pipeline::ImageRequest r = small(5);
  EXPECT_NE(test::error_message([&] { pipe.plan(r); }).find("makes images: num_frames must be 1"),
            std::string::npos);
  r.num_frames = 1;
  EXPECT_EQ(pipe.plan(r)->latent_frames, 1);
}

}  // namespace
}  // namespace xdit
