// Q8_0 layers multiplied as integers (kernels/cpu/q8_0_gemm.h): the
// activations = ggml's Q8_0 blocks of them (the codes of io::quantize_q8_0,
// itself gguf-py's byte for byte), the layer = the sum over blocks of
// d_w · d_x · (exact integer dot) computed here in double, on odd sizes
// (panels and tiles cut short, fused parts), with bias, GELU, accumulate,
// bf16 in and out; NaN rows; the route taken only by bf16 layers of Q8_0
// parts alone, and close to the decoded layer.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/q8_0_gemm.h"
#include "kernels/kernels.h"
#include "kernels/linear.h"
#include "kernels/q8_0_blocks.h"
#include "nn/block_weights.h"
#include "test_util.h"

namespace xdit::kernels {
namespace {

// The header's rule, scalar: a block's d and codes.
struct Q8Block {
  float d;
  std::vector<int> codes;
};
Q8Block quantize_block(const float* x) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f, inverse = d != 0 ? 1.0f / d : 0.0f;
  Q8Block b{d, std::vector<int>(32)};
  for (int j = 0; j < 32; ++j) b.codes[j] = static_cast<int>(std::nearbyint(x[j] * inverse));
  return b;
}

// Rows whose blocks span very different magnitudes, one block all zeros.
std::vector<float> activations(int64_t m, int64_t k, uint64_t seed) {
  auto x = test::randn(static_cast<size_t>(m * k), seed);
  for (int64_t i = 0; i < m * k; ++i) x[i] *= std::pow(10.0f, static_cast<float>((i / 32) % 5) - 2);
  for (int j = 0; j < 32 && k >= 64; ++j) x[32 + j] = 0;
  return x;
}

TEST(Q8_0Gemm, ActivationsAreGgmlQ8_0Blocks) {
  SKIP_WITHOUT_VNNI();
  const int64_t m = 5, k = 160, groups = k / 32;
  const auto x = activations(m, k, 11);
  std::vector<int8_t> codes(m * k);
  std::vector<float> d(m * groups);
  std::vector<int32_t> sums(m * groups);
  cpu::quantize_q8_0_activations(x.data(), true, m, k, codes.data(), d.data(), sums.data());
  std::vector<uint8_t> ggml(m * groups * 34);
  io::quantize_q8_0(x.data(), m * groups, ggml.data());
  for (int64_t b = 0; b < m * groups; ++b) {
    const Q8Block want = quantize_block(x.data() + b * 32);
    EXPECT_EQ(d[b], want.d) << "block " << b;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      ASSERT_EQ(codes[b * 32 + j], want.codes[j]) << "block " << b << " value " << j;
      // ggml's quantizer rounds ties away from zero, this one to even: random
      // values have no ties, so the codes are ggml's.
      ASSERT_EQ(codes[b * 32 + j], static_cast<int8_t>(ggml[b * 34 + 2 + j]));
      sum += want.codes[j];
    }
    EXPECT_EQ(sums[b], sum);
  }
  EXPECT_EQ(d[1], 0.0f);  // the zero block
  // A block below 127 · FLT_MIN (1 / d would overflow) counts as zeros.
  std::vector<float> tiny(32, 1e-38f);
  tiny[5] = -2e-38f;
  std::vector<int8_t> tiny_codes(32, 1);
  float tiny_d = 1;
  int32_t tiny_sum = 1;
  cpu::quantize_q8_0_activations(tiny.data(), true, 1, 32, tiny_codes.data(), &tiny_d, &tiny_sum);
  EXPECT_EQ(tiny_d, 0.0f);
  EXPECT_EQ(tiny_sum, 0);
  EXPECT_EQ(tiny_codes, std::vector<int8_t>(32, 0));
  // bf16 rows: the same as their f32 values.
  std::vector<uint16_t> x16(m * k);
  std::vector<float> back(m * k);
  convert_from_f32(x.data(), x16.data(), DType::kBF16, x16.size());
  convert_to_f32(x16.data(), DType::kBF16, back.data(), back.size());
  std::vector<int8_t> codes16(m * k), codes_back(m * k);
  std::vector<float> d16(m * groups), d_back(m * groups);
  cpu::quantize_q8_0_activations(x16.data(), false, m, k, codes16.data(), d16.data(), sums.data());
  cpu::quantize_q8_0_activations(back.data(), true, m, k, codes_back.data(), d_back.data(),
                                 sums.data());
  EXPECT_EQ(codes16, codes_back);
  EXPECT_EQ(d16, d_back);
}

