// The guiders (pipeline/guidance/): each one's decision to take both
// predictions, its scale per expert, its combination of the transformer's
// output into the step's noise — checked against the formulas of the
// diffusers pipelines, written out here in double on random outputs of odd
// shapes with learned sigma — and its plan-time checks. The families' whole
// runs through them match diffusers in their pipeline tests.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/kernels.h"
#include "pipeline/guidance/cfg.h"
#include "pipeline/guidance/skip_layer.h"
#include "pipeline/guidance/true_cfg.h"
#include "pipeline/guidance/zimage_cfg.h"
#include "test_util.h"

namespace xdit {
namespace {

using pipeline::GuidanceLayout;
using pipeline::GuidanceSettings;

// [2P, OC, F, h, w]: uncond then cond, OC = 2C (learned sigma), odd sizes.
constexpr int64_t kP = 2, kC = 4, kOC = 8, kF = 3, kH = 6, kW = 10;

Tensor random_out(uint64_t seed) {
  return Tensor::from_vector(test::randn(2 * kP * kOC * kF * kH * kW, seed),
                             {2 * kP, kOC, kF, kH, kW});
}

// The first C channels of item b of half `half` (0: uncond, 1: cond), flat.
std::vector<double> half_plane(const Tensor& out, int half, int64_t b) {
  const int64_t hw = kF * kH * kW;
  const float* p = out.data<float>() + ((half * kP + b) * kOC) * hw;
  return {p, p + kC * hw};
}

std::vector<double> item(const Tensor& noise, int64_t b) {
  const int64_t plane = kC * kF * kH * kW;
  const float* p = noise.data<float>() + b * plane;
  return {p, p + plane};
}

double norm(const std::vector<double>& v) {
  double s = 0;
  for (const double x : v) s += x * x;
  return std::sqrt(s);
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << "at " << i;
}

// uncond + g·(cond − uncond) of item b, in double.
std::vector<double> combined(const Tensor& out, int64_t b, double g) {
  const auto u = half_plane(out, 0, b), c = half_plane(out, 1, b);
  std::vector<double> r(u.size());
  for (size_t i = 0; i < u.size(); ++i) r[i] = u[i] + g * (c[i] - u[i]);
  return r;
}

TEST(CfgGuider, CombinesBothHalvesAboveOneAndTheExpertsScale) {
  const pipeline::CfgGuider cfg({.default_guidance = 4.5});
  GuidanceSettings s;
  s.guidance_scale = 1.0;
  EXPECT_FALSE(cfg.two_predictions(s)) << "guidance_scale 1: the cond prediction alone";
  s.guidance_scale = 1.01;
  EXPECT_TRUE(cfg.two_predictions(s));
  s.guidance_scale = 3.25;
  s.guidance_scale_2 = 6.5;
  EXPECT_EQ(cfg.scale(s, 0), 3.25);
  EXPECT_EQ(cfg.scale(s, 1), 6.5) << "Wan2.2's transformer_2 at guidance_scale_2";
  EXPECT_EQ(cfg.default_guidance(), 4.5);
  const Tensor out = random_out(1);
  const Tensor noise = cfg.noise(out, kP, kC, s, {true, 3.25}, 500);
  ASSERT_EQ(noise.shape(), (Shape{kP, kC, kF, kH, kW}));
  for (int64_t b = 0; b < kP; ++b) expect_close(item(noise, b), combined(out, b, 3.25), 1e-5);
  // Without CFG the batch is the cond half alone: its first C channels.
  const Tensor cond =
      Tensor::from_vector(test::randn(kP * kOC * kF * kH * kW, 2), {kP, kOC, kF, kH, kW});
  const Tensor plain = cfg.noise(cond, kP, kC, s, {false, 3.25}, 500);
  for (int64_t b = 0; b < kP; ++b) {
    const float* c = cond.data<float>() + b * kOC * kF * kH * kW;
    expect_close(item(plain, b), std::vector<double>(c, c + kC * kF * kH * kW), 0);
  }
}

TEST(TrueCfgGuider, NeedsANegativePromptAndRescalesQwenImagesTokens) {
  const pipeline::TrueCfgGuider flux(
      {.default_guidance = 3.5, .unused_prefix = "", .unused_suffix = ""});
  GuidanceSettings s;
  s.guidance_scale = 3.5;
  s.true_cfg_scale = 2.5;
  EXPECT_FALSE(flux.two_predictions(s)) << "no negative prompt: true CFG off";
  s.negative = true;
  EXPECT_TRUE(flux.two_predictions(s));
  s.true_cfg_scale = 1.0;
  EXPECT_FALSE(flux.two_predictions(s));
  s.true_cfg_scale = 2.5;
  EXPECT_EQ(flux.scale(s, 0), 2.5) << "true_cfg_scale, not guidance_scale";
  EXPECT_TRUE(flux.calls_apart());
  const Tensor out = random_out(3);
  const Tensor plain = flux.noise(out, kP, kC, s, {true, 2.5}, 500);
  for (int64_t b = 0; b < kP; ++b) expect_close(item(plain, b), combined(out, b, 2.5), 1e-5);

  // Qwen-Image: each 2 × 2 token's guided noise at its cond prediction's norm.
  const pipeline::TrueCfgGuider qwen(
      {.default_true_cfg = 4.0, .renorm_patch = 2, .unused_prefix = "", .unused_suffix = ""});
  EXPECT_EQ(qwen.default_true_cfg(), 4.0);
  const Tensor renormed = qwen.noise(out, kP, kC, s, {true, 2.5}, 500);
  for (int64_t b = 0; b < kP; ++b) {
    const auto got = item(renormed, b), want = combined(out, b, 2.5), c = half_plane(out, 1, b);
    const int64_t rows = kF * kH;
    for (int64_t r = 0; r < rows; r += 2)
      for (int64_t x = 0; x < kW; x += 2) {
        double gn = 0, cn = 0, wn = 0, dot = 0;
        for (int64_t ch = 0; ch < kC; ++ch)
          for (int64_t dr = 0; dr < 2; ++dr)
            for (int64_t dx = 0; dx < 2; ++dx) {
              const int64_t i = (ch * rows + r + dr) * kW + x + dx;
              gn += got[i] * got[i];
              cn += c[i] * c[i];
              wn += want[i] * want[i];
              dot += got[i] * want[i];
            }
        EXPECT_NEAR(std::sqrt(gn), std::sqrt(cn), 1e-4 * (1 + std::sqrt(cn)))
            << "token (" << r << ", " << x << ") keeps its cond prediction's norm";
        EXPECT_NEAR(dot, std::sqrt(gn * wn), 1e-4 * (1 + gn)) << "and its guided direction";
      }
  }
}

TEST(ZImageGuider, ScalesOnePlusGTruncatesAndCapsTheNorm) {
  const pipeline::ZImageGuider z;
  GuidanceSettings s;
  s.guidance_scale = 0;
  EXPECT_FALSE(z.two_predictions(s)) << "Z-Image's CFG needs guidance_scale > 0";
  s.guidance_scale = 0.5;
  EXPECT_TRUE(z.two_predictions(s));
  EXPECT_EQ(z.scale(s, 0), 1.5) << "ZImagePipeline combines at 1 + guidance_scale";
  const Tensor out = random_out(5);
  // cfg_truncation 0.5: steps with (1000 − t)/1000 > 0.5 take the cond
  // prediction alone (t = 400: 0.6), the others combine (t = 600: 0.4).
  s.cfg_truncation = 0.5;
  const Tensor late = z.noise(out, kP, kC, s, {true, 1.5}, 400);
  const Tensor early = z.noise(out, kP, kC, s, {true, 1.5}, 600);
  for (int64_t b = 0; b < kP; ++b) {
    expect_close(item(late, b), half_plane(out, 1, b), 0);
    expect_close(item(early, b), combined(out, b, 1.5), 1e-5);
  }
  // cfg_normalization 1.05: an item's guided norm at most 1.05 × its cond's,
  // scaled down along itself; one under the cap is left as it is.
  s.cfg_truncation = 1.0;
  s.cfg_normalization = 1.05;
  const Tensor capped = z.noise(out, kP, kC, s, {true, 4.0}, 600);
  for (int64_t b = 0; b < kP; ++b) {
    const auto got = item(capped, b), want = combined(out, b, 4.0);
    const double cn = norm(half_plane(out, 1, b));
    ASSERT_GT(norm(want), 1.05 * cn) << "the case must exceed the cap";
    EXPECT_NEAR(norm(got), 1.05 * cn, 1e-4 * cn);
    const double k = norm(got) / norm(want);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], k * want[i], 1e-4);
  }
  s.cfg_normalization = 100;
  const Tensor loose = z.noise(out, kP, kC, s, {true, 1.5}, 600);
  for (int64_t b = 0; b < kP; ++b) expect_close(item(loose, b), combined(out, b, 1.5), 1e-5);
}

