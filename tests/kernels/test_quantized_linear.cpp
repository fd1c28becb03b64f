// Linear layers that keep their weights quantized (kernels/cpu/quantized_linear.h):
// GGUF blocks decoded a band at a time = the same layer over the decoded
// weight; int8 = its own quantization done by hand here (per output channel
// weights, per row activations; weight-only where the CPU has no integer dot
// products); fp8 e4m3 = the nearest representable value, ties to even, and
// the layer = its decoded weight. Odd sizes, several bands, fused parts of
// mixed storage, bias, GELU, accumulate and bf16 output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "io/gguf.h"
#include "io/gguf_quants.h"
#include "kernels/cpu/quantized_linear.h"
#include "kernels/kernels.h"
#include "kernels/linear.h"
#include "kernels/q8_0_blocks.h"
#include "kernels/reference.h"
#include "nn/block_weights.h"
#include "test_util.h"

namespace xdit::kernels {
namespace {

// (Decoded in bf16 too: Q8_0's integer route is test_q8_0_gemm.cpp's.)
TEST(QuantizedLinear, BlocksGiveTheLayerOfTheirDecodedWeight) {
  const int64_t in = 96, out = 1100;  // 3 blocks a row; 3 bands of 512 rows, the last short
  const auto bytes = random_q8_0(out, in, 1);
  const DecodedQ8_0 decode;
  const Tensor w = decoded(bytes, out, in);
  const Tensor b = Tensor::from_vector(test::randn(out, 2), {out});
  for (const ComputeType ct : {ComputeType::kF32, ComputeType::kBF16}) {
    if (ct == ComputeType::kBF16 && !cpu_has_bf16()) continue;
    const Linear dense(w, b, ct, Activation::kGeluTanh);
    const Linear blocks({nn::block_rows(q8_rows(bytes, out, in), 0, out)}, b, ct,
                        Activation::kGeluTanh);
    EXPECT_EQ(blocks.weight_bytes(), bytes.size());
    EXPECT_NE(blocks.implementation(7).find("Q8_0"), std::string::npos) << blocks.implementation(7);
    for (const int64_t m : {1, 7, 300}) {
      const auto x = test::randn(m * in, 3 + m);
      std::vector<float> y(m * out), r(m * out);
      blocks.forward(x.data(), m, y.data());
      dense.forward(x.data(), m, r.data());
      EXPECT_LT(test::rel_max_err(y, r), ct == ComputeType::kF32 ? 1e-5 : 1e-2)
          << "m=" << m << " " << (ct == ComputeType::kF32 ? "f32" : "bf16");
      if (ct != ComputeType::kBF16) continue;
      std::vector<uint16_t> y16(m * out), r16(m * out);
      blocks.forward_to_bf16(x.data(), m, y16.data());
      dense.forward_to_bf16(x.data(), m, r16.data());
      std::vector<float> a(m * out), c(m * out);
      convert_to_f32(y16.data(), DType::kBF16, a.data(), a.size());
      convert_to_f32(r16.data(), DType::kBF16, c.data(), c.size());
      EXPECT_LT(test::rel_max_err(a, c), 2e-2) << "bf16 out m=" << m;
    }
  }
}

// Every block type gguf-py wrote (tests/data/gguf/types.gguf, K-quants
// too): the layer over its blocks = the layer over its decoded values.
TEST(QuantizedLinear, EveryGgufTypeGivesItsDecodedWeightsLayer) {
  const io::GgufFile f(std::string(XDIT_TEST_DATA) + "/gguf/types.gguf");
  int matrices = 0;
  for (const auto& [name, t] : f.tensors()) {
    if (t.shape.size() != 2 || io::ggml_block_values(t.type) == 1) continue;
    SCOPED_TRACE(name);
    ++matrices;
    const int64_t out = t.shape[0], in = t.shape[1];
    const io::QuantizedRows q{t.type, out, in, t.data, t.bytes / static_cast<size_t>(out), {}};
    const Linear blocks({nn::block_rows(q, 0, out)}, Tensor(), ComputeType::kF32,
                        Activation::kNone);
    const Linear dense(f.dequantized(name), Tensor(), ComputeType::kF32);
    const auto x = test::randn(5 * in, 17);
    std::vector<float> y(5 * out), r(5 * out);
    blocks.forward(x.data(), 5, y.data());
    dense.forward(x.data(), 5, r.data());
    EXPECT_LT(test::rel_max_err(y, r), 1e-5);
  }
  EXPECT_GE(matrices, 6);  // Q8_0, Q4_0/1, Q5_0/1, Q4_K, Q5_K, Q6_K
}

TEST(QuantizedLinear, FusedPartsOfMixedStorageAccumulate) {
  const int64_t in = 64, rows_q = 40, rows_f = 23;
  const auto bytes = random_q8_0(rows_q, in, 4);
  const Tensor wq = decoded(bytes, rows_q, in);
  const Tensor wf =
      Tensor::from_vector(test::randn(rows_f * in, 5, 0.1f), {rows_f, in}).to(DType::kBF16);
  const Linear blocks({nn::block_rows(q8_rows(bytes, rows_q, in), 0, rows_q), nn::float_rows(wf)},
                      Tensor(), ComputeType::kF32, Activation::kNone);
  std::vector<float> whole = wq.to_vector(), tail = wf.to(DType::kF32).to_vector();
  whole.insert(whole.end(), tail.begin(), tail.end());
  const int64_t m = 9, out = rows_q + rows_f;
  const auto x = test::randn(m * in, 6);
  std::vector<float> r(m * out), y = test::randn(m * out, 7);
  ref::linear(x.data(), whole.data(), nullptr, m, in, out, r.data());
  for (size_t i = 0; i < r.size(); ++i) r[i] += y[i];
  blocks.forward(x.data(), m, y.data(), /*accumulate=*/true);
  EXPECT_LT(test::rel_max_err(y, r), 1e-5);
}

TEST(QuantizedLinear, ColumnSharesKeepWholeBlocksAndRefuseCuts) {
  const int64_t in = 128, out = 5;
  const auto bytes = random_q8_0(out, in, 8);
  const Tensor w = decoded(bytes, out, in);
  std::vector<uint8_t> share;
  const BlockRows b =
      nn::column_shares(q8_rows(bytes, out, in), {{32, 32}, {96, 32}}, "w", 2, share);
  std::vector<float> row(64);
  for (int64_t r = 0; r < out; ++r) {
    b.decode_row(b.data + r * b.row_bytes, row.data());
    for (int64_t j = 0; j < 64; ++j)
      ASSERT_EQ(row[j], w.data<float>()[r * in + (j < 32 ? 32 + j : 64 + j)]) << r << "," << j;
  }
  EXPECT_THROW(nn::column_shares(q8_rows(bytes, out, in), {{16, 48}}, "w", 3, share), Error);
}

// The layer's int8 arithmetic done by hand: weight rows and activation rows
// each at their largest magnitude → 127, products summed exactly.
std::vector<float> int8_reference(const std::vector<float>& x, const std::vector<float>& w,
                                  const std::vector<float>& b, int64_t m, int64_t in, int64_t out,
                                  bool quantize_x) {
  const auto quantize = [](const float* v, int64_t n, std::vector<double>& q, bool activations) {
    float amax = 0;
    for (int64_t j = 0; j < n; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float s = amax > 0 ? amax / 127.0f : 1.0f;
    q.resize(static_cast<size_t>(n));
    // Activations are multiplied by 1 / s, weights divided by s (the layer's
    // own arithmetic: a tie rounds alike).
    const float inv = 1.0f / s;
    for (int64_t j = 0; j < n; ++j)
      q[j] = std::clamp(std::nearbyint(activations ? v[j] * inv : v[j] / s), -127.0f, 127.0f);
    return static_cast<double>(s);
  };
  std::vector<float> y(m * out);
  std::vector<double> qx, qw;
  for (int64_t r = 0; r < m; ++r) {
    double sx = 1;
    if (quantize_x) sx = quantize(&x[r * in], in, qx, true);
    for (int64_t n = 0; n < out; ++n) {
      const double sw = quantize(&w[n * in], in, qw, false);
      double acc = 0;
      for (int64_t j = 0; j < in; ++j) acc += (quantize_x ? qx[j] : x[r * in + j]) * qw[j];
      y[r * out + n] = static_cast<float>(acc * sx * sw + b[n]);
    }
  }
  return y;
}

TEST(QuantizedLinear, Int8IsPerChannelWeightsAgainstPerTokenActivations) {
  const int64_t in = 77, out = 45;
  const auto wv = test::randn(out * in, 9, 0.3f), bv = test::randn(out, 10);
  const Tensor w = Tensor::from_vector(wv, {out, in}), b = Tensor::from_vector(bv, {out});
  const WeightFormatScope scope(WeightFormat::kInt8);
  const Linear lin(w, b, ComputeType::kF32);
  const bool integer = cpu::cpu_has_int8_dot();
  EXPECT_EQ(lin.implementation(5).rfind("int8:", 0) == 0, integer) << lin.implementation(5);
  {  // a byte a weight, and the packing's padding (of odd sizes) aside
    const Linear big(Tensor::from_vector(test::randn(256 * 192, 16), {192, 256}), Tensor(),
                     ComputeType::kF32);
    EXPECT_LT(big.weight_bytes(), size_t{256 * 192 * 4} / 3);
  }
  for (const int64_t m : {1, 5, 260}) {
    auto x = test::randn(m * in, 11 + m);
    x[0] = 9.0f;  // one large activation: its row's scale
    std::vector<float> y(m * out), plain(m * out);
    lin.forward(x.data(), m, y.data());
    EXPECT_LT(test::rel_max_err(y, int8_reference(x, wv, bv, m, in, out, integer)), 1e-5)
        << "m=" << m;
    // And near the float product: int8's error, not another layer's.
    ref::linear(x.data(), wv.data(), bv.data(), m, in, out, plain.data());
    EXPECT_LT(test::rel_max_err(y, plain), 0.05) << "m=" << m;
  }
}

TEST(QuantizedLinear, Int8RowWithNanGivesNanLikeAFloatLayer) {
  const int64_t in = 33, out = 7;
  const Tensor w = Tensor::from_vector(test::randn(out * in, 12), {out, in});
  const WeightFormatScope scope(WeightFormat::kInt8);
  const Linear lin(w, Tensor(), ComputeType::kF32);
  auto x = test::randn(2 * in, 13);
  x[in + 3] = std::nanf("");
  std::vector<float> y(2 * out);
  lin.forward(x.data(), 2, y.data());
  for (int64_t n = 0; n < out; ++n) {
    EXPECT_TRUE(std::isfinite(y[n]));
    EXPECT_TRUE(std::isnan(y[out + n]));
  }
}

TEST(QuantizedLinear, E4m3IsTheNearestValueTiesToEven) {
  // Every finite code, and the value halfway to the next: its even neighbour.
  for (int c = 0; c < 0x7e; ++c) {
    const float v = cpu::e4m3_to_f32(static_cast<uint8_t>(c)),
                next = cpu::e4m3_to_f32(static_cast<uint8_t>(c + 1));
    EXPECT_EQ(cpu::f32_to_e4m3(v), c);
    EXPECT_EQ(cpu::f32_to_e4m3(-v), c | 0x80);
    EXPECT_EQ(cpu::f32_to_e4m3((v + next) / 2), (c % 2 == 0) ? c : c + 1) << c;
    EXPECT_EQ(cpu::f32_to_e4m3(v + (next - v) * 0.3f), c);
  }
  EXPECT_EQ(cpu::e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(cpu::e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(cpu::e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(cpu::f32_to_e4m3(1e6f), 0x7e);  // saturated
  EXPECT_TRUE(std::isnan(cpu::e4m3_to_f32(cpu::f32_to_e4m3(std::nanf("")))));
}

TEST(QuantizedLinear, Fp8IsItsDecodedWeight) {
  const int64_t in = 50, out = 31;
  const auto wv = test::randn(out * in, 14, 0.5f);
  const Tensor w = Tensor::from_vector(wv, {out, in});
  const WeightFormatScope scope(WeightFormat::kFp8);
  const Linear lin(w, Tensor(), ComputeType::kF32);
  EXPECT_LT(lin.weight_bytes(), static_cast<size_t>(out * in * 4) / 3);
  // Each row at its largest magnitude → 448, each value to its nearest e4m3.
  std::vector<float> dq(wv.size());
  for (int64_t n = 0; n < out; ++n) {
    float amax = 0;
    for (int64_t j = 0; j < in; ++j) amax = std::max(amax, std::fabs(wv[n * in + j]));
    const float s = amax / 448.0f;
    for (int64_t j = 0; j < in; ++j)
      dq[n * in + j] = s * cpu::e4m3_to_f32(cpu::f32_to_e4m3(wv[n * in + j] / s));
  }
  const int64_t m = 6;
  const auto x = test::randn(m * in, 15);
  std::vector<float> y(m * out), r(m * out), plain(m * out);
  lin.forward(x.data(), m, y.data());
  ref::linear(x.data(), dq.data(), nullptr, m, in, out, r.data());
  EXPECT_LT(test::rel_max_err(y, r), 1e-5);
  ref::linear(x.data(), wv.data(), nullptr, m, in, out, plain.data());
  EXPECT_LT(test::rel_max_err(y, plain), 0.1);
  EXPECT_GT(test::rel_max_err(y, plain), 1e-4);  // it is quantized
}

// --weights_dtype q8_0: the layer a GGUF Q8_0 matrix of the weight makes
// (ggml's quantizer; the same route, integers or decoded), bit for bit, in
// f32 and bf16; a layer whose inputs are not whole blocks keeps its
// weight as computed; NaN in a weight is one line.
TEST(QuantizedLinear, Q8_0WeightsAreTheGgufBlocksLayer) {
  const int64_t in = 96, out = 50, m = 7;
  const auto wv = test::randn(out * in, 16, 0.3f);
  const Tensor w = Tensor::from_vector(wv, {out, in});
  std::vector<uint8_t> blocks(out * in / 32 * 34);
  io::quantize_q8_0(wv.data(), out * in / 32, blocks.data());
  const auto x = test::randn(m * in, 17);
  for (const ComputeType ct : {ComputeType::kF32, ComputeType::kBF16}) {
    if (ct == ComputeType::kBF16 && !cpu_has_bf16()) continue;
    const Linear gguf({nn::block_rows(q8_rows(blocks, out, in), 0, out)}, Tensor(), ct,
                      Activation::kNone);
    const WeightFormatScope scope(WeightFormat::kQ8_0);
    const Linear lin(w, Tensor(), ct);
    EXPECT_EQ(lin.implementation(m), gguf.implementation(m));
    EXPECT_EQ(lin.weight_bytes(), gguf.weight_bytes());
    std::vector<float> y(m * out), want(m * out);
    lin.forward(x.data(), m, y.data());
    gguf.forward(x.data(), m, want.data());
    EXPECT_EQ(y, want) << (ct == ComputeType::kF32 ? "f32" : "bf16");
  }
  const Tensor odd_w = Tensor::from_vector(test::randn(5 * 40, 18), {5, 40});
  const Linear as_computed(odd_w, Tensor(), ComputeType::kF32);
  const WeightFormatScope scope(WeightFormat::kQ8_0);
  const Linear odd(odd_w, Tensor(), ComputeType::kF32);
  EXPECT_EQ(odd.implementation(3), as_computed.implementation(3));
  EXPECT_EQ(odd.weight_bytes(), as_computed.weight_bytes());
  auto bad = wv;
  bad[77] = std::nanf("");
  const std::string e = test::error_message([&] {
    Linear(Tensor::from_vector(bad, {out, in}), Tensor(), ComputeType::kF32);
  });
  EXPECT_NE(e.find("NaN or Inf"), std::string::npos) << e;
}

TEST(QuantizedLinear, WeightFormatNames) {
  EXPECT_EQ(parse_weight_format("q8_0"), WeightFormat::kQ8_0);
  EXPECT_EQ(weight_format_name(WeightFormat::kQ8_0), std::string("q8_0"));
  EXPECT_EQ(parse_weight_format("int8"), WeightFormat::kInt8);
  EXPECT_EQ(parse_weight_format("fp8"), WeightFormat::kFp8);
  EXPECT_EQ(parse_weight_format(""), WeightFormat::kCompute);
  EXPECT_EQ(parse_weight_format("bf16"), WeightFormat::kCompute);
  EXPECT_THROW(parse_weight_format("int4"), Error);
}

}  // namespace
}  // namespace xdit::kernels