// act(Σ_g d_w · d_x · Σ q_w · q_x + b) in double, from the blocks themselves.
std::vector<double> block_dot_reference(const std::vector<float>& x, int64_t m, int64_t k,
                                        const std::vector<uint8_t>& w, int64_t n,
                                        const std::vector<float>& bias, bool gelu) {
  std::vector<double> y(m * n);
  const int64_t groups = k / 32;
  for (int64_t r = 0; r < m; ++r) {
    std::vector<Q8Block> xb;
    for (int64_t g = 0; g < groups; ++g) xb.push_back(quantize_block(x.data() + r * k + g * 32));
    for (int64_t c = 0; c < n; ++c) {
      double acc = bias.empty() ? 0.0 : bias[c];
      for (int64_t g = 0; g < groups; ++g) {
        const uint8_t* blk = w.data() + (c * groups + g) * 34;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        int64_t dot = 0;
        for (int j = 0; j < 32; ++j) dot += static_cast<int8_t>(blk[2 + j]) * xb[g].codes[j];
        acc += static_cast<double>(f16_to_f32(h)) * xb[g].d * static_cast<double>(dot);
      }
      if (gelu) {
        const double u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc);
        acc = 0.5 * acc * (1.0 + std::tanh(u));
      }
      y[r * n + c] = acc;
    }
  }
  return y;
}

TEST(Q8_0Gemm, LayerIsTheBlockDotProducts) {
  SKIP_WITHOUT_VNNI();
  // Outputs: one lane, a panel and a bit, two parts of odd sizes, several
  // panel sets; rows: tiles of 1 … 4, and more than one 64-row chunk.
  struct Case {
    int64_t k;
    std::vector<int64_t> parts;
  };
  for (const Case& c :
       {Case{32, {1}}, Case{96, {17}}, Case{64, {23, 40}}, Case{3072, {50}}, Case{160, {1100}}}) {
    int64_t n = 0;
    std::vector<uint8_t> all;
    std::vector<std::vector<uint8_t>> bytes;
    for (size_t i = 0; i < c.parts.size(); ++i) {
      bytes.push_back(random_q8_0(c.parts[i], c.k, 20 + i));
      all.insert(all.end(), bytes.back().begin(), bytes.back().end());
      n += c.parts[i];
    }
    std::vector<BlockRows> parts;
    for (size_t i = 0; i < c.parts.size(); ++i)
      parts.push_back(nn::block_rows(q8_rows(bytes[i], c.parts[i], c.k), 0, c.parts[i]));
    const auto bias = test::randn(n, 3);
    const Linear plain(parts, Tensor(), ComputeType::kBF16, Activation::kNone);
    const Linear gelu(parts, Tensor::from_vector(bias, {n}), ComputeType::kBF16,
                      Activation::kGeluTanh);
    ASSERT_EQ(plain.implementation(3), "xdit:q8_0-int8(avx512-vnni)");
    EXPECT_EQ(plain.weight_bytes(), (n + 15) / 16 * 16 * c.k / 32 * 34);  // padded to 16 rows
    for (const int64_t m : {1, 3, 6, 70}) {
      SCOPED_TRACE(testing::Message() << "k=" << c.k << " n=" << n << " m=" << m);
      const auto x = activations(m, c.k, 40 + m);
      const auto want = block_dot_reference(x, m, c.k, all, n, {}, false);
      std::vector<float> y(m * n);
      plain.forward(x.data(), m, y.data());
      EXPECT_LT(rel_err(y, want), 1e-5);
      const auto want_gelu = block_dot_reference(x, m, c.k, all, n, bias, true);
      gelu.forward(x.data(), m, y.data());
      EXPECT_LT(rel_err(y, want_gelu), 1e-5);
      // bf16 out: the same values rounded to bf16.
      std::vector<uint16_t> y16(m * n);
      gelu.forward_to_bf16(x.data(), m, y16.data());
      std::vector<float> back(m * n);
      convert_to_f32(y16.data(), DType::kBF16, back.data(), back.size());
      for (int64_t i = 0; i < m * n; ++i)
        ASSERT_NEAR(back[i], want_gelu[i], std::fabs(want_gelu[i]) / 128 + 1e-6) << i;
      // Accumulated onto what y holds.
      auto acc = test::randn(m * n, 5);
      std::vector<double> want_acc(want);
      for (int64_t i = 0; i < m * n; ++i) want_acc[i] += acc[i];
      plain.forward(x.data(), m, acc.data(), /*accumulate=*/true);
      EXPECT_LT(rel_err(acc, want_acc), 1e-5);
    }
  }
}

TEST(Q8_0Gemm, Bf16InputsAreTheirValues) {
  SKIP_WITHOUT_VNNI();
  const int64_t k = 96, n = 37, m = 9;
  const auto w = random_q8_0(n, k, 7);
  const Linear layer({nn::block_rows(q8_rows(w, n, k), 0, n)}, Tensor(), ComputeType::kBF16,
                     Activation::kNone);
  const auto x = activations(m, k, 8);
  std::vector<uint16_t> x16(m * k);
  convert_from_f32(x.data(), x16.data(), DType::kBF16, x16.size());
  std::vector<float> x_back(m * k), from16(m * n), from32(m * n);
  convert_to_f32(x16.data(), DType::kBF16, x_back.data(), x_back.size());
  layer.forward_bf16(x16.data(), m, from16.data());
  layer.forward(x_back.data(), m, from32.data());
  EXPECT_EQ(from16, from32);
}

