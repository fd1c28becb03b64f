// The whole denoising loop under mpirun, for every tiny model (PixArt-α with
// micro-conditions, PixArt-Σ, FLUX.1 [dev] with guidance and true CFG,
// FLUX.1 [schnell] without CFG, SD3 and SD3.5 with CFG — the latter with dual
// attention and qk-norm —, Wan2.1 with CFG over 9 frames, whose token rows
// cross frames, Wan2.2 whose second expert takes over after the first of
// the 3 steps: the stale-K/V methods warm up again on it, and Wan2.2 TI2V
// with its 48 channels, Z-Image with captions of different lengths in one
// batch — masked text keys in every backend — and image pad tokens) and every parallel layout the
// world size allows — CFG, Ulysses, Ring, USP, their combinations with CFG, data parallel,
// PipeFusion alone (full warm-up: exact) and with Ulysses / Ring — against the serial run of the
// same request in the same process (f32, ≤ 1e-4 relative). A layout that does not fit the world
// size or the model skips visibly. The serial runs themselves are checked against diffusers in
// tests/parity. Also: sequence slices of one forward, and the layout errors.
// On a GPU (ParallelLoopOnGpu, ParallelImagesOnGpu) the same layouts run on
// GPU memory through the device communicators.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/device.h"
#include "core/error.h"
#include "core/rng.h"
#include "dist/layouts.h"
#include "dist/world.h"
#include "io/model_folder.h"
#include "models/pixart.h"
#include "parallel/calibrate.h"
#include "parallel/config.h"
#include "parallel/gather.h"
#include "parallel/runtime.h"
#include "parallel/usp_attention.h"
#include "pipeline/distributed.h"
#include "pipeline/guidance/skip_layer.h"
#include "test_util.h"
#include "tiny_models.h"

