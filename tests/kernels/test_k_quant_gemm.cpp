// Q4_K and Q5_K layers multiplied as integers (kernels/cpu/q8_0_gemm.h,
// k_quant_gemm.cpp):
// against the same Q8_0 activations, the layer = Σ over sub-blocks of
// d_x · Σ w · q_x with w the blocks decoded as gguf-py decodes them
// (io::dequantize_blocks), in double; on odd sizes (panels cut short, fused
// parts, several 256-value blocks a row), with bias, GELU, accumulate and
// bf16 output; tensor-parallel shares; gguf-py's own Q4_K / Q5_K tensor,
// near its decoded layer; mixed parts decode.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/gguf.h"
#include "kernels/cpu/q8_0_gemm.h"
#include "kernels/linear.h"
#include "kernels/q8_0_blocks.h"
#include "nn/block_weights.h"
#include "test_util.h"

namespace xdit::kernels {
namespace {

// act(Σ_g d_x · Σ_{k ∈ g} w · q_x + b) in double, w the decoded weights [n, k].
std::vector<double> reference(const std::vector<float>& x, int64_t m, int64_t k,
                              const std::vector<float>& w, int64_t n,
                              const std::vector<float>& bias, bool gelu) {
  const int64_t groups = k / 32;
  std::vector<int8_t> codes(m * k);
  std::vector<float> d(m * groups);
  std::vector<int32_t> sums(m * groups);
  cpu::quantize_q8_0_activations(x.data(), true, m, k, codes.data(), d.data(), sums.data());
  std::vector<double> y(m * n);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double acc = bias.empty() ? 0.0 : bias[c];
      for (int64_t g = 0; g < groups; ++g) {
        double dot = 0;
        for (int64_t j = 0; j < 32; ++j)
          dot += static_cast<double>(w[c * k + g * 32 + j]) * codes[r * k + g * 32 + j];
        acc += d[r * groups + g] * dot;
      }
      if (gelu)
        acc =
            0.5 * acc * (1.0 + std::tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)));
      y[r * n + c] = acc;
    }
  return y;
}

// The type, and the name its layer reports.
class KQuantGemm : public testing::TestWithParam<io::GgmlType> {
 protected:
  io::GgmlType type() const { return GetParam(); }
  bool five() const { return type() == io::GgmlType::kQ5_K; }
  std::string implementation() const {
    return five() ? "xdit:q5_k-int8(avx512-vnni)" : "xdit:q4_k-int8(avx512-vnni)";
  }
};

TEST_P(KQuantGemm, LayerIsTheSubBlockDotProducts) {
  SKIP_WITHOUT_VNNI();
  struct Case {
    int64_t k;
    std::vector<int64_t> parts;
  };
  for (const Case& c : {Case{256, {1}}, Case{512, {17, 23}}, Case{768, {50}}}) {
    int64_t n = 0;
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<float> w;
    for (size_t i = 0; i < c.parts.size(); ++i) {
      bytes.push_back(random_k_quant(c.parts[i], c.k, 30 + i, type()));
      const auto part = decoded(bytes.back(), c.parts[i], c.k, type()).to_vector();
      w.insert(w.end(), part.begin(), part.end());
      n += c.parts[i];
    }
    std::vector<BlockRows> parts;
    for (size_t i = 0; i < c.parts.size(); ++i)
      parts.push_back(
          nn::block_rows(k_quant_rows(bytes[i], c.parts[i], c.k, type()), 0, c.parts[i]));
    const auto bias = test::randn(n, 4);
    const Linear plain(parts, Tensor(), ComputeType::kBF16, Activation::kNone);
    const Linear gelu(parts, Tensor::from_vector(bias, {n}), ComputeType::kBF16,
                      Activation::kGeluTanh);
    ASSERT_EQ(plain.implementation(3), implementation());
    // Nibbles, bytes of scales and mins, d and dmin: 4.625 bits a weight (rows padded to 16);
    // Q5_K's fifth bits: one more.
    const size_t padded = static_cast<size_t>((n + 15) / 16 * 16);
    EXPECT_EQ(plain.weight_bytes(), padded * c.k / 2 + padded * c.k / 32 * 2 +
                                        padded * c.k / 256 * 4 + (five() ? padded * c.k / 8 : 0));
    for (const int64_t m : {1, 3, 6, 70}) {
      SCOPED_TRACE(testing::Message() << "k=" << c.k << " n=" << n << " m=" << m);
      const auto x = test::randn(m * c.k, 50 + m);
      std::vector<float> y(m * n);
      plain.forward(x.data(), m, y.data());
      const auto want = reference(x, m, c.k, w, n, {}, false);
      EXPECT_LT(rel_err(y, want), 1e-5);
      const auto want_gelu = reference(x, m, c.k, w, n, bias, true);
      gelu.forward(x.data(), m, y.data());
      EXPECT_LT(rel_err(y, want_gelu), 1e-5);
      std::vector<uint16_t> y16(m * n);
      gelu.forward_to_bf16(x.data(), m, y16.data());
      std::vector<float> back(m * n);
      convert_to_f32(y16.data(), DType::kBF16, back.data(), back.size());
      EXPECT_LT(rel_err(back, want_gelu), 1e-2);
      auto acc = test::randn(m * n, 6);
      std::vector<double> want_acc(want);
      for (int64_t i = 0; i < m * n; ++i) want_acc[i] += acc[i];
      plain.forward(x.data(), m, acc.data(), /*accumulate=*/true);
      EXPECT_LT(rel_err(acc, want_acc), 1e-5);
    }
  }
}