// One line each, naming the knob.
std::string one_line_error(const std::function<void()>& f) {
  const std::string e = test::error_message(f);
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  return e;
}

TEST(Guiders, CheckTheirKnobsInOneLine) {
  const pipeline::CfgGuider cfg({});
  const pipeline::ZImageGuider z;
  GuidanceLayout l;
  l.model = "PixArt-α";
  l.blocks = 4;
  GuidanceSettings s;
  s.guidance_scale = 4.5;
  EXPECT_NO_THROW(cfg.check(s, l));
  s.guidance_scale = -1e-3;
  EXPECT_NE(one_line_error([&] { cfg.check(s, l); }).find("guidance_scale must be"),
            std::string::npos);
  s.guidance_scale = 4.5;
  s.true_cfg_scale = std::nan("");
  EXPECT_NE(one_line_error([&] { cfg.check(s, l); }).find("true_cfg_scale must be"),
            std::string::npos);
  s.true_cfg_scale = 1;
  s.cfg_truncation = 0.5;
  EXPECT_NE(one_line_error([&] { cfg.check(s, l); }).find("are Z-Image's"), std::string::npos)
      << "only Z-Image's guider takes cfg_truncation";
  EXPECT_NO_THROW(z.check(s, l));
  s.cfg_truncation = -0.5;
  EXPECT_NE(one_line_error([&] { z.check(s, l); }).find("cfg_truncation must be"),
            std::string::npos);
  s.cfg_truncation = 1;
  s.cfg_normalization = 1.05;
  l.pipefusion = true;
  EXPECT_NE(one_line_error([&] { z.check(s, l); }).find("not with PipeFusion"), std::string::npos);
  l.pipefusion = false;
  EXPECT_NO_THROW(z.check(s, l));
}