namespace xdit {
namespace {

using parallel::ParallelConfig;
using test::world;
using namespace test::layouts;

// (test::models_dir: XDIT_MODELS in the environment overrides the built-in path.)
const std::string kSigma =
    test::models_dir() + "/pixart-sigma-tiny";  // 2 heads, no micro-conditions
const std::string kAlpha = test::models_dir() + "/pixart-alpha-tiny";  // 3 heads, micro-conditions

// Two prompts, random embeddings; PixArt: 9 tokens padded differently and a
// 128x96 px image (8x6 patch rows x cols); FLUX: 6 text tokens, pooled
// vectors, a 64x40 px image (8x5 patch rows x cols), dev with true CFG.
// `rows` > 0: that many patch rows instead (odd counts split unevenly).
pipeline::LatentRequest request(const pipeline::Pipeline& p, int64_t rows = 0) {
  pipeline::LatentRequest r;
  TorchGenerator g(3);
  const bool pooled = p.family().pooled_width() > 0;  // FLUX, SD3
  const bool flux = p.family().name().find("FLUX") != std::string::npos;
  const bool video = p.spec().video;
  const int64_t L = pooled ? 6 : 9;
  r.cond.set(models::kText, g.randn({2, L, p.text_width()}));
  r.uncond.set(models::kText, g.randn({2, L, p.text_width()}));
  // Wan's pixels per token: 16 (TI2V's VAE: 32).
  const int64_t unit = p.vae_scale_factor() * p.spec().patch;
  if (video) {  // Wan: 9 frames (3 latent frames) of 3 x 5 patches: 9 token rows
    r.num_frames = 9;
    r.height = 3 * unit;
    r.width = 5 * unit;
  } else if (pooled) {
    r.cond.set(models::kPooled, g.randn({2, p.family().pooled_width()}));
    r.uncond.set(models::kPooled, g.randn({2, p.family().pooled_width()}));
    r.height = 64;
    r.width = 40;
  } else if (p.family().name() == "Z-Image") {
    // Captions of 36 and 9 tokens (padded to 64 and 32: the shorter masked in
    // the joint attention), negative ones of 1 and 40.
    const auto prefix = [](std::vector<int64_t> n) {
      std::vector<float> m(n.size() * 40, 0.0f);
      for (size_t b = 0; b < n.size(); ++b) std::fill_n(m.begin() + b * 40, n[b], 1.0f);
      return Tensor::from_vector(m, {static_cast<int64_t>(n.size()), 40});
    };
    r.cond.set(models::kText, g.randn({2, 40, p.text_width()}));
    r.uncond.set(models::kText, g.randn({2, 40, p.text_width()}));
    r.cond.set(models::kTextMask, prefix({36, 9}));
    r.uncond.set(models::kTextMask, prefix({1, 40}));
    r.height = 128;
    r.width = 96;
  } else {
    r.cond.set(models::kTextMask,
               Tensor::from_vector({1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0}, {2, 9}));
    r.uncond.set(
        models::kTextMask,
        Tensor::from_vector({1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0}, {2, 9}));
    r.height = 128;
    r.width = 96;
  }
  if (flux && p.family().embeds_guidance()) r.true_cfg_scale = 2.5;  // dev: true CFG
  if (flux && !p.family().embeds_guidance())                         // schnell: no CFG, no guidance
    r.uncond = {};
  // The tiny VAEs: factor 4 (FLUX, SD3), 8; Wan: frames of 3 patch rows (6
  // latent rows, enough for the VAE's bands over 4 ranks), ⌈rows / 3⌉ of them:
  // an odd count of token rows, 7 → 9, 14 → 15.
  if (rows > 0 && video) {
    r.height = 3 * unit;
    r.num_frames = 4 * ((rows + 2) / 3 - 1) + 1;
  } else if (rows > 0) {
    r.height = rows * unit;
  }
  r.num_inference_steps = 3;
  if (!flux || p.family().embeds_guidance()) r.guidance_scale = 3.5;
  r.seed = 11;
  return r;
}

class ParallelLoop : public testing::TestWithParam<std::string> {
 protected:
  // The layout's run against the serial run; skips when it does not apply.
  // `slg`: SD3's skip-layer guidance on block 1 at every step after the first.
  void check(const ParallelConfig& pc, int64_t rows = 0, bool slg = false) {
    if (pc.world() != world().size())
      GTEST_SKIP() << pc.describe() << " needs " << pc.world() << " ranks, not " << world().size();
    const std::string model = test::models_dir() + "/" + GetParam() + "-tiny";
    SCOPED_TRACE(pc.describe() + " on " + GetParam() +
                 (rows > 0 ? " with " + std::to_string(rows) + " patch rows" : ""));
    pipeline::Pipeline serial(model, DType::kF32);
    if (device_.cuda()) serial.set_device(device_);
    auto req = request(serial, rows);
    if (slg && dynamic_cast<const pipeline::SkipLayerGuider*>(&serial.family().guider()) == nullptr)
      GTEST_SKIP() << "skip-layer guidance is SD3's, not " << serial.family().name() << "'s";
    if (slg) req.skip_layer_guidance = {{1}, 2.8, 0.0, 1.0};
    if (pc.use_cfg_parallel && !serial.uses_cfg(req))
      GTEST_SKIP() << GetParam() << " runs this request without CFG: nothing for CFG parallel";
    if (pc.pipefusion_parallel_degree > serial.spec().blocks)
      GTEST_SKIP() << GetParam() << " has fewer blocks than PipeFusion stages";
    if (serial.spec().heads % (pc.ulysses_degree * pc.tensor_parallel_degree) != 0)
      GTEST_SKIP() << GetParam() << "'s " << serial.spec().heads
                   << " heads do not divide by Ulysses " << pc.ulysses_degree << " x tensor "
                   << pc.tensor_parallel_degree;
    Tensor want = serial.generate_latents(req);
    parallel::Mesh mesh(pc, world());
    pipeline::Pipeline par(model, DType::kF32);
    par.set_mesh(&mesh);
    if (device_.cuda()) par.set_device(device_);  // each rank: its local rank's GPU
    Tensor got = pipeline::generate_latents_distributed(par, mesh, req);
    ASSERT_EQ(got.shape(), want.shape());
    EXPECT_LE(test::rel_max_err(got.to_vector(), want.to_vector()), 1e-4)
        << "rank " << world().rank();
    if (pc.auto_weights) {  // calibrated once, then kept
      EXPECT_FALSE(mesh.config().auto_weights);
      ASSERT_EQ(mesh.config().patch_weights.size(), static_cast<size_t>(pc.row_split_degree()));
      for (double w : mesh.config().patch_weights) EXPECT_TRUE(w > 0 && w <= 1) << w;
    }
  }
  Device device_;  // where both runs compute (ParallelLoopOnGpu: the GPU)
};

TEST_P(ParallelLoop, CfgParallel) {
  check(layout(1, true, 1, 1));
}
TEST_P(ParallelLoop, Ulysses2) {
  check(layout(1, false, 2, 1));
}
TEST_P(ParallelLoop, Ring2) {
  check(layout(1, false, 1, 2));
}
TEST_P(ParallelLoop, DataParallel2) {
  check(layout(2, false, 1, 1));
}
TEST_P(ParallelLoop, UlyssesTimesRing) {
  check(layout(1, false, 2, 2));
}
TEST_P(ParallelLoop, Ring4) {
  check(layout(1, false, 1, 4));
}
TEST_P(ParallelLoop, CfgTimesUlysses) {
  check(layout(1, true, 2, 1));
}
TEST_P(ParallelLoop, CfgTimesRing) {
  check(layout(1, true, 1, 2));
}
TEST_P(ParallelLoop, DataTimesCfg) {
  check(layout(2, true, 1, 1));
}
// PipeFusion with as many warm-up steps as steps is the serial run.
TEST_P(ParallelLoop, PipeFusion2With2PatchesFullWarmup) {
  check(layout(1, false, 1, 1, 2, 2, 3));
}
TEST_P(ParallelLoop, PipeFusion2With4PatchesFullWarmup) {
  check(layout(1, false, 1, 1, 2, 4, 3));
}
TEST_P(ParallelLoop, PipeFusion4FullWarmup) {
  check(layout(1, false, 1, 1, 4, 4, 3));
}
TEST_P(ParallelLoop, PipeFusionTimesUlyssesFullWarmup) {
  check(layout(1, false, 2, 1, 2, 2, 3));
}
TEST_P(ParallelLoop, PipeFusionTimesRingFullWarmup) {
  check(layout(1, false, 1, 2, 2, 2, 3));
}
TEST_P(ParallelLoop, PipeFusionTimesCfgFullWarmup) {
  check(layout(1, true, 1, 1, 2, 2, 3));
}

// DistriFusion exchanging fresh K/V every step (full sync, or warm-up = steps) is exact.
TEST_P(ParallelLoop, PatchDisplaced2FullSync) {
  check(patch(1, false, 2, true));
}
TEST_P(ParallelLoop, PatchDisplaced2WarmupEveryStep) {
  check(patch(1, false, 2, false, 3));
}
TEST_P(ParallelLoop, PatchDisplaced2FullSyncWith7Rows) {
  check(patch(1, false, 2, true), 7);
}
TEST_P(ParallelLoop, PatchDisplaced4FullSyncWith7Rows) {
  check(patch(1, false, 4, true), 7);
}
TEST_P(ParallelLoop, CfgTimesPatchDisplacedFullSync) {
  check(patch(1, true, 2, true));
}
TEST_P(ParallelLoop, DataTimesPatchDisplacedFullSync) {
  check(patch(2, false, 2, true));
}

// Uneven devices: rows in proportion to --patch_weights, every exact method.
TEST_P(ParallelLoop, Ulysses2Weighted3To1) {
  check(weighted(layout(1, false, 2, 1), {3, 1}));
}
TEST_P(ParallelLoop, Ring2Weighted1To2) {
  check(weighted(layout(1, false, 1, 2), {1, 2}), 7);
}
TEST_P(ParallelLoop, PatchDisplacedFullSyncWeighted2To1) {
  check(weighted(patch(1, false, 2, true), {2, 1}));
}
TEST_P(ParallelLoop, UlyssesTimesRingWeighted) {
  check(weighted(layout(1, false, 2, 2), {1, 2, 3, 1}), 14);
}
TEST_P(ParallelLoop, PipeFusionTimesUlyssesWeightedFullWarmup) {
  check(weighted(layout(1, false, 2, 1, 2, 2, 3), {1, 3}));
}
// --patch_weights auto: one calibration step sets the weights; the result
// stays the serial one (whatever the measured speeds, the methods are exact).
TEST_P(ParallelLoop, Ulysses2AutoWeights) {
  check(auto_weighted(layout(1, false, 2, 1)), 7);
}
TEST_P(ParallelLoop, PatchDisplacedFullSyncAutoWeights) {
  check(auto_weighted(patch(1, false, 2, true)));
}
TEST_P(ParallelLoop, CfgTimesRing2AutoWeights) {
  check(auto_weighted(layout(1, true, 1, 2)), 7);
}

// Tensor parallelism: the blocks' weights split over T consecutive ranks,
// alone and inside every other method (exact: only the sums' order changes).
// The tiny models have 2 or 3 heads: T = 4 and T x Ulysses 2 skip here and
// run on wider random models in test_tensor_parallel.cpp.
ParallelConfig tensor(ParallelConfig c, int T) {
  c.tensor_parallel_degree = T;
  return c;
}
TEST_P(ParallelLoop, TensorParallel2) {
  check(tensor(layout(1, false, 1, 1), 2));
}
TEST_P(ParallelLoop, TensorParallel4) {
  check(tensor(layout(1, false, 1, 1), 4));
}
TEST_P(ParallelLoop, TensorParallelTimesCfg) {
  check(tensor(layout(1, true, 1, 1), 2));
}
TEST_P(ParallelLoop, TensorParallelTimesData) {
  check(tensor(layout(2, false, 1, 1), 2));
}
TEST_P(ParallelLoop, TensorParallelTimesRingWith7Rows) {
  check(tensor(layout(1, false, 1, 2), 2), 7);
}
TEST_P(ParallelLoop, TensorParallelTimesUlysses) {
  check(tensor(layout(1, false, 2, 1), 2));
}
TEST_P(ParallelLoop, TensorParallelTimesPipeFusionFullWarmup) {
  check(tensor(layout(1, false, 1, 1, 2, 2, 3), 2));
}
TEST_P(ParallelLoop, TensorParallelTimesPatchDisplacedFullSync) {
  check(tensor(patch(1, false, 2, true), 2));
}

// SD3's skip-layer guidance: a third, prompt-only call per step on the same mesh.
TEST_P(ParallelLoop, CfgParallelWithSkipLayerGuidance) {
  check(layout(1, true, 1, 1), 0, true);
}
TEST_P(ParallelLoop, UlyssesTimesRingWithSkipLayerGuidance) {
  check(layout(1, false, 2, 2), 7, true);
}
TEST_P(ParallelLoop, CfgTimesUlyssesWithSkipLayerGuidance) {
  check(layout(1, true, 2, 1), 0, true);
}

// Any size on any layout: patch rows that do not divide by the sequence-
// parallel degree (or a PipeFusion patch's rows) split unevenly.
TEST_P(ParallelLoop, Ulysses2With7Rows) {
  check(layout(1, false, 2, 1), 7);
}
TEST_P(ParallelLoop, Ring2With7Rows) {
  check(layout(1, false, 1, 2), 7);
}
TEST_P(ParallelLoop, CfgTimesUlyssesWith7Rows) {
  check(layout(1, true, 2, 1), 7);
}
TEST_P(ParallelLoop, UlyssesTimesRingWith7Rows) {
  check(layout(1, false, 2, 2), 7);
}
TEST_P(ParallelLoop, UlyssesTimesRingWith14Rows) {  // PixArt at 224 px high
  check(layout(1, false, 2, 2), 14);
}
TEST_P(ParallelLoop, Ring4With7Rows) {
  check(layout(1, false, 1, 4), 7);
}
TEST_P(ParallelLoop, PipeFusion2With7RowsFullWarmup) {
  check(layout(1, false, 1, 1, 2, 2, 3), 7);
}
TEST_P(ParallelLoop, PipeFusionTimesUlyssesWith7RowsFullWarmup) {
  check(layout(1, false, 2, 1, 2, 2, 3), 7);
}
TEST_P(ParallelLoop, PipeFusionTimesRingWith7RowsFullWarmup) {
  check(layout(1, false, 1, 2, 2, 2, 3), 7);
}

INSTANTIATE_TEST_SUITE_P(Models, ParallelLoop,
                         testing::ValuesIn(test::tiny_models_in(test::Suite::kParallel)),
                         test::model_param_name);

// The parallel methods on GPU memory: every rank takes its local rank's GPU
// and the model groups move to device communicators — host-staged when the
// ranks share one GPU (a one-GPU machine), NCCL with one each. Against the
// serial run on the GPU. Skips, saying why, where there is no GPU.
class ParallelLoopOnGpu : public ParallelLoop {
 protected:
  void SetUp() override {
    if (const std::string why = test::no_gpu(); !why.empty())
      GTEST_SKIP() << "CUDA cases skipped: " << why;
    device_ = Device{Device::Kind::kCuda, 0};
  }
};
TEST_P(ParallelLoopOnGpu, Ulysses2) {
  check(layout(1, false, 2, 1));
}
TEST_P(ParallelLoopOnGpu, Ring2) {
  check(layout(1, false, 1, 2));
}
TEST_P(ParallelLoopOnGpu, PipeFusion2With2PatchesFullWarmup) {
  check(layout(1, false, 1, 1, 2, 2, 3));
}
TEST_P(ParallelLoopOnGpu, CfgParallel) {
  check(layout(1, true, 1, 1));
}
TEST_P(ParallelLoopOnGpu, DataParallel2) {
  check(layout(2, false, 1, 1));
}
TEST_P(ParallelLoopOnGpu, Ulysses2With7Rows) {  // uneven shares: key masks on the device
  check(layout(1, false, 2, 1), 7);
}
TEST_P(ParallelLoopOnGpu, Ring2With7Rows) {
  check(layout(1, false, 1, 2), 7);
}
TEST_P(ParallelLoopOnGpu, PatchDisplaced2FullSync) {
  check(patch(1, false, 2, true));
}
TEST_P(ParallelLoopOnGpu, TensorParallel2) {
  check(tensor(layout(1, false, 1, 1), 2));
}
TEST_P(ParallelLoopOnGpu, UlyssesTimesRing) {
  check(layout(1, false, 2, 2));
}
TEST_P(ParallelLoopOnGpu, PipeFusionTimesRingFullWarmup) {
  check(layout(1, false, 1, 2, 2, 2, 3));
}
INSTANTIATE_TEST_SUITE_P(Models, ParallelLoopOnGpu,
                         testing::Values("pixart-sigma", "flux-dev", "sd3"),
                         test::model_param_name);

// Whole images (text encoders, loop, VAE — the parallel VAE's bands too) on
// the GPU under u2, r2 and pp2 equal the CPU's serial image within 1/255.
TEST(ParallelImagesOnGpu, EqualTheCpuSerialImage) {
  if (const std::string why = test::no_gpu(); !why.empty())
    GTEST_SKIP() << "CUDA cases skipped: " << why;
  if (world().size() != 2) GTEST_SKIP() << "the layouts here take 2 ranks, not " << world().size();
  pipeline::ImageRequest r;
  r.prompts = {"a red fox in the snow", "two boats"};
  r.height = 128;
  r.width = 96;
  r.num_inference_steps = 3;
  r.seed = 7;
  pipeline::Pipeline cpu(kSigma, DType::kF32);
  const pipeline::ImageResult want = cpu.generate(r);
  ParallelConfig vae = layout(1, false, 2, 1);
  vae.use_parallel_vae = true;
  for (const ParallelConfig& pc :
       {layout(1, false, 2, 1), layout(1, false, 1, 2), layout(1, false, 1, 1, 2, 2, 3), vae}) {
    SCOPED_TRACE(pc.describe());
    parallel::Mesh mesh(pc, world());
    pipeline::Pipeline gpu(kSigma, DType::kF32);
    gpu.set_mesh(&mesh);
    gpu.set_device(Device{Device::Kind::kCuda, 0});
    const pipeline::ImageResult got = pipeline::generate_distributed(gpu, mesh, r);
    ASSERT_EQ(got.rgb.size(), want.rgb.size());
    for (size_t i = 0; i < want.rgb.size(); ++i)
      EXPECT_LE(test::worst_pixel_difference(got.rgb[i], want.rgb[i]), 1)
          << "image " << i << ": levels apart on rank " << world().rank();
  }
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
    Tensor x = g.randn({2, 4, 1, 16, 12}), text = g.randn({2, 7, cfg.caption_channels});
    models::DiTInputs in;
    models::Conditioning cond;
    cond.set(models::kText, text);
    in.latents = &x;
    in.timesteps = {999.0f, 3.0f};
    in.cond = &cond;
    Tensor whole = serial.forward(in);
    const int64_t rows = 8 / n;  // 8 patch rows
    in.row_begin = mesh.coord().sp * rows;
    in.row_end = in.row_begin + rows;
    Tensor part = sliced.forward(in);
    ASSERT_EQ(part.shape(), (Shape{2, 8, rows * 2, 12}));
    std::vector<float> want;
    for (int64_t bc = 0; bc < 2 * 8; ++bc)
      for (int64_t y = in.row_begin * 2; y < in.row_end * 2; ++y)
        for (int64_t xx = 0; xx < 12; ++xx)
          want.push_back(whole.data<float>()[(bc * 16 + y) * 12 + xx]);
    EXPECT_LE(test::rel_max_err(part.to_vector(), want), 1e-4) << "ulysses " << u;
  }
}

// The row split and the gathers on the token rows of latents with frames
// ([2, 3, F = 3, 10, 8], patch 2: 15 token rows, 5 per frame): the shares,
// even and then uneven (patch weights), cross frames; gathered they are the
// whole, bit for bit.
TEST(ParallelForward, TokenRowSharesGatherAcrossFrames) {
  const int n = world().size();
  const int64_t p = 2, rows = 15;
  const Tensor whole = Tensor::from_vector(test::randn(2 * 3 * 3 * 10 * 8, 9), {2, 3, 3, 10, 8});
  for (const bool uneven : {false, true}) {
    parallel::Mesh mesh(layout(1, false, 1, n), world());
    if (uneven) {
      std::vector<double> w;
      for (int k = 0; k < n; ++k) w.push_back(1.0 + 0.7 * k);
      mesh.set_patch_weights(w);
    }
    parallel::ParallelRuntime rt(&mesh, p);
    rt.set_grid_width(8 / p);
    const auto [r0, r1] = rt.my_rows(0, rows);
    const Tensor mine = parallel::take_rows(whole, r0 * p, r1 * p);
    const Tensor got = rt.gather(mine, false, 0, rows);
    ASSERT_EQ(got.shape(), (Shape{2, 3, 30, 8})) << "uneven " << uneven;
    EXPECT_EQ(0, std::memcmp(got.raw(), whole.raw(), whole.nbytes())) << "uneven " << uneven;
    // The same through the gather itself, with every rank's latent rows.
    std::vector<int64_t> counts = mesh.config().row_split(rows);
    for (int64_t& c : counts) c *= p;
    const Tensor again = parallel::gather_rows(mesh.sp_group(), mine, counts);
    EXPECT_EQ(0, std::memcmp(again.raw(), whole.raw(), whole.nbytes())) << "uneven " << uneven;
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
  // Rows that do not divide split unevenly; fewer rows than ranks cannot.
  EXPECT_NO_THROW(layout(1, false, 1, 3).validate_request(16, 64, true));
  EXPECT_NE(message([] {
              layout(1, false, 2, 2).validate_request(16, 3, true);
            }).find("3 rows of patches, fewer than the sequence-parallel degree 4"),
            std::string::npos);
  EXPECT_NE(message([] {
              layout(1, true, 1, 1).validate_request(16, 64, false);
            }).find("--use_cfg_parallel needs"),
            std::string::npos);
  EXPECT_NE(
      message([] { layout(3, false, 1, 1).validate_prompts(2); }).find("more than the 2 prompts"),
      std::string::npos);
  // Patch parallelism takes the rows itself; its degree counts in the product.
  EXPECT_NE(message([] {
              ParallelConfig c = patch(1, false, 2, false);
              c.ulysses_degree = 2;
              c.validate(4);
            }).find("does not combine with --ulysses_degree"),
            std::string::npos);
  EXPECT_NE(message([] { patch(1, true, 2, false).validate(2); }).find("multiply to 4"),
            std::string::npos);
  EXPECT_NE(message([] {
              ParallelConfig c = patch(1, false, 2, false);
              c.patch_mode = "sideways";
              c.validate(2);
            }).find("--patch_mode must be displaced"),
            std::string::npos);
  EXPECT_NE(message([] {
              weighted(layout(1, false, 2, 1), {1, 0}).validate(2);
            })
                .find("--patch_weights must be numbers in 0.001 … 1000 (relative speeds of the "
                      "ranks), got 0"),
            std::string::npos);
  EXPECT_NE(message([] {
              weighted(layout(1, false, 2, 1), {1, 2, 3}).validate(2);
            }).find("--patch_weights has 3 weights but there are 2 ranks"),
            std::string::npos);
  EXPECT_NE(message([] {
              auto_weighted(layout(1, false, 1, 1, 2)).validate(2);
            }).find("--patch_weights auto calibrates the ranks that split the rows"),
            std::string::npos);
  EXPECT_NE(message([] {
              auto_weighted(weighted(layout(1, false, 2, 1), {1, 2})).validate(2);
            }).find("is either auto, dynamic or numbers"),
            std::string::npos);
  // And through the pipeline, before any weights load.
  ParallelConfig pc = layout(1, false, world().size(), 1);
  parallel::Mesh mesh(pc, world());
  pipeline::Pipeline p(kAlpha, DType::kF32);  // 3 heads
  p.set_mesh(&mesh);
  auto req = request(p);
  const std::string m = message([&] { p.plan(req); });
  EXPECT_NE(m.find("not divisible by --ulysses_degree"), std::string::npos) << m;
}

// The calibration itself: a rank three times slower per row gets about a
// third of the weight; time spent waiting inside the SP group's
// communication (here a barrier behind the slow rank) does not count.
TEST(Calibration, ASlowerRankGetsProportionallyFewerRows) {
  const int n = world().size();
  ParallelConfig pc = patch(1, false, n, true);
  parallel::Mesh mesh(pc, world());
  const int64_t rows = 4 * n;
  const parallel::Calibration c =
      parallel::calibrate_weights(mesh, rows, [&](int64_t b, int64_t e) {
        const int per_row_ms = world().rank() == 1 ? 30 : 10;
        std::this_thread::sleep_for(std::chrono::milliseconds(per_row_ms * (e - b)));
        mesh.sp_group().barrier();
      });
  ASSERT_EQ(c.weights.size(), static_cast<size_t>(n));
  ASSERT_EQ(c.compute_seconds.size(), static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) {
    if (k == 1)
      EXPECT_NEAR(c.weights[1], 1.0 / 3, 0.1) << c.describe();
    else
      EXPECT_NEAR(c.weights[static_cast<size_t>(k)], 1.0, 0.1) << c.describe();
  }
  // The rows then follow the weights: the slow rank takes about a third.
  pc.patch_weights = c.weights;
  const auto counts = pc.row_split(rows);
  EXPECT_LT(counts[1], counts[0]) << c.describe();
}

}  // namespace
}  // namespace xdit
