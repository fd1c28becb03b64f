// The elementwise activations and gates (kernels.h) against their
// definitions: gated GELU (T5), SwiGLU (Qwen, Z-Image), tanh (Z-Image's
// gates), Qwen-Image's per-token CFG rescale, GELU / SiLU / erf GELU /
// QuickGELU, softmax.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/reference.h"
#include "test_util.h"

namespace xdit::kernels {
namespace {

using test::randn;
using test::rel_max_err;

TEST(Ops, GatedGelu) {
  const int64_t rows = 7, n = 53;
  auto x = randn(rows * 2 * n, 22, 3.0f);
  std::vector<float> y(rows * n);
  gelu_tanh_gate(x.data(), y.data(), rows, n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const double want =
          static_cast<double>(ref::gelu_tanh(x[r * 2 * n + j])) * x[r * 2 * n + n + j];
      ASSERT_NEAR(y[r * n + j], want, 1e-5 * (1 + std::fabs(want)));
    }
}

TEST(Ops, SiluGateIsSwiGlu) {
  const int64_t rows = 5, n = 67;
  auto x = randn(rows * 2 * n, 23, 3.0f);
  std::vector<float> y(rows * n);
  silu_gate(x.data(), y.data(), rows, n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const double g = x[r * 2 * n + j], want = g / (1.0 + std::exp(-g)) * x[r * 2 * n + n + j];
      ASSERT_NEAR(y[r * n + j], want, 1e-5 * (1 + std::fabs(want)));
    }
}

// Qwen-Image's per-token rescale: each 2 x 2 patch over every channel takes
// its cond prediction's norm; other patches' values do not mix in.
TEST(Ops, CfgRenormPatchesRescalesEachToken) {
  const int64_t C = 3, H = 6, W = 4, p = 2, plane = H * W;
  auto cond = randn(C * plane, 25, 1.0f), noise = randn(C * plane, 26, 3.0f);
  std::vector<float> got = noise;
  kernels::cfg_renorm_patches(cond.data(), got.data(), C, H, W, p);
  for (int64_t i = 0; i < H / p; ++i)
    for (int64_t j = 0; j < W / p; ++j) {
      double cs = 0, ns = 0, gs = 0;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t y = 0; y < p; ++y)
          for (int64_t x = 0; x < p; ++x) {
            const int64_t at = c * plane + (i * p + y) * W + j * p + x;
            cs += double(cond[at]) * cond[at];
            ns += double(noise[at]) * noise[at];
            gs += double(got[at]) * got[at];
          }
      EXPECT_NEAR(std::sqrt(gs), std::sqrt(cs), 1e-5 * std::sqrt(cs)) << i << ", " << j;
      for (int64_t c = 0; c < C; ++c) {  // a scaling: the direction is kept
        const int64_t at = c * plane + i * p * W + j * p;
        EXPECT_NEAR(got[at], noise[at] * std::sqrt(cs / ns), 1e-5 * (1 + std::fabs(got[at])));
      }
    }
}

TEST(Ops, TanhIsLibmTanh) {
  auto x = randn(1000, 24, 4.0f);
  std::vector<float> y(x.size());
  kernels::tanh(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], std::tanh(x[i]));
}

TEST(Ops, GeluTanhAndSilu) {
  const int64_t n = 100003;
  auto x = randn(n, 4, 4.0f);
  x[0] = 30.0f;  // saturating tails
  x[1] = -30.0f;
  std::vector<float> y(n), s(n), rg(n), rs(n);
  gelu_tanh(x.data(), y.data(), n);
  silu(x.data(), s.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    rg[i] = ref::gelu_tanh(x[i]);
    rs[i] = ref::silu(x[i]);
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(y[i], rg[i], 1e-6 + 2e-6 * std::fabs(rg[i])) << "gelu at x=" << x[i];
    ASSERT_NEAR(s[i], rs[i], 1e-6 + 2e-6 * std::fabs(rs[i])) << "silu at x=" << x[i];
  }
}

TEST(Ops, GeluErfAndQuickGelu) {
  const int64_t n = 70001;
  auto x = randn(n, 6, 4.0f);
  x[0] = 30.0f;
  x[1] = -30.0f;
  std::vector<float> g(n), q(n);
  gelu_erf(x.data(), g.data(), n);
  quick_gelu(x.data(), q.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const float rg = ref::gelu_erf(x[i]), rq = ref::quick_gelu(x[i]);
    ASSERT_NEAR(g[i], rg, 1e-6 + 2e-6 * std::fabs(rg)) << "gelu (erf) at x=" << x[i];
    ASSERT_NEAR(q[i], rq, 1e-6 + 2e-6 * std::fabs(rq)) << "quick_gelu at x=" << x[i];
  }
  // The two differ (CLIP-L and CLIP-G must not be swapped): by ~0.02 at x = 2.
  EXPECT_GT(std::fabs(ref::gelu_erf(2.0f) - ref::quick_gelu(2.0f)), 0.01f);
}

TEST(Ops, Softmax) {
  const int64_t rows = 13, cols = 1031;
  auto x = randn(rows * cols, 5, 5.0f);
  auto r = x;
  softmax_rows(x.data(), rows, cols);
  ref::softmax_rows(r.data(), rows, cols);
  EXPECT_LT(rel_max_err(x, r), 1e-6);
}

}  // namespace
}  // namespace xdit::kernels