TEST(Q8_0Gemm, NonFiniteActivationsGiveNaNRowsOnly) {
  SKIP_WITHOUT_VNNI();
  const int64_t k = 64, n = 20, m = 4;
  const auto w = random_q8_0(n, k, 9);
  const Linear layer({nn::block_rows(q8_rows(w, n, k), 0, n)}, Tensor(), ComputeType::kBF16,
                     Activation::kNone);
  auto x = activations(m, k, 10);
  x[1 * k + 40] = std::numeric_limits<float>::quiet_NaN();
  x[2 * k + 3] = std::numeric_limits<float>::infinity();
  std::vector<float> y(m * n);
  layer.forward(x.data(), m, y.data());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c)
      EXPECT_EQ(std::isnan(y[r * n + c]), r == 1 || r == 2) << r << "," << c;
}

// Tensor parallelism's row-parallel layers: each rank takes whole blocks
// of the inputs (nn::column_shares) and the partial products are summed.
// The activations' blocks are quantized alike wherever they go, so the
// shares add up to the whole layer (unlike per-token int8, whose scale
// depends on the share).
TEST(Q8_0Gemm, ColumnSharesSumToTheWholeLayer) {
  SKIP_WITHOUT_VNNI();
  const int64_t k = 192, n = 45, m = 11;
  const auto w = random_q8_0(n, k, 15);
  const Linear whole({nn::block_rows(q8_rows(w, n, k), 0, n)}, Tensor(), ComputeType::kBF16,
                     Activation::kNone);
  const auto x = activations(m, k, 16);
  std::vector<float> want(m * n);
  whole.forward(x.data(), m, want.data());
  // Two ranks' shares: blocks {0, 3, 4} and {1, 2, 5} of each row.
  const std::vector<float> sum =
      summed_shares(q8_rows(w, n, k), {{{0, 32}, {96, 64}}, {{32, 64}, {160, 32}}}, x, m);
  EXPECT_LT(test::rel_max_err(sum, want), 1e-6);
}

// The integer route is bf16 layers of Q8_0 parts alone; it stays within
// the activations' quantization error of the decoded layer.
TEST(Q8_0Gemm, OnlyBf16Q8_0LayersRunAsIntegersNearTheDecodedLayer) {
  SKIP_WITHOUT_VNNI();
  const int64_t k = 256, n = 70, m = 33;
  const auto w = random_q8_0(n, k, 12);
  const BlockRows rows = nn::block_rows(q8_rows(w, n, k), 0, n);
  const Tensor floats = Tensor::from_vector(test::randn(5 * k, 13, 0.1f), {5, k});
  const Linear f32({rows}, Tensor(), ComputeType::kF32, Activation::kNone);
  const Linear mixed({rows, nn::float_rows(floats)}, Tensor(), ComputeType::kBF16,
                     Activation::kNone);
  EXPECT_NE(f32.implementation(m).find("decode(Q8_0)"), std::string::npos);
  EXPECT_NE(mixed.implementation(m).find("decode(Q8_0)"), std::string::npos);
  const auto decoded_layer = [&] {
    const DecodedQ8_0 decode;
    return Linear({rows}, Tensor(), ComputeType::kBF16, Activation::kNone);
  };
  const Linear off = decoded_layer();
  EXPECT_NE(off.implementation(m).find("decode(Q8_0)"), std::string::npos);
  const Linear on({rows}, Tensor(), ComputeType::kBF16, Activation::kNone);
  EXPECT_EQ(on.implementation(m), "xdit:q8_0-int8(avx512-vnni)");

  const auto x = test::randn(m * k, 14);
  std::vector<float> exact(m * n), y_off(m * n), y_on(m * n);
  f32.forward(x.data(), m, exact.data());
  off.forward(x.data(), m, y_off.data());
  on.forward(x.data(), m, y_on.data());
  const double err_on = test::rel_max_err(y_on, exact), err_off = test::rel_max_err(y_off, exact);
  EXPECT_GT(err_on, 0.0);  // the activations were quantized
  EXPECT_LT(err_on, 1e-2);
  std::printf(
      "Q8_0 %lldx%lld -> %lld: integer route %.2e, decoded bf16 %.2e (largest error / "
      "largest value, against f32)\n",
      static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n), err_on,
      err_off);
}

}  // namespace
}  // namespace xdit::kernels
