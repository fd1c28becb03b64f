// torch.randn with torch.Generator().manual_seed(seed) on CPU, bit for bit
// (goldens from tools/goldens/make_rng.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "core/rng.h"
#include "io/safetensors.h"

namespace xdit {
namespace {

const std::string kFile = std::string(XDIT_TEST_DATA) + "/goldens/torch_randn.safetensors";

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

}  // namespace
}  // namespace xdit
