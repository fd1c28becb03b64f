// The PixArt transformer and the whole denoising loop under mpirun, for each
// parallel layout the world size allows (CFG, Ulysses, Ring, USP, their
// combinations with CFG, data parallel), against the serial run of the same
// request in the same process (f32, ≤ 1e-4 relative). The serial run itself is
// checked against diffusers in tests/parity.
#include <gtest/gtest.h>

#include <cstring>

#include "core/rng.h"
#include "dist/world.h"
#include "io/model_folder.h"
#include "models/pixart.h"
#include "parallel/config.h"
#include "parallel/usp_attention.h"
#include "pipeline/distributed.h"
#include "test_util.h"

namespace xdit {
namespace {

using parallel::ParallelConfig;
using test::world;

const std::string kSigma =
    std::string(XDIT_MODELS) + "/pixart-sigma-tiny";  // 2 heads, no micro-conditions
const std::string kAlpha =
    std::string(XDIT_MODELS) + "/pixart-alpha-tiny";  // 3 heads, micro-conditions

ParallelConfig layout(int dp, bool cfg, int u, int r) {
  ParallelConfig c;
  c.data_parallel_degree = dp;
  c.use_cfg_parallel = cfg;
  c.ulysses_degree = u;
  c.ring_degree = r;
  return c;
}

// Two prompts of 9 tokens (padded differently), a 128x96 px image (8x6 patch rows x cols).
pipeline::LatentRequest request(int64_t caption) {
  pipeline::LatentRequest r;
  TorchGenerator g(3);
  r.prompt_embeds = g.randn({2, 9, caption});
  r.negative_embeds = g.randn({2, 9, caption});
  r.prompt_mask =
      Tensor::from_vector({1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0}, {2, 9});
  r.negative_mask =
      Tensor::from_vector({1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0}, {2, 9});
  r.height = 128;
  r.width = 96;
  r.num_inference_steps = 3;
  r.guidance_scale = 3.5;
  r.seed = 11;
  return r;
}

void check_loop(const std::string& model, const ParallelConfig& pc) {
  if (pc.world() != world().size()) return;
  SCOPED_TRACE(pc.describe() + " on " + model);
  pipeline::Pipeline serial(model, DType::kF32);
  const auto req = request(serial.text_width());
  Tensor want = serial.generate_latents(req);
  parallel::Mesh mesh(pc, world());
  pipeline::Pipeline par(model, DType::kF32);
  par.set_mesh(&mesh);
  Tensor got = pipeline::generate_latents_distributed(par, mesh, req);
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_LE(test::rel_max_err(got.to_vector(), want.to_vector()), 1e-4)
      << "rank " << world().rank();
}

TEST(ParallelLoop, CfgParallel) {
  check_loop(kSigma, layout(1, true, 1, 1));
}
TEST(ParallelLoop, Ulysses2) {
  check_loop(kSigma, layout(1, false, 2, 1));
}
TEST(ParallelLoop, Ring2) {
  check_loop(kSigma, layout(1, false, 1, 2));
}
TEST(ParallelLoop, Ring2WithMicroConditions) {
  check_loop(kAlpha, layout(1, false, 1, 2));
}
TEST(ParallelLoop, DataParallel2) {
  check_loop(kSigma, layout(2, false, 1, 1));
}
TEST(ParallelLoop, UlyssesTimesRing) {
  check_loop(kSigma, layout(1, false, 2, 2));
}
TEST(ParallelLoop, Ring4) {
  check_loop(kAlpha, layout(1, false, 1, 4));
}
TEST(ParallelLoop, CfgTimesUlysses) {
  check_loop(kSigma, layout(1, true, 2, 1));
}
TEST(ParallelLoop, CfgTimesRing) {
  check_loop(kSigma, layout(1, true, 1, 2));
}
TEST(ParallelLoop, DataTimesCfg) {
  check_loop(kSigma, layout(2, true, 1, 1));
}

TEST(ParallelForward, SequenceSlicesEqualTheWholeForward) {
  const int n = world().size();
  for (int u : {1, 2}) {
    if (n % u != 0) continue;
    ParallelConfig pc = layout(1, false, u, n / u);
    parallel::Mesh mesh(pc, world());
    io::ModelFolder f(kSigma);
    auto cfg =
        models::PixArtConfig::from_json(f.component_config("transformer", "config.json"), "sigma");
    io::WeightStore w(f.component("transformer"));
    models::PixArtTransformer serial(cfg, w, DType::kF32), sliced(cfg, w, DType::kF32);
    parallel::UspAttention usp(mesh.ulysses_group(), mesh.ring_group());
    sliced.set_attention_backend(&usp);
    TorchGenerator g(5);
    Tensor x = g.randn({2, 4, 16, 12}), text = g.randn({2, 7, cfg.caption_channels});
    models::DiTInputs in;
    in.latents = &x;
    in.timesteps = {999.0f, 3.0f};
    in.text = &text;
    Tensor whole = serial.forward(in);
    const int64_t rows = 8 / n;  // 8 patch rows
    in.patch_row_begin = mesh.coord().sp * rows;
    in.patch_row_end = in.patch_row_begin + rows;
    Tensor part = sliced.forward(in);
    ASSERT_EQ(part.shape(), (Shape{2, 8, rows * 2, 12}));
    std::vector<float> want;
    for (int64_t bc = 0; bc < 2 * 8; ++bc)
      for (int64_t y = in.patch_row_begin * 2; y < in.patch_row_end * 2; ++y)
        for (int64_t xx = 0; xx < 12; ++xx)
          want.push_back(whole.data<float>()[(bc * 16 + y) * 12 + xx]);
    EXPECT_LE(test::rel_max_err(part.to_vector(), want), 1e-4) << "ulysses " << u;
  }
}

TEST(ParallelConfigErrors, OneClearMessageEach) {
  const auto& message = test::error_message;
  EXPECT_NE(message([] { layout(1, true, 2, 1).validate(3); }).find("multiply to 4"),
            std::string::npos);
  EXPECT_NE(message([] {
              layout(1, false, 2, 1).validate_request(3, 8, true);
            }).find("3 attention heads"),
            std::string::npos);
  EXPECT_NE(message([] {
              layout(1, false, 1, 3).validate_request(16, 64, true);
            }).find("64 rows of patches"),
            std::string::npos);
  EXPECT_NE(message([] {
              layout(1, true, 1, 1).validate_request(16, 64, false);
            }).find("--use_cfg_parallel needs"),
            std::string::npos);
  EXPECT_NE(
      message([] { layout(3, false, 1, 1).validate_prompts(2); }).find("more than the 2 prompts"),
      std::string::npos);
  // And through the pipeline, before any weights load.
  ParallelConfig pc = layout(1, false, world().size(), 1);
  parallel::Mesh mesh(pc, world());
  pipeline::Pipeline p(kAlpha, DType::kF32);  // 3 heads
  p.set_mesh(&mesh);
  auto req = request(p.text_width());
  const std::string m = message([&] { p.validate(req); });
  EXPECT_NE(m.find("not divisible by --ulysses_degree"), std::string::npos) << m;
}

}  // namespace
}  // namespace xdit
