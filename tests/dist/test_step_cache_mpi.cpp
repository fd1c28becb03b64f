// First-Block-Cache and TeaCache under mpirun against the cached serial run: every exact
// method (CFG, Ulysses, Ring, USP, tensor parallel, DistriFusion with fresh
// K/V every step) takes the serial run's decisions — the same steps skip,
// for each CFG half where the halves decide apart (FLUX.1's true CFG) —
// and makes its latents (f32, ≤ 1e-4 relative). Data parallel decides per
// replica: each replica equals the serial run of its own prompts. Stale
// DistriFusion stays within a bound of the cached serial run (and reports
// its error). The threshold of each model is picked from the serial run so
// that some steps skip and no indicator lies within 1% of it (the ranks'
// sums round differently from the serial one's).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/rng.h"
#include "dist/layouts.h"
#include "dist/world.h"
#include "pipeline/distributed.h"
#include "test_util.h"
#include "tiny_models.h"

namespace xdit {
namespace {

using parallel::ParallelConfig;
using test::world;
using namespace test::layouts;
constexpr pipeline::CacheKind kTaylor = pipeline::CacheKind::kTaylorSeer,
                              kTea = pipeline::CacheKind::kTeaCache;

// Two prompts of random embeddings, 6 steps; FLUX.1 [dev] with true CFG.
pipeline::LatentRequest request(const pipeline::Pipeline& p) {
  pipeline::LatentRequest r;
  TorchGenerator g(5);
  const bool pooled = p.family().pooled_width() > 0;
  const bool flux = p.family().name().find("FLUX") != std::string::npos;
  const int64_t L = 7;
  for (models::Conditioning* c : {&r.cond, &r.uncond}) {
    c->set(models::kText, g.randn({2, L, p.text_width()}));
    if (pooled) c->set(models::kPooled, g.randn({2, p.family().pooled_width()}));
  }
  r.height = pooled ? 56 : 112;  // 7 patch rows: uneven over 2 and 4 ranks
  r.width = pooled ? 40 : 80;
  if (p.spec().video) {  // Wan: 9 frames (3 latent frames) of 3 patch rows: 9 token rows
    r.num_frames = 9;
    r.height = 48;
  }
  if (flux && p.family().embeds_guidance()) r.true_cfg_scale = 2.5;
  if (!flux || p.family().embeds_guidance()) r.guidance_scale = 3.5;
  r.num_inference_steps = 6;
  r.seed = 13;
  r.cache.kind = pipeline::CacheKind::kFirstBlock;
  return r;
}

// A threshold of the cache `kind` at which the serial run skips some steps,
// with every indicator at least 1% from it; per model, made once per process.
double threshold_for(const std::string& model, pipeline::CacheKind kind) {
  static std::map<std::pair<std::string, pipeline::CacheKind>, double> picked;
  const auto key = std::make_pair(model, kind);
  if (auto it = picked.find(key); it != picked.end()) return it->second;
  pipeline::Pipeline serial(model, DType::kF32);
  auto r = request(serial);
  r.cache.kind = kind;
  for (const double t : {0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 1.0, 1.5, 2.0}) {
    r.cache.threshold = t;
    serial.generate_latents(r);
    const auto& st = serial.cache_report().stats;
    bool clear = true;
    for (const auto& per : st.indicator)
      for (const double v : per) clear = clear && (v < 0 || std::abs(v / t - 1) >= 0.01);
    if (clear && st.full_steps < st.steps) return picked[key] = t;
  }
  return picked[key] = 0;
}

class CachedLoop : public testing::TestWithParam<std::string> {
 protected:
  // The layout's cached run against the cached serial run. `bound` > 0: an
  // inexact layout, within that relative error. TaylorSeer runs at interval
  // 3, warm-up 2, order 2; the deciding caches at threshold_for.
  void check(const ParallelConfig& pc, double bound = 0,
             pipeline::CacheKind kind = pipeline::CacheKind::kFirstBlock) {
    const bool taylor = kind == pipeline::CacheKind::kTaylorSeer;
    if (pc.world() != world().size())
      GTEST_SKIP() << pc.describe() << " needs " << pc.world() << " ranks, not " << world().size();
    const std::string model = test::models_dir() + "/" + GetParam() + "-tiny";
    SCOPED_TRACE(pc.describe() + " on " + GetParam());
    pipeline::Pipeline serial(model, DType::kF32);
    auto req = request(serial);
    if (pc.use_cfg_parallel && !serial.uses_cfg(req))
      GTEST_SKIP() << GetParam() << " runs this request without CFG: nothing for CFG parallel";
    if (pc.pipefusion_parallel_degree > serial.spec().blocks)
      GTEST_SKIP() << GetParam() << " has fewer blocks than PipeFusion stages";
    // (Wan: 0.31 to 0.84 relative; Z-Image, Qwen-Image: 0.13 to 1.05 — no
    // bound says anything)
    const std::string family = serial.family().name();
    if (bound > 0 && (serial.spec().video || family == "Z-Image" || family == "Qwen-Image"))
      GTEST_SKIP() << "the tiny " << serial.family().name()
                   << " model moves too far in each of 6 steps for K/V a step old; test_patch "
                      "measures its stale methods";
    if (serial.spec().heads % (pc.ulysses_degree * pc.tensor_parallel_degree) != 0)
      GTEST_SKIP() << GetParam() << "'s " << serial.spec().heads << " heads do not divide by "
                   << pc.ulysses_degree * pc.tensor_parallel_degree;
    if (taylor) {
      req.cache.kind = pipeline::CacheKind::kTaylorSeer;
      req.cache.interval = 3;
      req.cache.warmup = 2;
      req.cache.order = 2;
    } else {
      req.cache.kind = kind;
      req.cache.threshold = threshold_for(model, kind);
      ASSERT_GT(*req.cache.threshold, 0) << "no threshold skips a step with a clear margin";
    }
    parallel::Mesh mesh(pc, world());
    pipeline::Pipeline par(model, DType::kF32);
    par.set_mesh(&mesh);
    const Tensor got = pipeline::generate_latents_distributed(par, mesh, req);
    const auto& mine = par.cache_report().stats;

    // The serial runs: the whole batch, or (data parallel) this replica's prompts alone.
    const int dp = pc.data_parallel_degree;
    Tensor want;
    int64_t skipped = 0;  // by the serial run(s)
    const auto count_skips = [&skipped](const pipeline::CacheStats& st) {
      for (const auto& per : st.full)
        for (const bool f : per) skipped += f ? 0 : 1;
    };
    std::vector<std::vector<bool>> serial_full;
    std::vector<std::vector<double>> serial_indicator;
    if (dp == 1) {
      want = serial.generate_latents(req);
      serial_full = serial.cache_report().stats.full;
      serial_indicator = serial.cache_report().stats.indicator;
      count_skips(serial.cache_report().stats);
    } else {
      const Tensor noise = pipeline::initial_noise(
          2, serial.spec().latent_channels, serial.plan(req)->latent_frames,
          req.height / serial.vae_scale_factor(), req.width / serial.vae_scale_factor(), req.seed);
      std::vector<float> all;
      for (int64_t k = 0; k < 2; ++k) {
        auto one = req;
        one.cond = req.cond.slice(k, k + 1);
        one.uncond = req.uncond.slice(k, k + 1);
        one.latents = noise.rows(k, 1).clone();
        const Tensor w = serial.generate_latents(one);
        count_skips(serial.cache_report().stats);
        const auto v = w.to_vector();
        all.insert(all.end(), v.begin(), v.end());
        if (k == mesh.coord().dp) {
          serial_full = serial.cache_report().stats.full;
          serial_indicator = serial.cache_report().stats.indicator;
        }
      }
      want = Tensor::from_vector(all, got.shape());
    }
    EXPECT_GT(skipped, 0) << "the serial run must skip some steps";
    ASSERT_EQ(got.shape(), want.shape());
    const double err = test::rel_max_err(got.to_vector(), want.to_vector());
    if (bound > 0) {
      EXPECT_LE(err, bound) << "rank " << world().rank();
      EXPECT_LT(mine.full_steps, mine.steps) << "the parallel run must skip some steps too";
      if (world().rank() == 0)
        std::printf("[ cache   ] %s, %s: %.2e relative to cached serial\n", req.cache.name(),
                    pc.describe().c_str(), err);
      return;
    }
    EXPECT_LE(err, 1e-4) << "rank " << world().rank();
    // The serial run's decisions and indicator values (the sums over every
    // rank's rows): per context, or the CFG half this rank holds.
    const bool halves_apart = serial_full.size() == 2;
    if (halves_apart && pc.use_cfg_parallel) {
      const auto half = static_cast<size_t>(mesh.coord().cfg);
      serial_full = {serial_full[half]};
      serial_indicator = {serial_indicator[half]};
    }
    EXPECT_EQ(mine.full, serial_full);
    if (taylor) {  // every attention module forecast alike, on every rank
      EXPECT_LT(mine.blocks_run, mine.blocks);
      return;
    }
    if (mesh.coord().pp > 0) return;  // a later stage takes stage 0's decisions
    ASSERT_EQ(mine.indicator.size(), serial_indicator.size());
    for (size_t c = 0; c < serial_indicator.size(); ++c)
      EXPECT_LE(test::rel_max_err(
                    std::vector<float>(mine.indicator[c].begin(), mine.indicator[c].end()),
                    std::vector<float>(serial_indicator[c].begin(), serial_indicator[c].end())),
                1e-5)
          << "context " << c << ": the indicator sums over every rank's rows";
  }
};

TEST_P(CachedLoop, CfgParallel) {
  check(layout(1, true, 1, 1));
}
TEST_P(CachedLoop, Ulysses2) {
  check(layout(1, false, 2, 1));
}
TEST_P(CachedLoop, Ring2) {
  check(layout(1, false, 1, 2));
}
TEST_P(CachedLoop, TensorParallel2) {
  ParallelConfig c = layout(1, false, 1, 1);
  c.tensor_parallel_degree = 2;
  check(c);
}
TEST_P(CachedLoop, DataParallelDecidesPerReplica) {
  check(layout(2, false, 1, 1));
}
TEST_P(CachedLoop, UlyssesTimesRing) {
  check(layout(1, false, 2, 2));
}
TEST_P(CachedLoop, CfgTimesUlysses) {
  check(layout(1, true, 2, 1));
}
TEST_P(CachedLoop, CfgTimesTensorParallel) {
  ParallelConfig c = layout(1, true, 1, 1);
  c.tensor_parallel_degree = 2;
  check(c);
}
TEST_P(CachedLoop, DataTimesCfg) {
  check(layout(2, true, 1, 1));
}
TEST_P(CachedLoop, PatchDisplaced2FullSync) {
  check(patch(1, false, 2, true));
}
TEST_P(CachedLoop, PatchDisplaced4FullSync) {
  check(patch(1, false, 4, true));
}
// PipeFusion with as many warm-up steps as steps: each stage skips its blocks
// and adds its own residual; exact.
TEST_P(CachedLoop, PipeFusion2FullWarmup) {
  check(layout(1, false, 1, 1, 2, 2, 6));
}
TEST_P(CachedLoop, PipeFusion4FullWarmup) {
  check(layout(1, false, 1, 1, 4, 4, 6));
}
TEST_P(CachedLoop, PipeFusionTimesUlyssesFullWarmup) {
  check(layout(1, false, 2, 1, 2, 2, 6));
}
TEST_P(CachedLoop, PipeFusionTimesCfgFullWarmup) {
  check(layout(1, true, 1, 1, 2, 2, 6));
}
// The patch pipeline after one warm-up step: patch 0 decides each step.
TEST_P(CachedLoop, PipeFusion2With2PatchesIsBounded) {
  check(layout(1, false, 1, 1, 2, 2, 1), 0.1);
}
// Stale K/V after one warm-up step: inexact, bounded.
TEST_P(CachedLoop, PatchDisplaced2StaleIsBounded) {
  check(patch(1, false, 2, false, 1), 0.1);
}

// TaylorSeer: a schedule, so nothing to agree on; the forecasts skip the
// attention modules' collectives on every rank alike.
TEST_P(CachedLoop, TaylorSeerCfgParallel) {
  check(layout(1, true, 1, 1), 0, kTaylor);
}
TEST_P(CachedLoop, TaylorSeerUlysses2) {
  check(layout(1, false, 2, 1), 0, kTaylor);
}
TEST_P(CachedLoop, TaylorSeerRing2) {
  check(layout(1, false, 1, 2), 0, kTaylor);
}
TEST_P(CachedLoop, TaylorSeerTensorParallel2) {
  ParallelConfig c = layout(1, false, 1, 1);
  c.tensor_parallel_degree = 2;
  check(c, 0, kTaylor);
}
TEST_P(CachedLoop, TaylorSeerDataParallel) {
  check(layout(2, false, 1, 1), 0, kTaylor);
}
TEST_P(CachedLoop, TaylorSeerPatchDisplaced2FullSync) {
  check(patch(1, false, 2, true), 0, kTaylor);
}
TEST_P(CachedLoop, TaylorSeerUlyssesTimesRing) {
  check(layout(1, false, 2, 2), 0, kTaylor);
}
// PipeFusion: the whole-image warm-up is exact; on the patch pipeline the
// patches' rows start their factors at their first step (computed), then
// forecast: bounded.
TEST_P(CachedLoop, TaylorSeerPipeFusion2FullWarmup) {
  check(layout(1, false, 1, 1, 2, 2, 6), 0, kTaylor);
}
TEST_P(CachedLoop, TaylorSeerPipeFusionTimesUlyssesFullWarmup) {
  check(layout(1, false, 2, 1, 2, 2, 6), 0, kTaylor);
}
TEST_P(CachedLoop, TaylorSeerPipeFusion2With2PatchesIsBounded) {
  check(layout(1, false, 1, 1, 2, 2, 1), 0.25, kTaylor);
}
TEST_P(CachedLoop, TaylorSeerPatchDisplaced2StaleIsBounded) {
  // (the forecast steps refresh no K/V: the next full step's is older still)
  check(patch(1, false, 2, false, 1), 0.25, kTaylor);
}

// TeaCache: stage 0 decides from block 0's modulated input, over every
// rank's rows; every stage and rank skips all its blocks alike.
TEST_P(CachedLoop, TeaCacheCfgParallel) {
  check(layout(1, true, 1, 1), 0, kTea);
}
TEST_P(CachedLoop, TeaCacheUlysses2) {
  check(layout(1, false, 2, 1), 0, kTea);
}
TEST_P(CachedLoop, TeaCacheRing2) {
  check(layout(1, false, 1, 2), 0, kTea);
}
TEST_P(CachedLoop, TeaCacheTensorParallel2) {
  ParallelConfig c = layout(1, false, 1, 1);
  c.tensor_parallel_degree = 2;
  check(c, 0, kTea);
}
TEST_P(CachedLoop, TeaCacheDataParallelDecidesPerReplica) {
  check(layout(2, false, 1, 1), 0, kTea);
}
TEST_P(CachedLoop, TeaCacheUlyssesTimesRing) {
  check(layout(1, false, 2, 2), 0, kTea);
}
TEST_P(CachedLoop, TeaCacheCfgTimesTensorParallel) {
  ParallelConfig c = layout(1, true, 1, 1);
  c.tensor_parallel_degree = 2;
  check(c, 0, kTea);
}
TEST_P(CachedLoop, TeaCachePatchDisplaced2FullSync) {
  check(patch(1, false, 2, true), 0, kTea);
}
TEST_P(CachedLoop, TeaCachePipeFusion2FullWarmup) {
  check(layout(1, false, 1, 1, 2, 2, 6), 0, kTea);
}
TEST_P(CachedLoop, TeaCachePipeFusion4FullWarmup) {
  check(layout(1, false, 1, 1, 4, 4, 6), 0, kTea);
}
TEST_P(CachedLoop, TeaCachePipeFusionTimesCfgFullWarmup) {
  check(layout(1, true, 1, 1, 2, 2, 6), 0, kTea);
}
TEST_P(CachedLoop, TeaCachePipeFusion2With2PatchesIsBounded) {
  check(layout(1, false, 1, 1, 2, 2, 1), 0.1, kTea);
}
TEST_P(CachedLoop, TeaCachePatchDisplaced2StaleIsBounded) {
  check(patch(1, false, 2, false, 1), 0.1, kTea);
}

INSTANTIATE_TEST_SUITE_P(Models, CachedLoop,
                         testing::ValuesIn(test::tiny_models_in(test::Suite::kStepCache)));

}  // namespace
}  // namespace xdit
