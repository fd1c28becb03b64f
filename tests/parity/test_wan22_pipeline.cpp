// Wan2.2's two experts (WanPipeline with transformer_2 and boundary_ratio)
// against diffusers (tools/goldens/make_wan22_pipeline.py): a tiny random
// pipeline whose `transformer` runs the steps with t >= 875 and
// `transformer_2` the rest — a switch mid-run with its own guidance_scale_2,
// guidance_scale_2 left to its default, a run without CFG, and a one-step run
// that never needs the second expert. Then when each expert loads (and is
// freed under one-shot), step caches over the switch, and the folder checks.
// And TI2V-5B's text-to-video (make_wan22_ti2v_pipeline.py): the residual
// 48-channel VAE at 16x, sizes floored to 32, a timestep per token.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/json.h"
#include "pipeline/denoiser.h"
#include "pipeline/pipeline.h"
#include "pipeline_goldens.h"
#include "test_util.h"

namespace xdit {
namespace {

const std::string kModel = std::string(XDIT_MODELS) + "/wan22-tiny";

pipeline::ImageRequest golden_request(const io::Json& m) {
  pipeline::ImageRequest r = test::image_request(m);
  r.num_frames = m["num_frames"].get<int64_t>();
  if (!m["guidance_scale_2"].is_null()) r.guidance_scale_2 = m["guidance_scale_2"].get<double>();
  return r;
}

// Records, before each step, the transformer it runs on and how many experts are loaded.
struct ExpertLog : pipeline::StepHook {
  pipeline::Pipeline* pipe = nullptr;
  std::vector<const models::DiT*> models;
  std::vector<int> resident;
  void before_step(const pipeline::StepInfo& /*s*/) override {
    models.push_back(pipe->transformer());
    resident.push_back(pipe->resident_experts());
  }
};

TEST(Wan22Pipeline, TwoExpertsMatchDiffusers) {
  pipeline::Pipeline pipe(kModel, DType::kF32);
  pipe.set_keep_text_encoder(true);
  EXPECT_EQ(pipe.family().name(), "Wan2.2");
  EXPECT_EQ(pipe.family().boundary_ratio(), 0.875);
  test::for_each_pipeline_case(
      "wan22", [&](const std::string& c, const io::Json& m, std::map<std::string, Tensor>& g) {
        const pipeline::ImageRequest r = golden_request(m);
        const pipeline::Plan plan = pipe.plan(r);
        // guidance_scale_2 defaults to guidance_scale, as in diffusers.
        EXPECT_EQ(plan->guidance_scale_2, m["guidance_scale_2"].is_null()
                                              ? m["guidance_scale"].get<double>()
                                              : m["guidance_scale_2"].get<double>());
        // The scheduler's integer timesteps decide the switch: diffusers' own.
        auto sched = pipe.scheduler_config().make();
        sched->set_timesteps(plan->num_inference_steps, {});
        EXPECT_EQ(sched->timesteps(), g[c + ".timesteps"].to_vector());
        ExpertLog log;
        log.pipe = &pipe;
        const Tensor latents = pipe.generate_latents(plan, {}, {&log});
        ASSERT_EQ(latents.shape(), g[c + ".latents"].shape());
        EXPECT_LE(test::rel_max_err(latents.to_vector(), g[c + ".latents"].to_vector()), 1e-4);
        // One transformer for the steps with t >= 875, the other after.
        const std::vector<float> ts = sched->timesteps();
        for (size_t i = 0; i < ts.size(); ++i)
          EXPECT_EQ(log.models[i] == log.models[0], ts[i] >= 875.0f) << "step " << i;
        const pipeline::ImageResult out = pipe.generate(plan);
        const Tensor& video = g[c + ".video"];
        test::expect_video_frames(out, video);
      });
}

pipeline::ImageRequest small(int64_t steps) {
  pipeline::ImageRequest r;
  r.prompts = {"a fox"};
  r.height = 32;
  r.width = 48;
  r.num_frames = 5;
  r.num_inference_steps = steps;
  r.max_sequence_length = 8;
  r.guidance_scale = 3.0;
  r.guidance_scale_2 = 2.0;
  return r;
}

// Each expert loads when a step first needs it: a one-step run never loads
// transformer_2; a resident pipeline keeps both after the switch (and the
// next run swaps back, loading nothing); one-shot frees the first expert
// before the second loads, and both after the run.
TEST(Wan22Pipeline, ExpertsLoadWhenFirstNeeded) {
  {
    pipeline::Pipeline pipe(kModel, DType::kF32);
    const Tensor one = pipe.generate_latents(pipe.plan(small(1), pipeline::Output::kLatents));
    EXPECT_EQ(pipe.resident_experts(), 1);
    ExpertLog log;
    log.pipe = &pipe;
    const pipeline::Plan p4 = pipe.plan(small(4), pipeline::Output::kLatents);
    const Tensor first = pipe.generate_latents(p4, {}, {&log});
    EXPECT_EQ(log.resident, (std::vector<int>{1, 1, 2, 2}));  // 999, 900 | 750, 500
    ExpertLog again;
    again.pipe = &pipe;
    const Tensor second = pipe.generate_latents(p4, {}, {&again});
    EXPECT_EQ(again.resident, (std::vector<int>{2, 2, 2, 2}));
    EXPECT_EQ(again.models, log.models);  // the same two models, swapped back
    EXPECT_EQ(second.to_vector(), first.to_vector());
  }
  pipeline::Pipeline serial(kModel, DType::kF32);
  const Tensor want = serial.generate_latents(serial.plan(small(4), pipeline::Output::kLatents));
  pipeline::Pipeline once(kModel, DType::kF32);
  once.set_one_shot(true);
  ExpertLog log;
  log.pipe = &once;
  const Tensor got =
      once.generate_latents(once.plan(small(4), pipeline::Output::kLatents), {}, {&log});
  EXPECT_EQ(log.resident, (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(got.to_vector(), want.to_vector());
  // A resident pipeline (xdit serve) may load both before any request.
  pipeline::Pipeline served(kModel, DType::kF32);
  served.load_experts();
  EXPECT_EQ(served.resident_experts(), 2);
  ExpertLog both;
  both.pipe = &served;
  EXPECT_EQ(served.generate_latents(served.plan(small(4), pipeline::Output::kLatents), {}, {&both})
                .to_vector(),
            want.to_vector());
  EXPECT_EQ(both.resident, (std::vector<int>{2, 2, 2, 2}));
}

// A step cache runs on each expert apart (a fresh one at the switch: the
// first expert's residuals say nothing of the second) and reports the run
// as one; progress counts the steps of both.
TEST(Wan22Pipeline, StepCacheAndProgressSpanTheSwitch) {
  pipeline::Pipeline pipe(kModel, DType::kF32);
  pipeline::ImageRequest r = small(6);  // 999, 937 | 857, 750, 600, 376
  r.cache.kind = pipeline::CacheKind::kFirstBlock;
  r.cache.threshold = 10.0;  // skips whatever it may
  std::vector<int64_t> steps;
  const Tensor cached = pipe.generate_latents(pipe.plan(r, pipeline::Output::kLatents),
                                              [&](const pipeline::StepEvent& e) {
                                                steps.push_back(e.step);
                                                EXPECT_EQ(e.total, 6);
                                              });
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  const pipeline::CacheStats& s = pipe.cache_report().stats;
  EXPECT_EQ(s.steps, 6);
  // The first step of each expert has no reference and runs in full; with
  // so loose a threshold every other step may skip.
  ASSERT_EQ(s.full.size(), 2u);  // CFG halves decide apart (cache contexts cond, uncond)
  for (const auto& ctx : s.full) {
    ASSERT_EQ(ctx.size(), 6u);
    EXPECT_TRUE(ctx[0]);
    EXPECT_TRUE(ctx[2]);
  }
  EXPECT_LT(s.full_steps, 6);
  EXPECT_TRUE(std::isfinite(cached.to_vector()[0]));
}

// A folder copied from wan22-tiny whose model_index.json `edit` changes.
std::string edited_folder(const std::function<void(io::Json&)>& edit, const std::string& tag) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("xdit_wan22_" + tag + "_" + std::to_string(::getpid())))
                              .string();
  std::filesystem::remove_all(dir);
  std::filesystem::copy(kModel, dir, std::filesystem::copy_options::recursive);
  io::Json index = io::read_json_file(dir + "/model_index.json");
  edit(index);
  std::ofstream(dir + "/model_index.json") << index.dump();
  return dir;
}

TEST(Wan22Pipeline, BadFoldersAndRequestsAreOneLine) {
  // boundary_ratio without a second expert.
  std::string dir = edited_folder(
      [](io::Json& j) {
        j["transformer_2"] = io::Json::array({nullptr, nullptr});
      },
      "noexpert");
  EXPECT_NE(test::error_message([&] { pipeline::Pipeline p(dir, DType::kF32); })
                .find("boundary_ratio 0.875 switches to a second expert, but the folder names no "
                      "transformer_2"),
            std::string::npos);
  std::filesystem::remove_all(dir);
  dir = edited_folder([](io::Json& j) { j["boundary_ratio"] = 1.5; }, "ratio");
  EXPECT_NE(test::error_message([&] {
              pipeline::Pipeline p(dir, DType::kF32);
            }).find("boundary_ratio must be a number in (0, 1]"),
            std::string::npos);
  // Experts of two architectures.
  std::filesystem::remove_all(dir);
  dir = edited_folder([](io::Json&) {}, "config");
  io::Json cfg = io::read_json_file(dir + "/transformer_2/config.json");
  cfg["ffn_dim"] = 48;
  std::ofstream(dir + "/transformer_2/config.json") << cfg.dump();
  EXPECT_NE(test::error_message([&] {
              pipeline::Pipeline p(dir, DType::kF32);
            }).find("transformer_2/config.json differs from transformer/config.json"),
            std::string::npos);
  std::filesystem::remove_all(dir);
  // transformer_2 without boundary_ratio: unused, as in diffusers (one expert).
  dir = edited_folder([](io::Json& j) { j["boundary_ratio"] = nullptr; }, "unused");
  {
    pipeline::Pipeline p(dir, DType::kF32);
    EXPECT_EQ(p.family().name(), "Wan2.1");
    EXPECT_EQ(p.family().boundary_ratio(), 0.0);
  }
  std::filesystem::remove_all(dir);
  // guidance_scale_2: the second expert's; negative or NaN refused.
  pipeline::Pipeline pipe(kModel, DType::kF32);
  pipeline::ImageRequest bad = small(2);
  bad.guidance_scale_2 = -1.5;
  EXPECT_NE(test::error_message([&] {
              pipe.plan(bad);
            }).find("guidance_scale_2 must be a finite number >= 0"),
            std::string::npos);
  pipeline::Pipeline one(std::string(XDIT_MODELS) + "/wan21-tiny", DType::kF32);
  EXPECT_NE(test::error_message([&] {
              one.plan(small(2));
            }).find("guidance_scale_2 is the second expert's guidance"),
            std::string::npos);
  pipeline::ImageRequest plain = small(2);
  plain.guidance_scale_2 = pipeline::kDefaultGuidance;
  EXPECT_EQ(one.plan(plain)->guidance_scale_2, -1.0);
  // An explicit 0 is a scale like any other for the second expert.
  pipeline::ImageRequest zero = small(2);
  zero.guidance_scale_2 = 0.0;
  EXPECT_EQ(pipe.plan(zero)->guidance_scale_2, 0.0);
}

TEST(Wan22Pipeline, Ti2vMatchesDiffusers) {
  pipeline::Pipeline pipe(std::string(XDIT_MODELS) + "/wan22-ti2v-tiny", DType::kF32);
  pipe.set_keep_text_encoder(true);
  EXPECT_EQ(pipe.family().name(), "Wan2.2 TI2V");
  EXPECT_EQ(pipe.family().default_fps(), 24);
  EXPECT_EQ(pipe.vae_factors().spatial, 16);
  EXPECT_EQ(pipe.vae_factors().temporal, 4);
  EXPECT_EQ(pipe.spec().latent_channels, 48);
  test::for_each_pipeline_case(
      "wan22_ti2v", [&](const std::string& c, const io::Json& m, std::map<std::string, Tensor>& g) {
        pipeline::ImageRequest r = test::image_request(m);
        r.num_frames = m["num_frames"].get<int64_t>();
        const pipeline::Plan plan = pipe.plan(r);
        const Tensor& video = g[c + ".video"];
        // A height off the 32 px grid (16 x the patch) floors, as diffusers does.
        EXPECT_EQ(plan->run_height, video.dim(3));
        EXPECT_EQ(plan->run_width, video.dim(4));
        const Tensor& init = g[c + ".initial_latents"];
        EXPECT_EQ(pipeline::initial_noise(1, 48, plan->latent_frames, init.dim(3), init.dim(4),
                                          plan->seed)
                      .to_vector(),
                  init.to_vector());
        const Tensor latents = pipe.generate_latents(plan);
        ASSERT_EQ(latents.shape(), g[c + ".latents"].shape());
        EXPECT_LE(test::rel_max_err(latents.to_vector(), g[c + ".latents"].to_vector()), 1e-4);
        const pipeline::ImageResult out = pipe.generate(plan);
        test::expect_video_frames(out, video);
      });
  // Sizes must still be multiples of 16 (WanPipeline.check_inputs).
  pipeline::ImageRequest odd = small(1);
  odd.guidance_scale_2 = pipeline::kDefaultGuidance;
  odd.height = 40;
  EXPECT_NE(test::error_message([&] { pipe.plan(odd); }).find("must be multiples of 16"),
            std::string::npos);
}

}  // namespace
}  // namespace xdit