// Tensor parallelism's row-parallel shares (whole 256-value blocks) sum to
// the whole layer: each sub-block is quantized alike wherever it goes.
TEST_P(KQuantGemm, ColumnSharesSumToTheWholeLayer) {
  SKIP_WITHOUT_VNNI();
  const int64_t k = 768, n = 21, m = 9;
  const auto w = random_k_quant(n, k, 40, type());
  const Linear whole({nn::block_rows(k_quant_rows(w, n, k, type()), 0, n)}, Tensor(),
                     ComputeType::kBF16, Activation::kNone);
  const auto x = test::randn(m * k, 41);
  std::vector<float> want(m * n);
  whole.forward(x.data(), m, want.data());
  const std::vector<float> sum =
      summed_shares(k_quant_rows(w, n, k, type()), {{{0, 256}, {512, 256}}, {{256, 256}}}, x, m);
  EXPECT_LT(test::rel_max_err(sum, want), 1e-5);
}

// gguf-py's tensor of the type (tests/data/gguf/types.gguf), near its
// decoded layer; beside Q8_0 parts it decodes.
TEST_P(KQuantGemm, GgufPysTensorIsNearItsDecodedLayerAndMixedPartsDecode) {
  SKIP_WITHOUT_VNNI();
  const io::GgufFile f(std::string(XDIT_TEST_DATA) + "/gguf/types.gguf");
  int found = 0;
  for (const auto& [name, t] : f.tensors()) {
    if (t.type != type() || t.shape.size() != 2) continue;
    ++found;
    const int64_t out = t.shape[0], in = t.shape[1];
    const io::QuantizedRows q{t.type, out, in, t.data, t.bytes / static_cast<size_t>(out), {}};
    const Linear integers({nn::block_rows(q, 0, out)}, Tensor(), ComputeType::kBF16,
                          Activation::kNone);
    ASSERT_EQ(integers.implementation(5), implementation());
    const Linear exact(f.dequantized(name), Tensor(), ComputeType::kF32);
    const auto x = test::randn(5 * in, 19);
    std::vector<float> y(5 * out), r(5 * out);
    integers.forward(x.data(), 5, y.data());
    exact.forward(x.data(), 5, r.data());
    EXPECT_GT(test::rel_max_err(y, r), 0.0);
    EXPECT_LT(test::rel_max_err(y, r), 2e-2) << name;
    const auto q8 = random_q8_0(3, in, 7);
    const Linear mixed({nn::block_rows(q, 0, out), nn::block_rows(q8_rows(q8, 3, in), 0, 3)},
                       Tensor(), ComputeType::kBF16, Activation::kNone);
    EXPECT_NE(mixed.implementation(5).find("decode("), std::string::npos)
        << mixed.implementation(5);
  }
  EXPECT_GE(found, 1);
}

INSTANTIATE_TEST_SUITE_P(Types, KQuantGemm,
                         testing::Values(io::GgmlType::kQ4_K, io::GgmlType::kQ5_K),
                         [](const auto& info) {
                           return std::string(info.param == io::GgmlType::kQ5_K ? "Q5_K" : "Q4_K");
                         });

}  // namespace
}  // namespace xdit::kernels
