// torch.randn with torch.Generator().manual_seed(seed) on CPU, bit for bit
// (goldens from tools/goldens/make_rng.py), and the pipeline's initial noise
// of latents with a frame axis.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "core/rng.h"
#include "io/safetensors.h"
#include "pipeline/denoiser.h"

namespace xdit {
namespace {

const std::string kFile = std::string(XDIT_TEST_DATA) + "/goldens/torch_randn.safetensors";
const std::string kFramesFile =
    std::string(XDIT_TEST_DATA) + "/goldens/torch_randn_frames.safetensors";

TEST(TorchRandn, BitEqualForSeedsAndShapes) {
  io::SafeTensorsFile f(kFile);
  int checked = 0;
  for (const auto& [name, e] : f.entries()) {
    if (name.rfind("seed", 0) != 0) continue;
    const auto us = name.find('_');
    const uint64_t seed = std::stoull(name.substr(4, us - 4));
    Tensor want = f.get(name).to(DType::kF32);
    Tensor got = TorchGenerator(seed).randn(want.shape());
    size_t diff = 0;
    double worst = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      diff += std::memcmp(got.data<float>() + i, want.data<float>() + i, 4) != 0;
      worst = std::max(worst, std::fabs(double(got.data<float>()[i]) - want.data<float>()[i]) /
                                  (1.0 + std::fabs(want.data<float>()[i])));
    }
    EXPECT_EQ(diff, 0u) << name << ": " << diff << " of " << want.numel() << " differ, worst "
                        << worst;
    ++checked;
  }
  EXPECT_GE(checked, 30);
}

TEST(TorchRandn, ConsecutiveDrawsContinueTheStream) {
  io::SafeTensorsFile f(kFile);
  TorchGenerator g(7);
  for (const char* name : {"seq7_a_3", "seq7_b_40", "seq7_c_5"}) {
    Tensor want = f.get(name).to(DType::kF32);
    Tensor got = g.randn(want.shape());
    EXPECT_EQ(0, std::memcmp(got.raw(), want.raw(), want.nbytes())) << name;
  }
}

// initial_noise(P, C, F, h, w, seed) is torch.randn((P, C, F, h, w)) with
// the seed, for F = 3 and odd sizes.
TEST(TorchRandn, FrameLatentsNoiseBitEqual) {
  io::SafeTensorsFile f(kFramesFile);
  int checked = 0;
  for (const auto& [name, e] : f.entries()) {
    const auto us = name.find('_');
    const uint64_t seed = std::stoull(name.substr(4, us - 4));
    Tensor want = f.get(name).to(DType::kF32);
    ASSERT_EQ(want.ndim(), 5) << name;
    ASSERT_EQ(want.dim(2), 3) << name;
    const Tensor got = pipeline::initial_noise(want.dim(0), want.dim(1), want.dim(2), want.dim(3),
                                               want.dim(4), seed);
    EXPECT_EQ(got.shape(), want.shape()) << name;
    EXPECT_EQ(0, std::memcmp(got.raw(), want.raw(), want.nbytes())) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 9);
}

// One frame draws the values of the 4-D image noise, in the same order.
TEST(TorchRandn, OneFrameNoiseIsTheImageNoise) {
  io::SafeTensorsFile f(kFile);
  const Tensor want = f.get("seed42_1x4x64x64").to(DType::kF32);
  const Tensor got = pipeline::initial_noise(1, 4, 1, 64, 64, 42);
  EXPECT_EQ(got.shape(), (Shape{1, 4, 1, 64, 64}));
  EXPECT_EQ(0, std::memcmp(got.raw(), want.raw(), want.nbytes()));
}

}  // namespace
}  // namespace xdit
