// RMSNorm across heads with the interleaved rotary embedding (Wan's q/k):
// row_sum_squares + rms_scale_rope against the plain reference RMSNorm over
// heads·head_dim and the rotation written out, on odd sizes and strided rows;
// and split over "ranks" (two column halves whose sums are added, as tensor
// parallelism does) equal to the whole.
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

constexpr int64_t kSeq = 7, kBatch = 2, kRows = kSeq * kBatch, kHeads = 3, kHd = 10;
constexpr int64_t kWidth = kHeads * kHd, kStride = 3 * kWidth + 5;  // strided rows, as [q | k | v]

// The reference: RMSNorm over the row, then each head's pairs rotated.
std::vector<float> reference(const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>& cos, const std::vector<float>& sin,
                             bool rope) {
  std::vector<float> out = x;
  for (int64_t r = 0; r < kRows; ++r) {
    std::vector<float> row(x.begin() + r * kStride, x.begin() + r * kStride + kWidth), y(kWidth);
    ref::rms_norm(row.data(), y.data(), 1, kWidth, 1e-6f, w.data());
    if (rope) {
      const int64_t s = r % kSeq;
      for (int64_t i = 0; i < kWidth; i += 2) {
        const int64_t j = i % kHd;
        const double a = y[i], b = y[i + 1];
        y[i] = static_cast<float>(a * cos[s * kHd + j] - b * sin[s * kHd + j]);
        y[i + 1] = static_cast<float>(b * cos[s * kHd + j + 1] + a * sin[s * kHd + j + 1]);
      }
    }
    std::copy(y.begin(), y.end(), out.begin() + r * kStride);
  }
  return out;
}

// Interleaved tables: each angle repeated for its pair.
void tables(std::vector<float>& cos, std::vector<float>& sin) {
  cos.assign(kSeq * kHd, 0.f);
  sin.assign(kSeq * kHd, 0.f);
  for (int64_t s = 0; s < kSeq; ++s)
    for (int64_t j = 0; j < kHd; j += 2) {
      const double ang = 0.37 * static_cast<double>(s + 1) * std::pow(0.5, j / 2);
      cos[s * kHd + j] = cos[s * kHd + j + 1] = static_cast<float>(std::cos(ang));
      sin[s * kHd + j] = sin[s * kHd + j + 1] = static_cast<float>(std::sin(ang));
    }
}

TEST(QkNorm, AcrossHeadsWithAndWithoutRopeEqualsTheReference) {
  const auto x0 = randn(kRows * kStride, 61, 3.0f), w = randn(kWidth, 62);
  std::vector<float> cos, sin;
  tables(cos, sin);
  for (bool rope : {true, false}) {
    std::vector<float> x = x0, sumsq(kRows);
    row_sum_squares(x.data(), kRows, kStride, kWidth, sumsq.data());
    rms_scale_rope(x.data(), kRows, kStride, kWidth, sumsq.data(), kWidth, 1e-6f, w.data(), kSeq,
                   kHd, rope ? cos.data() : nullptr, rope ? sin.data() : nullptr);
    EXPECT_LT(rel_max_err(x, reference(x0, w, cos, sin, rope)), 3e-6) << "rope " << rope;
    // The values past each row's width (v, padding) are untouched.
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t i = kWidth; i < kStride; ++i) ASSERT_EQ(x[r * kStride + i], x0[r * kStride + i]);
  }
}

TEST(QkNorm, SplitHeadsWithSummedSquaresEqualTheWhole) {
  const auto x0 = randn(kRows * kStride, 63, 2.0f), w = randn(kWidth, 64);
  std::vector<float> cos, sin;
  tables(cos, sin);
  std::vector<float> whole = x0, sumsq(kRows);
  row_sum_squares(whole.data(), kRows, kStride, kWidth, sumsq.data());
  rms_scale_rope(whole.data(), kRows, kStride, kWidth, sumsq.data(), kWidth, 1e-6f, w.data(), kSeq,
                 kHd, cos.data(), sin.data());
  // Heads [0, 1) and [1, 3) on two "ranks": each sums its own columns, the
  // sums are added (the all-reduce), each scales its own columns.
  const int64_t split = kHd;
  std::vector<float> parts = x0, a(kRows), b(kRows);
  row_sum_squares(parts.data(), kRows, kStride, split, a.data());
  row_sum_squares(parts.data() + split, kRows, kStride, kWidth - split, b.data());
  for (int64_t r = 0; r < kRows; ++r) a[r] += b[r];
  rms_scale_rope(parts.data(), kRows, kStride, split, a.data(), kWidth, 1e-6f, w.data(), kSeq, kHd,
                 cos.data(), sin.data());
  rms_scale_rope(parts.data() + split, kRows, kStride, kWidth - split, a.data(), kWidth, 1e-6f,
                 w.data() + split, kSeq, kHd, cos.data(), sin.data());
  EXPECT_LT(rel_max_err(parts, whole), 1e-6);
}

}  // namespace
}  // namespace xdit::kernels
