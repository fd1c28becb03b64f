// LoRAs under mpirun: with two LoRAs (tests/data/lora, 0.7 and -0.4) every
// exact layout — CFG parallel, Ulysses, Ring, tensor parallel (each rank
// merges its share of the delta: B's rows or A's columns), PipeFusion with
// full warm-up (each stage merges only its blocks' adapters) — makes the
// serial run's latents (f32, ≤ 1e-4 relative) on the tiny FLUX.1 [dev]
// with true CFG.
#include <gtest/gtest.h>

#include "dist/flux_request.h"
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

// The LoRAs: diffusers files, or community ones whose fused qkv adapters
// split over q, k, v, then over the ranks (kohya's also adapts CLIP, which
// per-request LoRAs do not: XLabs' with a diffusers file there).
enum class Files { kDiffusers, kKohyaXLabs, kXLabsDiffusers };

std::vector<nn::LoraUse> loras(Files files) {
  const std::string dir = std::string(XDIT_TEST_DATA) + "/lora/";
  const auto file = [&](const std::string& name) {
    return std::make_shared<nn::LoraFile>(dir + name + ".safetensors");
  };
  switch (files) {
    case Files::kKohyaXLabs:
      return {{file("flux_kohya"), 0.8}, {file("flux_xlabs"), -0.5}};
    case Files::kXLabsDiffusers:
      return {{file("flux_xlabs"), 0.6}, {file("flux_a"), 0.7}};
    default:
      return {{file("flux_a"), 0.7}, {file("flux_b"), -0.4}};
  }
}

pipeline::LatentRequest request(const pipeline::Pipeline& p) {
  pipeline::LatentRequest r = test::flux_true_cfg_request(p, 7, 4, 11);
  r.guidance_scale = 3.5;
  return r;
}

// The parallel run's LoRAs: merged at load, or per request (side paths).
enum class Apply { kMerged, kPerRequest };

void check(const ParallelConfig& pc, Files files = Files::kDiffusers,
           Apply apply = Apply::kMerged) {
  if (pc.world() != world().size())
    GTEST_SKIP() << pc.describe() << " needs " << pc.world() << " ranks, not " << world().size();
  SCOPED_TRACE(pc.describe());
  const std::string model = test::models_dir() + "/flux-dev-tiny";
  pipeline::Pipeline serial(model, DType::kF32);
  serial.set_loras(loras(files));
  const auto req = request(serial);
  const Tensor want = serial.generate_latents(req);
  pipeline::Pipeline plain(model, DType::kF32);
  const Tensor base = plain.generate_latents(req);
  EXPECT_GT(test::rel_max_err(base.to_vector(), want.to_vector()), 1e-2) << "the LoRAs matter";
  parallel::Mesh mesh(pc, world());
  pipeline::Pipeline par(model, DType::kF32);
  par.set_mesh(&mesh);
  pipeline::LatentRequest preq = req;
  if (apply == Apply::kMerged) {
    par.set_loras(loras(files));
  } else {
    for (const nn::LoraUse& l : loras(files)) preq.loras.push_back({l.file->path(), l.scale});
  }
  const Tensor got = pipeline::generate_latents_distributed(par, mesh, preq);
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
  check(c, Files::kKohyaXLabs);
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

// Per-request LoRAs (side paths): each rank adapts the layers it loaded —
// its tensor-parallel shares (A's columns, B's rows), its PipeFusion stage.
TEST(LoraMpi, PerRequestCfgParallel) {
  check(layout(1, true, 1, 1), Files::kDiffusers, Apply::kPerRequest);
}
TEST(LoraMpi, PerRequestUlysses2) {
  check(layout(1, false, 2, 1), Files::kDiffusers, Apply::kPerRequest);
}
TEST(LoraMpi, PerRequestTensorParallel2) {
  ParallelConfig c = layout(1, false, 1, 1);
  c.tensor_parallel_degree = 2;
  check(c, Files::kDiffusers, Apply::kPerRequest);
  check(c, Files::kXLabsDiffusers, Apply::kPerRequest);
}
TEST(LoraMpi, PerRequestPipeFusion2FullWarmup) {
  check(layout(1, false, 1, 1, 2, 2, 4), Files::kDiffusers, Apply::kPerRequest);
}
TEST(LoraMpi, PerRequestCfgTimesTensorParallel) {
  ParallelConfig c = layout(1, true, 1, 1);
  c.tensor_parallel_degree = 2;
  check(c, Files::kXLabsDiffusers, Apply::kPerRequest);
}
}  // namespace
}  // namespace xdit
