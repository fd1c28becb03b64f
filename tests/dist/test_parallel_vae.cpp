// The patch-parallel VAE decoder (--use_parallel_vae) under mpirun: every
// rank decodes a band of latent rows (halo rows from its neighbours,
// GroupNorm statistics summed in f64, the mid-block attention as Ring
// attention over the bands) and all ranks return the whole image. Against
// the serial decoder in the same process, for both VAE layouts (the SD /
// PixArt VAE with post_quant_conv, 4 channels; FLUX / SD3's, 16 channels,
// shift; Wan's causal video decoder), even and odd band heights, weighted
// bands, and every band count from 2 to the world size; then through the pipeline with CFG
// parallel, data parallel, patch parallelism, and Ring and PipeFusion, where it is on by default on
// the CPU.
#include <gtest/gtest.h>

#include <numeric>
#include <optional>

#include "core/rng.h"
#include "dist/world.h"
#include "io/json.h"
#include "io/model_folder.h"
#include "kernels/kernels.h"
#include "models/vae.h"
#include "models/wan_vae.h"
#include "parallel/config.h"
#include "parallel/split.h"
#include "parallel/vae_bands.h"
#include "pipeline/distributed.h"
#include "test_util.h"

namespace xdit {
namespace {

using test::world;

struct VaeCase {
  std::string name, dir;
};

std::vector<VaeCase> vae_cases() {
  return {{"sd_vae_4ch", std::string(XDIT_MODELS) + "/pixart-alpha-tiny/vae"},
          {"flux_vae_16ch", std::string(XDIT_TEST_DATA) + "/vae16"}};
}

// Runs `body` on the first `n` ranks of the world with a group of them (the
// others get a one-rank group and are not asked to check anything).
void on_group(int n, const std::function<void(comm::Communicator&)>& body) {
  comm::Communicator& w = world();
  const bool in = w.rank() < n;
  auto g = w.split(in ? 0 : 1 + w.rank(), w.rank());
  if (in) body(*g);
  w.barrier();
}

TEST(ParallelVae, EqualsTheSerialDecoderForEveryBandCountAndHeight) {
  for (const auto& vc : vae_cases()) {
    auto cfg = models::VaeConfig::from_json(io::read_json_file(vc.dir + "/config.json"), vc.dir);
    io::WeightStore weights(vc.dir);
    models::VaeDecoder vae(cfg, weights, DType::kF32);
    // Odd and even heights, a non-square width, two batch items.
    for (int64_t h : {7, 8}) {
      TorchGenerator g(static_cast<uint64_t>(100 + h));
      const Tensor z = g.randn({2, cfg.latent_channels, h, 5});
      const Tensor serial = vae.decode_latents(z);
      for (int n = 2; n <= world().size(); ++n)
        on_group(n, [&](comm::Communicator& group) {
          parallel::VaeBands bands(group, parallel::row_counts(h, n));
          const Tensor img = vae.decode_latents(z, &bands);
          ASSERT_EQ(img.shape(), serial.shape());
          EXPECT_LE(test::rel_max_err(img.to_vector(), serial.to_vector()), 1e-5)
              << vc.name << ", " << h << " latent rows over " << n << " bands";
        });
    }
  }
}

// AutoencoderKLWan in bands: every frame's band with halo rows through the
// causal convolutions (each rank walks the same frames, so each band keeps
// its own history), per-pixel RMS norms, the per-frame attention over every
// band's tokens, each output frame gathered: 3 latent frames (9 frames) of
// 7 or 8 latent rows, two batch items, every band count. f32: the serial
// video; bf16 layers: about as close to the f32 video as the serial bf16 one
// (within 1.5 times its error: the bands' convolutions may pick other
// algorithms, whose bf16 roundings differ, and nine causal frames carry them).
// Wan2.1's VAE and Wan2.2's (residual up blocks with their pixel-local
// shortcuts, 16x space, conv_out's patches unpatchified after the gather),
// and Qwen-Image's (Wan2.1's under its own class name).
class ParallelWanVae : public testing::TestWithParam<std::string> {};

TEST_P(ParallelWanVae, VideoDecoderEqualsTheSerialOneForEveryBandCount) {
  // (Qwen-Image's AutoencoderKLQwenImage: Wan2.1's decoder, from the tiny pipeline)
  const std::string dir = GetParam() == "qwen-image"
                              ? std::string(XDIT_MODELS) + "/qwen-image-tiny/vae"
                              : std::string(XDIT_TEST_DATA) + "/" + GetParam() + "/vae";
  const auto cfg = models::WanVaeConfig::from_json(io::read_json_file(dir + "/config.json"), dir);
  io::WeightStore weights(dir);
  models::WanVaeDecoder f32(cfg, weights, DType::kF32);
  std::optional<models::WanVaeDecoder> bf16;
  if (kernels::cpu_has_bf16())
    bf16.emplace(cfg, weights, DType::kBF16);
  else
    std::printf("[  SKIPPED ] bf16 case: no native bf16 on this CPU\n");
  for (int64_t h : {7, 8}) {
    TorchGenerator g(static_cast<uint64_t>(200 + h));
    const Tensor z = g.randn({2, cfg.z_dim, 3, h, 5});
    const Tensor serial = f32.decode_latents(z);
    const Tensor serial_bf16 = bf16 ? bf16->decode_latents(z) : Tensor();
    const double bf16_noise =
        bf16 ? test::rel_max_err(serial_bf16.to_vector(), serial.to_vector()) : 0;
    for (int n = 2; n <= world().size(); ++n)
      on_group(n, [&](comm::Communicator& group) {
        parallel::VaeBands bands(group, parallel::row_counts(h, n));
        const Tensor video = f32.decode_latents(z, &bands);
        ASSERT_EQ(video.shape(), serial.shape());
        EXPECT_LE(test::rel_max_err(video.to_vector(), serial.to_vector()), 1e-5)
            << h << " latent rows over " << n << " bands";
        if (!bf16) return;
        EXPECT_LE(
            test::rel_max_err(bf16->decode_latents(z, &bands).to_vector(), serial.to_vector()),
            1.5 * bf16_noise)
            << h << " latent rows over " << n << " bands, bf16 (bf16 against f32: " << bf16_noise
            << ")";
      });
  }
}

INSTANTIATE_TEST_SUITE_P(Versions, ParallelWanVae, testing::Values("wan", "wan22", "qwen-image"),
                         test::model_param_name);

// Uneven bands (a slower rank takes fewer rows): one row against the rest.
TEST(ParallelVae, WeightedBandsEqualTheSerialDecoder) {
  const auto vc = vae_cases()[0];
  auto cfg = models::VaeConfig::from_json(io::read_json_file(vc.dir + "/config.json"), vc.dir);
  io::WeightStore weights(vc.dir);
  models::VaeDecoder vae(cfg, weights, DType::kF32);
  TorchGenerator g(7);
  const int64_t h = 9;
  const Tensor z = g.randn({1, cfg.latent_channels, h, 6});
  const Tensor serial = vae.decode_latents(z);
  const int n = world().size();
  std::vector<double> w(static_cast<size_t>(n), 1.0);
  w[0] = 0.01;  // rank 0 is "slow": one row
  const auto rows = parallel::row_counts(h, w);
  ASSERT_EQ(rows[0], 1);
  parallel::VaeBands bands(world(), rows);
  EXPECT_LE(test::rel_max_err(vae.decode_latents(z, &bands).to_vector(), serial.to_vector()), 1e-5);
}

// bf16 layers: the same products on each band; the GroupNorm sums differ in
// order only, so the image stays within a few bf16 roundings of the serial one.
TEST(ParallelVae, Bf16StaysCloseToTheSerialDecoder) {
  if (!kernels::cpu_has_bf16()) GTEST_SKIP() << "no native bf16 on this CPU";
  const auto vc = vae_cases()[1];
  auto cfg = models::VaeConfig::from_json(io::read_json_file(vc.dir + "/config.json"), vc.dir);
  io::WeightStore weights(vc.dir);
  models::VaeDecoder vae(cfg, weights, DType::kBF16);
  TorchGenerator g(11);
  const Tensor z = g.randn({1, cfg.latent_channels, 7, 5});
  const Tensor serial = vae.decode_latents(z);
  parallel::VaeBands bands(world(), parallel::row_counts(7, world().size()));
  EXPECT_LE(test::rel_max_err(vae.decode_latents(z, &bands).to_vector(), serial.to_vector()), 2e-2);
}

// A band thinner than the halo cannot be made; the pipeline refuses it
// before anything loads (ParallelConfig::vae_rows).
TEST(ParallelVae, TooFewLatentRowsForTheRanksIsOneLine) {
  parallel::ParallelConfig c;
  c.patch_parallel_degree = world().size();
  c.use_parallel_vae = true;
  ASSERT_TRUE(c.parallel_vae());
  EXPECT_EQ(c.vae_rows(world().size()).size(), static_cast<size_t>(world().size()));
  try {
    c.vae_rows(world().size() - 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--use_parallel_vae: the VAE cannot be split"), std::string::npos) << m;
    EXPECT_NE(m.find("halo"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // Off by default without patch parallelism; on by default with it.
  parallel::ParallelConfig u;
  u.ulysses_degree = world().size();
  EXPECT_FALSE(u.parallel_vae());
  c.use_parallel_vae.reset();
  EXPECT_TRUE(c.parallel_vae());
  c.use_parallel_vae = false;
  EXPECT_FALSE(c.parallel_vae());
}

// Prompts → images through the pipeline on `pc`: the image is the serial
// run's (the layouts are exact), and the decode did (`bands`) or did not
// exchange halos over the replica.
void expect_pipeline_image_equals_serial(const std::string& name,
                                         const parallel::ParallelConfig& pc, bool bands = true,
                                         const std::string& tiny = "pixart-alpha-tiny") {
  const std::string model = std::string(XDIT_MODELS) + "/" + tiny;
  pipeline::ImageRequest r;
  if (tiny == "wan21-tiny") r.num_frames = 9;  // 3 latent frames
  r.prompts = {"a red fox in the snow", "a lighthouse at dusk"};
  r.height = 80;  // 10 latent rows: uneven bands over 3 or 4 ranks
  r.width = 48;
  r.num_inference_steps = 2;
  r.guidance_scale = 4.5;
  r.seed = 5;
  r.resolution_binning = false;
  pipeline::Pipeline serial(model, DType::kF32);
  const pipeline::ImageResult want = serial.generate(r);
  parallel::Mesh mesh(pc, world());
  pipeline::Pipeline p(model, DType::kF32);
  p.set_mesh(&mesh);
  const pipeline::ImageResult got = pipeline::generate_distributed(p, mesh, r);
  if (bands)
    EXPECT_GT(mesh.replica_group().stats().bytes_sent, 0u)
        << name << ": the decode exchanged nothing over the replica";
  else
    EXPECT_EQ(mesh.replica_group().stats().bytes_sent, 0u)
        << name << ": the decode ran in bands where it was turned off";
  ASSERT_EQ(got.rgb.size(), want.rgb.size()) << name;
  for (size_t i = 0; i < want.rgb.size(); ++i)
    EXPECT_LE(test::worst_pixel_difference(got.rgb[i], want.rgb[i]), 1) << name << " image " << i;
}

TEST(ParallelVae, PipelineWithCfgAndDataParallelEqualsTheSerialRun) {
  const int n = world().size();
  if (n % 2 != 0) GTEST_SKIP() << "CFG parallel needs an even number of ranks, not " << n;
  parallel::ParallelConfig c;
  c.use_cfg_parallel = true;
  c.data_parallel_degree = n / 2;  // at 4 ranks: two replicas of two
  c.use_parallel_vae = true;
  expect_pipeline_image_equals_serial("cfg2 x dp" + std::to_string(n / 2) + " --use_parallel_vae",
                                      c);
}

// On the CPU the ranks of a replica decode in bands unless told not to
// (they would otherwise each decode the whole image on shared cores).
TEST(ParallelVae, OnByDefaultOnTheCpuUnderEveryLayout) {
  const int n = world().size();
  parallel::ParallelConfig ring;
  ring.ring_degree = n;
  expect_pipeline_image_equals_serial("ring" + std::to_string(n), ring);
  if (n % 2 == 0) {               // the tiny model's 2 blocks over 2 stages
    parallel::ParallelConfig pf;  // warmed up on every step: exact
    pf.pipefusion_parallel_degree = 2;
    pf.ring_degree = n / 2;
    pf.warmup_steps = 2;
    expect_pipeline_image_equals_serial("pipefusion 2 x ring " + std::to_string(n / 2), pf);
  }
  ring.use_parallel_vae = false;
  expect_pipeline_image_equals_serial("ring, --use_parallel_vae=false", ring, false);
  ring.use_parallel_vae.reset();
  expect_pipeline_image_equals_serial("wan21 ring" + std::to_string(n), ring, true, "wan21-tiny");
}

TEST(ParallelVae, OnByDefaultUnderPatchParallelism) {
  parallel::ParallelConfig c;  // full sync: the denoising is exact
  c.patch_parallel_degree = world().size();
  c.full_sync = true;
  expect_pipeline_image_equals_serial("patch" + std::to_string(world().size()) + " full_sync", c);
}

}  // namespace
}  // namespace xdit
