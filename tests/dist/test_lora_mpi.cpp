// LoRAs under mpirun: with two LoRAs (tests/data/lora, 0.7 and -0.4) every
// exact layout — CFG parallel, Ulysses, Ring, tensor parallel (each rank
// merges its share of the delta: B's rows or A's columns), PipeFusion with
// full warm-up (each stage merges only its blocks' adapters) — makes the
// serial run's latents (f32, ≤ 1e-4 relative) on the tiny FLUX.1 [dev]
// with true CFG.
#include <gtest/gtest.h>

#include "core/rng.h"
#include "dist/layouts.h"
#include "dist/world.h"
#include "nn/lora.h"
#include "pipeline/distributed.h"
#include "test_util.h"

namespace xdit {
namespace {

using parallel::ParallelConfig;
using test::world;
using namespace test::layouts;

std::vector<nn::LoraUse> loras(bool community = false) {
  const std::string dir = std::string(XDIT_TEST_DATA) + "/lora/";
  if (community)  // fused qkv adapters split over q, k, v, then over the ranks
    return {{std::make_shared<nn::LoraFile>(dir + "flux_kohya.safetensors"), 0.8},
            {std::make_shared<nn::LoraFile>(dir + "flux_xlabs.safetensors"), -0.5}};
  return {{std::make_shared<nn::LoraFile>(dir + "flux_a.safetensors"), 0.7},
          {std::make_shared<nn::LoraFile>(dir + "flux_b.safetensors"), -0.4}};
}

pipeline::LatentRequest request(const pipeline::Pipeline& p) {
  pipeline::LatentRequest r;
  TorchGenerator g(7);
  for (models::Conditioning* c : {&r.cond, &r.uncond}) {
    c->set(models::kText, g.randn({1, 7, p.text_width()}));
    c->set(models::kPooled, g.randn({1, p.family().pooled_width()}));
  }
  r.height = 56;  // 7 patch rows: uneven over 2 and 4 ranks
  r.width = 40;
  r.true_cfg_scale = 2.5;
  r.guidance_scale = 3.5;
  r.num_inference_steps = 4;
  r.seed = 11;
  return r;
}

void check(const ParallelConfig& pc, bool community = false) {
  if (pc.world() != world().size())
    GTEST_SKIP() << pc.describe() << " needs " << pc.world() << " ranks, not " << world().size();
  SCOPED_TRACE(pc.describe());
  const std::string model = test::models_dir() + "/flux-dev-tiny";
  pipeline::Pipeline serial(model, DType::kF32);
  serial.set_loras(loras(community));
  const auto req = request(serial);
  const Tensor want = serial.generate_latents(req);
  pipeline::Pipeline plain(model, DType::kF32);
  const Tensor base = plain.generate_latents(req);
  EXPECT_GT(test::rel_max_err(base.to_vector(), want.to_vector()), 1e-2) << "the LoRAs matter";
  parallel::Mesh mesh(pc, world());
  pipeline::Pipeline par(model, DType::kF32);
  par.set_mesh(&mesh);
  par.set_loras(loras(community));
  const Tensor got = pipeline::generate_latents_distributed(par, mesh, req);
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_LE(test::rel_max_err(got.to_vector(), want.to_vector()), 1e-4)
      << "rank " << world().rank();
}

TEST(LoraMpi, CfgParallel) {
  check(layout(1, true, 1, 1));
}
TEST(LoraMpi, Ulysses2) {
  check(layout(1, false, 2, 1));
}
TEST(LoraMpi, Ring2) {
  check(layout(1, false, 1, 2));
}
TEST(LoraMpi, TensorParallel2) {
  ParallelConfig c = layout(1, false, 1, 1);
  c.tensor_parallel_degree = 2;
  check(c);
}
TEST(LoraMpi, TensorParallel2KohyaAndXLabs) {
  ParallelConfig c = layout(1, false, 1, 1);
  c.tensor_parallel_degree = 2;
  check(c, true);
}
TEST(LoraMpi, PipeFusion2FullWarmup) {
  check(layout(1, false, 1, 1, 2, 2, 4));
}
TEST(LoraMpi, UlyssesTimesRing) {
  check(layout(1, false, 2, 2));
}
TEST(LoraMpi, CfgTimesTensorParallel) {
  ParallelConfig c = layout(1, true, 1, 1);
  c.tensor_parallel_degree = 2;
  check(c);
}
TEST(LoraMpi, PipeFusion4FullWarmup) {
  check(layout(1, false, 1, 1, 4, 4, 4));
}

}  // namespace
}  // namespace xdit
