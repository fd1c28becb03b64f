// --patch_weights dynamic (issue 42): a rank slowed down mid-run by the
// XDIT_SLOW_* knob (3x from step 3) loses rows within 2 steps, the run's
// steps after that are faster than the static even split under the same
// slow-down, and the latents stay the serial run's (the split only moves
// rows between the ranks of an exact method).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "core/rng.h"
#include "dist/world.h"
#include "parallel/config.h"
#include "pipeline/distributed.h"
#include "test_util.h"

namespace xdit {
namespace {

using parallel::ParallelConfig;
using test::world;

constexpr int64_t kSteps = 8, kSlowFrom = 3, kRows = 64;

// PixArt-Σ tiny, 64 patch rows x 64 columns (1024 x 1024 px), CFG, random text.
pipeline::LatentRequest request(const pipeline::Pipeline& p) {
  pipeline::LatentRequest r;
  TorchGenerator g(5);
  r.cond.set(models::kText, g.randn({1, 7, p.text_width()}));
  r.uncond.set(models::kText, g.randn({1, 7, p.text_width()}));
  r.height = kRows * 16;
  r.width = 1024;
  r.num_inference_steps = kSteps;
  r.guidance_scale = 3.0;
  r.seed = 4;
  return r;
}

struct SlowedRun {
  Tensor latents;
  std::vector<double> seconds;              // each step's
  std::vector<std::vector<int64_t>> split;  // the rows per rank each step ran with
};

// Patch parallelism (DistriFusion with every step synchronous: exact) over
// every rank, the last one slowed 3x from step kSlowFrom.
SlowedRun run(bool dynamic) {
  ParallelConfig pc;
  pc.patch_parallel_degree = world().size();
  pc.full_sync = true;
  pc.dynamic_weights = dynamic;
  parallel::Mesh mesh(pc, world());
  pipeline::Pipeline p(test::models_dir() + "/pixart-sigma-tiny", DType::kF32);
  p.set_mesh(&mesh);
  SlowedRun r;
  r.split.push_back(mesh.config().row_split(kRows));
  const std::string slow = std::to_string(world().size() - 1);
  setenv("XDIT_SLOW_RANK", slow.c_str(), 1);
  setenv("XDIT_SLOW_FACTOR", "3", 1);
  setenv("XDIT_SLOW_FROM", std::to_string(kSlowFrom).c_str(), 1);
  r.latents = pipeline::generate_latents_distributed(
      p, mesh, request(p), [&](const pipeline::StepEvent& e) {
        r.seconds.push_back(e.seconds);
        r.split.push_back(mesh.config().row_split(kRows));  // what the next step runs with
      });
  unsetenv("XDIT_SLOW_RANK");
  return r;
}

TEST(DynamicBalance, ASlowedRankLosesRowsTheRunIsFasterAndStaysExact) {
  if (world().size() != 2)
    GTEST_SKIP() << "the timing comparison runs on 2 ranks (each on its own core), not "
                 << world().size();
  pipeline::Pipeline serial(test::models_dir() + "/pixart-sigma-tiny", DType::kF32);
  const Tensor want = serial.generate_latents(request(serial));
  const SlowedRun fixed = run(false), moving = run(true);
  for (const SlowedRun* r : {&fixed, &moving})
    EXPECT_LE(test::rel_max_err(r->latents.to_vector(), want.to_vector()), 1e-4);
  // The static split stays even; the dynamic one has moved rows off the slow
  // rank within 2 steps of the slow-down (the split step kSlowFrom + 2 runs with).
  for (const auto& s : fixed.split) EXPECT_EQ(s, (std::vector<int64_t>{32, 32}));
  ASSERT_EQ(moving.split.size(), static_cast<size_t>(kSteps + 1));
  for (int64_t i = kSlowFrom + 2; i < kSteps; ++i)
    EXPECT_LE(moving.split[static_cast<size_t>(i)][1], 24)
        << "step " << i << " still gives the slowed rank "
        << moving.split[static_cast<size_t>(i)][1] << " of " << kRows << " rows";
  // After the move a step takes less than on the even split: 0.63–0.79 of it
  // on an idle 2-core Xeon (ideal about 0.55; the whole-latent work every
  // rank repeats — gather, guidance, scheduler — stays). ctest gives the test
  // both cores (PROCESSORS 2): under other load the times say little.
  const auto mean_after = [](const SlowedRun& r) {
    return std::accumulate(r.seconds.begin() + kSlowFrom + 2, r.seconds.end(), 0.0) /
           static_cast<double>(kSteps - kSlowFrom - 2);
  };
  std::string splits;
  for (const auto& s : moving.split) {  // (piecewise: GCC 12 warns -Wrestrict on " " + string)
    splits += ' ';
    splits += std::to_string(s[0]);
    splits += '/';
    splits += std::to_string(s[1]);
  }
  if (world().rank() == 0)
    std::printf("[ timing   ] after the move: dynamic %.3f s per step, static %.3f s;%s\n",
                mean_after(moving), mean_after(fixed), splits.c_str());
  // Rank 0's ratio decides, on every rank; under other load up to two more
  // pairs of runs may show it (the best counts): the times, not the split,
  // are what load disturbs.
  double ratio = mean_after(moving) / mean_after(fixed);
  for (int again = 0; again <= 2; ++again) {
    world().broadcast(&ratio, sizeof ratio, comm::Type::kByte, 0);
    if (ratio < 0.9 || again == 2) break;
    const SlowedRun f = run(false), m = run(true);
    ratio = std::min(ratio, mean_after(m) / mean_after(f));
  }
  EXPECT_LT(ratio, 0.9) << "dynamic over static step time; the first run's splits" << splits;
}

}  // namespace
}  // namespace xdit
