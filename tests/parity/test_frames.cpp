// The frame axis (docs/ARCHITECTURE.md, "The frame axis"): latents are
// [B, C, F, H, W] and split by token rows, frame-major. Slices of token rows
// that cross frames are taken and put back exactly; guidance works on any
// shape; the image models take one frame and refuse more with one line
// before anything loads; the decoder decodes frame by frame; results carry
// the frames through the data-parallel exchange and the writer's names.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/rng.h"
#include "io/file.h"
#include "io/model_folder.h"
#include "io/weights.h"
#include "parallel/gather.h"
#include "pipeline/distributed.h"
#include "pipeline/guidance/cfg.h"
#include "pipeline/pipeline.h"
#include "test_util.h"

namespace xdit {
namespace {

// Element (b, c, frame-major latent row r, x) of [B, C, F, H, W].
float at(const Tensor& t, int64_t b, int64_t c, int64_t r, int64_t x) {
  const int64_t C = t.dim(1), H = t.dim(2) * t.dim(3), W = t.dim(4);
  return t.data<float>()[((b * C + c) * H + r) * W + x];
}

TEST(TokenRows, TakeRowsAcrossFramesReadsFrameMajorRows) {
  // Patch 2: token row t = latent rows [2t, 2t + 2) of the F·H = 30 rows;
  // token rows [3, 8) cross frame 0's end (token row 5).
  const Tensor t = Tensor::from_vector(test::randn(2 * 3 * 3 * 10 * 7, 3), {2, 3, 3, 10, 7});
  EXPECT_EQ(parallel::latent_rows(t.shape()), 30);
  const Tensor s = parallel::take_rows(t, 6, 16);
  ASSERT_EQ(s.shape(), (Shape{2, 3, 10, 7}));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t r = 0; r < 10; ++r)
        for (int64_t x = 0; x < 7; ++x)
          ASSERT_EQ(s.data<float>()[((b * 3 + c) * 10 + r) * 7 + x], at(t, b, c, 6 + r, x))
              << "b " << b << " c " << c << " row " << r << " x " << x;
}

TEST(TokenRows, PutRowsOfUnevenSlicesRebuildsTheLatents) {
  const Tensor t = Tensor::from_vector(test::randn(2 * 3 * 3 * 10 * 7, 4), {2, 3, 3, 10, 7});
  Tensor rebuilt = Tensor::zeros(t.shape());
  // Uneven slices of the 30 frame-major rows, two of them across frames.
  for (const auto& [r0, r1] :
       std::vector<std::pair<int64_t, int64_t>>{{0, 6}, {6, 16}, {16, 17}, {17, 29}, {29, 30}})
    parallel::put_rows(rebuilt, parallel::take_rows(t, r0, r1), r0);
  EXPECT_EQ(0, std::memcmp(rebuilt.raw(), t.raw(), t.nbytes()));
  // One frame: the rows of [B, C, 1, H, W] are those of [B, C, H, W].
  const Tensor one = Tensor::from_vector(test::randn(2 * 3 * 9 * 5, 5), {2, 3, 1, 9, 5});
  const Tensor four = one.reshape({2, 3, 9, 5});
  const Tensor a = parallel::take_rows(one, 2, 7), b = parallel::take_rows(four, 2, 7);
  EXPECT_EQ(a.shape(), b.shape());
  EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes()));
  EXPECT_THROW(parallel::put_rows(rebuilt, a, 0), Error) << "a slice of other latents";
}

TEST(GuidedNoise, AnyTrailingShapeGivesTheSameValues) {
  // [2P, out_channels, F, h, w] with learned sigma: the same values as the
  // token-row layout [2P, out_channels, F·h, w], shaped [P, C, F, h, w].
  const Tensor out = Tensor::from_vector(test::randn(4 * 8 * 3 * 5 * 7, 6), {4, 8, 3, 5, 7});
  const pipeline::CfgGuider cfg({});
  const Tensor a = cfg.noise(out, 2, 4, {}, {true, 4.5}, 0);
  const Tensor b = cfg.noise(out.reshape({4, 8, 15, 7}), 2, 4, {}, {true, 4.5}, 0);
  ASSERT_EQ(a.shape(), (Shape{2, 4, 3, 5, 7}));
  EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes()));
  const float u = at(out, 1, 2, 11, 3), c = at(out, 3, 2, 11, 3);
  EXPECT_NEAR(at(a, 1, 2, 11, 3), u + 4.5f * (c - u), 1e-5f * (1 + std::fabs(u + 4.5f * (c - u))));
}

// Random embeddings for one prompt of a tiny model (as test_denoiser's).
pipeline::LatentRequest request(const pipeline::Pipeline& p) {
  pipeline::LatentRequest r;
  TorchGenerator gen(11);
  r.cond.set(models::kText, gen.randn({1, 6, p.family().text_width()}));
  if (p.family().pooled_width() > 0)
    r.cond.set(models::kPooled, gen.randn({1, p.family().pooled_width()}));
  r.height = 80;
  r.width = 48;
  r.num_inference_steps = 2;
  r.guidance_scale = 1.0;
  return r;
}

