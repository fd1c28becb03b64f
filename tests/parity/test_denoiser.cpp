// The loop's seams (pipeline/denoiser.h, parallel/runtime.h): step hooks see
// every step once, in order, at the scheduler's timesteps; a noise hook's
// change reaches the scheduler's step; the method table picks one method per
// layout in xDiT's precedence.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/rng.h"
#include "parallel/runtime.h"
#include "pipeline/pipeline.h"
#include "test_util.h"

namespace xdit::pipeline {
namespace {

// Random embeddings for one prompt of a tiny model, no CFG, 3 steps.
LatentRequest request(const Pipeline& p) {
  LatentRequest r;
  TorchGenerator gen(11);
  r.cond.set(models::kText, gen.randn({1, 6, p.family().text_width()}));
  if (p.family().pooled_width() > 0)
    r.cond.set(models::kPooled, gen.randn({1, p.family().pooled_width()}));
  r.height = 80;
  r.width = 48;
  r.num_inference_steps = 3;
  r.guidance_scale = 1.0;
  r.seed = 5;
  return r;
}

struct Recorder : StepHook {
  std::vector<std::string> log;
  std::vector<float> timesteps;
  void begin_loop(Denoiser& d) override {
    log.push_back("begin");
    timesteps = d.timesteps();
  }
  void before_step(const StepInfo& s) override {
    log.push_back("before " + std::to_string(s.step) + "/" + std::to_string(s.total));
    EXPECT_EQ(s.timestep, timesteps.at(static_cast<size_t>(s.step)));
  }
  void on_noise(const StepInfo& s, Tensor& noise, const Tensor& out, Denoiser&) override {
    log.push_back("noise " + std::to_string(s.step));
    EXPECT_EQ(noise.dim(0), out.dim(0));  // no CFG: one half
  }
  void after_step(const StepInfo& s, double seconds) override {
    log.push_back("after " + std::to_string(s.step));
    EXPECT_GE(seconds, 0.0);
  }
};

TEST(Denoiser, StepHooksSeeEveryStepInOrder) {
  Pipeline p(std::string(XDIT_MODELS) + "/pixart-sigma-tiny", DType::kF32);
  Recorder r;
  std::vector<int64_t> progress;
  p.generate_latents(request(p), [&](const StepEvent& e) { progress.push_back(e.step); }, {&r});
  const std::vector<std::string> want = {"begin",      "before 0/3", "noise 0", "after 0",
                                         "before 1/3", "noise 1",    "after 1", "before 2/3",
                                         "noise 2",    "after 2"};
  EXPECT_EQ(r.log, want);
  EXPECT_EQ(progress, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(r.timesteps.size(), 3u);
}

// Flow-Match Euler moves the latents by (σ' − σ) · v: with the velocity
// zeroed by a hook, the final latents are the initial noise.
struct ZeroNoise : StepHook {
  void on_noise(const StepInfo&, Tensor& noise, const Tensor&, Denoiser&) override {
    std::fill(noise.data<float>(), noise.data<float>() + noise.numel(), 0.0f);
  }
};

TEST(Denoiser, NoiseHookReachesTheSchedulerStep) {
  Pipeline p(std::string(XDIT_MODELS) + "/flux-schnell-tiny", DType::kF32);
  const LatentRequest r = request(p);
  const int64_t f = p.vae_scale_factor();
  const Tensor noise = initial_noise(1, p.spec().latent_channels, 1, 80 / f, 48 / f, r.seed);
  const Tensor plain = p.generate_latents(r);
  EXPECT_GT(test::rel_max_err(plain.to_vector(), noise.to_vector()), 1e-3);
  ZeroNoise zero;
  EXPECT_EQ(p.generate_latents(r, {}, {&zero}).to_vector(), noise.to_vector());
}

TEST(ParallelRuntime, OneMethodPerLayoutInPrecedence) {
  const auto name = [](parallel::ParallelConfig pc) -> std::string {
    const parallel::ParallelMethod* m = parallel::select_method(pc);
    return m != nullptr ? m->name : "serial";
  };
  parallel::ParallelConfig pc;
  EXPECT_EQ(name(pc), "serial");
  pc.use_cfg_parallel = true;
  pc.tensor_parallel_degree = 2;
  pc.data_parallel_degree = 3;
  EXPECT_EQ(name(pc), "serial");  // none of these splits the rows
  pc.ulysses_degree = 2;
  EXPECT_EQ(name(pc), "USP");
  pc.ulysses_degree = 1;
  pc.ring_degree = 3;
  EXPECT_EQ(name(pc), "USP");
  pc.pipefusion_parallel_degree = 2;
  EXPECT_EQ(name(pc), "PipeFusion");  // PipeFusion × Ring: PipeFusion's backend holds the ring
  pc = {};
  pc.patch_parallel_degree = 2;
  EXPECT_EQ(name(pc), "patch");
  EXPECT_EQ(parallel::methods().size(), 3u);
}

}  // namespace
}  // namespace xdit::pipeline