TEST(SkipLayerGuider, TakesSD3sThirdCallOnlyWhereAsked) {
  const pipeline::SkipLayerGuider slg({.default_guidance = 7.0});
  const pipeline::CfgGuider cfg({});
  GuidanceLayout l;
  l.model = "SD3";
  l.blocks = 4;
  GuidanceSettings s;
  s.guidance_scale = 7;
  EXPECT_NO_THROW(slg.check_passes(s, true, l)) << "off: nothing to check";
  EXPECT_EQ(slg.pass_hook(s, [] { return pipeline::LoopInputs{}; }), nullptr);
  s.skip_layers = {{1, 3}, 2.8, 0.01, 0.2};
  EXPECT_NO_THROW(slg.check_passes(s, true, l));
  EXPECT_NE(slg.pass_hook(s, [] { return pipeline::LoopInputs{}; }), nullptr);
  EXPECT_NE(test::error_message([&] {
              cfg.check_passes(s, true, l);
            }).find("is a Stable Diffusion 3 option"),
            std::string::npos);
  s.skip_layers.layers = {4};
  EXPECT_NE(test::error_message([&] { slg.check_passes(s, true, l); }).find("outside the model"),
            std::string::npos);
  s.skip_layers.layers = {1};
  l.patch_parallel = true;
  EXPECT_NE(test::error_message([&] { slg.check_passes(s, true, l); }).find("PipeFusion or patch"),
            std::string::npos);
  // diffusers: i > N·start and i < N·stop (N = 50: steps 1 … 9).
  const pipeline::SkipLayerGuidance on{{1}, 2.8, 0.01, 0.2};
  EXPECT_FALSE(pipeline::SkipGuidanceHook::skips_at(on, 0, 50));
  EXPECT_TRUE(pipeline::SkipGuidanceHook::skips_at(on, 1, 50));
  EXPECT_TRUE(pipeline::SkipGuidanceHook::skips_at(on, 9, 50));
  EXPECT_FALSE(pipeline::SkipGuidanceHook::skips_at(on, 10, 50));
}

}  // namespace
}  // namespace xdit