TEST(ImageModels, RefuseSeveralFramesWithOneLine) {
  for (const char* name : {"pixart-alpha-tiny", "flux-schnell-tiny", "sd3-tiny"}) {
    const std::string dir = std::string(XDIT_MODELS) + "/" + name;
    pipeline::Pipeline p(dir, DType::kF32);
    const int64_t C = p.spec().latent_channels, h = 80 / p.vae_scale_factor(),
                  w = 48 / p.vae_scale_factor();
    // Before anything loads: the request's latents.
    pipeline::LatentRequest r = request(p);
    r.latents = TorchGenerator(3).randn({1, C, 3, h, w});
    const std::string m = test::error_message([&] { p.generate_latents(r); });
    EXPECT_NE(m.find("makes images"), std::string::npos) << name << ": " << m;
    EXPECT_NE(m.find("got 3 frames"), std::string::npos) << name << ": " << m;
    // A 4-D request is one frame: it is planned, shaped [P, C, 1, h, w].
    r.latents = TorchGenerator(3).randn({1, C, h, w});
    EXPECT_EQ(p.plan(r)->latents.shape(), (Shape{1, C, 1, h, w})) << name;
    // The model itself, called directly.
    io::ModelFolder folder(dir);
    io::WeightStore weights(folder.component("transformer"));
    auto model =
        pipeline::ModelFamily::from_folder(folder)->make_transformer(weights, DType::kF32, {});
    const Tensor three = TorchGenerator(4).randn({1, C, 3, h, w});
    models::DiTInputs in;
    in.latents = &three;
    const std::string d = test::error_message([&] { model->forward(in); });
    EXPECT_NE(d.find("makes images"), std::string::npos) << name << ": " << d;
    const Tensor four = TorchGenerator(4).randn({1, C, h, w});
    in.latents = &four;
    const std::string e = test::error_message([&] { model->forward(in); });
    EXPECT_NE(e.find("F, H, W]"), std::string::npos) << name << ": " << e;
  }
}

TEST(Decoder, DecodesFrameByFrame) {
  pipeline::Pipeline p(std::string(XDIT_MODELS) + "/pixart-alpha-tiny", DType::kF32);
  pipeline::ImageRequest probe;
  probe.prompts = {"x"};
  probe.height = 48;
  probe.width = 32;
  probe.resolution_binning = false;
  p.plan(probe);  // opens the VAE
  // Odd latent sizes: the decoder takes any.
  const int64_t B = 2, F = 3, h = 7, w = 5;
  const Tensor z = TorchGenerator(8).randn({B, 4, F, h, w});
  const Tensor frames = p.decode_latents(z);
  ASSERT_EQ(frames.ndim(), 4);
  ASSERT_EQ(frames.dim(0), B * F);
  const int64_t per = frames.numel() / (B * F);
  for (int64_t f = 0; f < F; ++f) {
    // Frame f of both items, decoded as one-frame latents.
    Tensor one = Tensor::empty({B, 4, 1, h, w});
    for (int64_t bc = 0; bc < B * 4; ++bc)
      std::memcpy(one.data<float>() + bc * h * w, z.data<float>() + (bc * F + f) * h * w,
                  static_cast<size_t>(h * w) * 4);
    const Tensor image = p.decode_latents(one);
    ASSERT_EQ(image.numel(), B * per);
    for (int64_t b = 0; b < B; ++b)
      EXPECT_EQ(0, std::memcmp(frames.data<float>() + (b * F + f) * per,
                               image.data<float>() + b * per, static_cast<size_t>(per) * 4))
          << "item " << b << " frame " << f;
  }
}

TEST(ImageResult, FramesCrossTheDataParallelExchange) {
  pipeline::ImageResult r;
  r.frames = 3;
  r.width = 5;
  r.height = 3;
  for (int i = 0; i < 2 * 3; ++i) {  // two prompts of three frames
    std::vector<uint8_t> px(5 * 3 * 3);
    for (size_t k = 0; k < px.size(); ++k) px[k] = static_cast<uint8_t>(i * 40 + k);
    r.rgb.push_back(px);
  }
  const auto one = comm::make_single();
  const auto all = pipeline::gather_results(*one, r);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].frames, 3);
  EXPECT_EQ(all[0].width, 5);
  EXPECT_EQ(all[0].height, 3);
  EXPECT_EQ(all[0].rgb, r.rgb);
}

TEST(Writer, OneFileNamePerFrame) {
  using V = std::vector<std::string>;
  // One frame per prompt: the names images always had.
  EXPECT_EQ(io::output_paths("out.png", 1), V{"out.png"});
  EXPECT_EQ(io::output_paths("d/out.png", 2), (V{"d/out_0.png", "d/out_1.png"}));
  // Several frames: one PNG per frame.
  EXPECT_EQ(io::output_paths("d/out.png", 1, 3),
            (V{"d/out_f0000.png", "d/out_f0001.png", "d/out_f0002.png"}));
  EXPECT_EQ(io::output_paths("out.png", 2, 2),
            (V{"out_0_f0000.png", "out_0_f0001.png", "out_1_f0000.png", "out_1_f0001.png"}));
}

}  // namespace
}  // namespace xdit
