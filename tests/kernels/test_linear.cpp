// kernels::Linear (oneDNN, prepacked weights) against the plain reference, in
// f32 and bf16, for odd sizes and several row counts on one packed weight.
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <oneapi/dnnl/dnnl.hpp>
#include <set>

#include "core/aligned.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "io/weights.h"
#include "kernels/cpu/amx_gemm.h"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/convert.h"
#include "kernels/kernels.h"
#include "kernels/linear.h"
#include "kernels/reference.h"
#include "models/pixart.h"
#include "models/t5.h"
#include "nn/attention.h"
#include "test_util.h"

namespace xdit::kernels {
namespace {

void check(ComputeType ct, DType wdt, double tol) {
  const int64_t K = 93, N = 71;
  auto wv = test::randn(N * K, 1, 0.2f), bv = test::randn(N, 2);
  Tensor w = Tensor::from_vector(wv, {N, K}).to(wdt), b = Tensor::from_vector(bv, {N});
  // The reference sees exactly the weight values the layer was given.
  auto wq = w.to_vector();
  Linear lin(w, b, ct);
  for (int64_t M : {1, 7, 300, 257}) {
    auto x = test::randn(M * K, 3 + M);
    std::vector<float> y(M * N), r(M * N);
    lin.forward(x.data(), M, y.data());
    ref::linear(x.data(), wq.data(), bv.data(), M, K, N, r.data());
    EXPECT_LT(test::rel_max_err(y, r), tol) << "M=" << M;
    // accumulate: y += xWᵀ + b
    std::vector<float> acc = r;
    lin.forward(x.data(), M, acc.data(), /*accumulate=*/true);
    for (size_t i = 0; i < r.size(); ++i) r[i] *= 2;
    EXPECT_LT(test::rel_max_err(acc, r), tol) << "accumulate M=" << M;
  }
}

TEST(Linear, F32) {
  check(ComputeType::kF32, DType::kF32, 1e-5);
}
TEST(Linear, F32FromBf16AndF16Weights) {
  check(ComputeType::kF32, DType::kBF16, 1e-5);
  check(ComputeType::kF32, DType::kF16, 1e-5);
}
TEST(Linear, Bf16) {
  if (!cpu_has_bf16()) GTEST_SKIP() << "no native bf16 on this CPU";
  check(ComputeType::kBF16, DType::kF32, 2e-2);
}

// forward_to_bf16 → forward_bf16 (a bf16 hidden layer between two linears)
// equals the f32-hidden path to bf16 rounding, and refuses f32 layers.
TEST(Linear, Bf16HiddenBetweenTwoLayers) {
  if (!cpu_has_bf16()) GTEST_SKIP() << "no native bf16 on this CPU";
  const int64_t K = 45, H = 70, N = 33, M = 19;
  auto w1 = test::randn(H * K, 21, 0.3f), b1 = test::randn(H, 22),
       w2 = test::randn(N * H, 23, 0.3f), b2 = test::randn(N, 24), x = test::randn(M * K, 25);
  Linear l1(Tensor::from_vector(w1, {H, K}), Tensor::from_vector(b1, {H}), ComputeType::kBF16,
            Activation::kGeluTanh);
  Linear l2(Tensor::from_vector(w2, {N, H}), Tensor::from_vector(b2, {N}), ComputeType::kBF16);
  std::vector<float> h(M * H), want(M * N), got(M * N);
  l1.forward(x.data(), M, h.data());
  l2.forward(h.data(), M, want.data());
  std::vector<uint16_t> hb(M * H);
  l1.forward_to_bf16(x.data(), M, hb.data());
  for (int64_t i = 0; i < M * H; ++i)  // the bf16 hidden is the f32 hidden rounded
    EXPECT_NEAR(bf16_to_f32(hb[i]), h[i], 8e-3 * (std::fabs(h[i]) + 1e-3)) << i;
  l2.forward_bf16(hb.data(), M, got.data());
  EXPECT_LT(test::rel_max_err(got, want), 1e-2);
  Linear f32(Tensor::from_vector(w2, {N, H}), Tensor(), ComputeType::kF32);
  EXPECT_THROW(f32.forward_bf16(hb.data(), M, got.data()), Error);
  EXPECT_THROW(f32.forward_to_bf16(h.data(), M, hb.data()), Error);
}

// nn::Attention with bf16 layers: a bf16 x (self- and cross-attention) gives
// bit for bit what the f32 x gives (the layer rounds it the same way), and the
// attention's output written in bf16 for the output projection (the serial
// backend on the CPU) gives bit for bit what the f32 output converted does.
TEST(Linear, AttentionBf16InputsAndOutputMatchTheF32Path) {
  if (!cpu_has_bf16()) GTEST_SKIP() << "no native bf16 on this CPU";
  struct F32Out : nn::AttentionBackend {  // the serial attention, told to write f32
    void attend(const AttentionArgs& a, const nn::AttentionSite& s) override {
      nn::serial_attention().attend(a, s);
    }
  } f32_out;
  ASSERT_TRUE(nn::serial_attention().takes_bf16());
  ASSERT_FALSE(f32_out.takes_bf16());
  const int64_t dim = 80, heads = 2, hd = 40, ctx_dim = 56, B = 2, S = 37, L = 9;
  io::RandomWeights w(5);
  auto x = test::randn(B * S * dim, 41), ctx = test::randn(B * L * ctx_dim, 42);
  std::vector<uint16_t> xb(x.size());
  to_bf16_array(x.data(), xb.data(), B * S * dim);
  std::vector<uint8_t> mask(B * L, 1);
  mask[L + 3] = 0;
  for (const int64_t kv_dim : {int64_t{0}, ctx_dim}) {
    nn::Attention att(w, kv_dim == 0 ? "self" : "cross", dim, heads, hd, kv_dim, true,
                      ComputeType::kBF16);
    ASSERT_TRUE(att.bf16_input());
    const float* c = kv_dim == 0 ? nullptr : ctx.data();
    const int64_t cl = kv_dim == 0 ? 0 : L;
    const uint8_t* cm = kv_dim == 0 ? nullptr : mask.data();
    nn::AttentionScratch scratch;
    std::vector<float> want(B * S * dim), got_out(want.size()), got_in(want.size());
    att.forward(x.data(), B, S, c, cl, cm, want.data(), f32_out, {}, scratch);
    att.forward(x.data(), B, S, c, cl, cm, got_out.data(), nn::serial_attention(), {}, scratch);
    att.forward(xb.data(), B, S, c, cl, cm, got_in.data(), nn::serial_attention(), {}, scratch);
    EXPECT_EQ(got_out, want) << (kv_dim == 0 ? "self" : "cross");
    EXPECT_EQ(got_in, want) << (kv_dim == 0 ? "self" : "cross");
    float largest = 0.0f;  // the outputs are not all zeros
    for (float v : want) largest = std::max(largest, std::fabs(v));
    EXPECT_GT(largest, 1e-3f);
  }
  nn::Attention f32(w, "f32", dim, heads, hd, 0, true, ComputeType::kF32);
  EXPECT_FALSE(f32.bf16_input());
}

TEST(Linear, FusedGeluTanh) {
  const int64_t K = 45, N = 33, M = 19;
  auto wv = test::randn(N * K, 5, 0.3f), bv = test::randn(N, 6), x = test::randn(M * K, 7);
  for (ComputeType ct : {ComputeType::kF32, ComputeType::kBF16}) {
    if (ct == ComputeType::kBF16 && !cpu_has_bf16()) continue;
    Linear lin(Tensor::from_vector(wv, {N, K}), Tensor::from_vector(bv, {N}), ct,
               Activation::kGeluTanh);
    std::vector<float> y(M * N), r(M * N);
    lin.forward(x.data(), M, y.data());
    ref::linear(x.data(), wv.data(), bv.data(), M, K, N, r.data());
    for (auto& v : r) v = ref::gelu_tanh(v);
    EXPECT_LT(test::rel_max_err(y, r), ct == ComputeType::kF32 ? 1e-5 : 2e-2);
  }
}

// y = a · bᵀ in double from the bf16-rounded operands, and Σ|a·b| per value
// (the scale of the f32 accumulation's rounding).
void reference_bf16(const std::vector<float>& a, const std::vector<float>& w, int64_t m, int64_t k,
                    int64_t n, std::vector<double>& y, std::vector<double>& mag) {
  y.assign(static_cast<size_t>(m * n), 0.0);
  mag.assign(y.size(), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, t = 0;
      for (int64_t q = 0; q < k; ++q) {
        const double p = static_cast<double>(bf16_to_f32(f32_to_bf16(a[i * k + q]))) *
                         bf16_to_f32(f32_to_bf16(w[j * k + q]));
        s += p;
        t += std::fabs(p);
      }
      y[i * n + j] = s;
      mag[i * n + j] = t;
    }
}

// The AMX tile GEMM against a double reference: row tails (m not a multiple
// of 32, m < 32), two reduction chunks (k > 2048) cut into sub-chunks, one
// chunk of two uneven sub-chunks (17 steps: 9 + 8), two row blocks, and each
// epilogue (bias, tanh GELU, accumulate, bf16 out); f32 and bf16 rows of a
// give the same bits. The last case's 4.5 MB f32 result is stored
// non-temporally into 64-byte aligned buffers; stored one float off that
// alignment (ordinary stores) it has the same bits.
TEST(Linear, AmxTileGemmMatchesTheReference) {
  if (!cpu::amx_gemm_takes(64, 64)) GTEST_SKIP() << "no AMX tiles on this CPU";
  struct Case {
    int64_t m, k, n;
  };
  for (const Case c : {Case{1, 64, 64}, Case{37, 96, 96}, Case{200, 2080, 64}, Case{400, 2112, 96},
                       Case{1061, 544, 1056}}) {
    const std::string what =
        std::to_string(c.m) + "x" + std::to_string(c.k) + "x" + std::to_string(c.n);
    auto a = test::randn(c.m * c.k, 51), w = test::randn(c.n * c.k, 52, 0.2f),
         bias = test::randn(c.n, 53), prior = test::randn(c.m * c.n, 54);
    std::vector<uint16_t> packed(static_cast<size_t>(c.k * c.n)), ab(a.size());
    cpu::pack_bf16_ba16a_b2a(w.data(), false, c.n, c.k, 32, packed.data());
    to_bf16_array(a.data(), ab.data(), c.m * c.k);
    std::vector<double> ref, mag;
    reference_bf16(a, w, c.m, c.k, c.n, ref, mag);
    const size_t mn = static_cast<size_t>(c.m * c.n);
    AlignedVector<float> y(mn), yb(mn + 1), g(mn), acc(prior.begin(), prior.end());
    AlignedVector<uint16_t> g16(mn);
    cpu::AmxGemmOut o;
    o.y = y.data();
    cpu::amx_gemm(a.data(), true, c.m, c.k, packed.data(), c.n, o);
    o.y = yb.data() + 1;
    cpu::amx_gemm(ab.data(), false, c.m, c.k, packed.data(), c.n, o);
    ASSERT_TRUE(std::equal(y.begin(), y.end(), yb.begin() + 1)) << what;
    o.y = acc.data();
    o.bias = bias.data();
    o.accumulate = true;
    cpu::amx_gemm(ab.data(), false, c.m, c.k, packed.data(), c.n, o);
    o.accumulate = false;
    o.gelu_tanh = true;
    o.y = g.data();
    cpu::amx_gemm(ab.data(), false, c.m, c.k, packed.data(), c.n, o);
    o.y = g16.data();
    o.bf16 = true;
    cpu::amx_gemm(ab.data(), false, c.m, c.k, packed.data(), c.n, o);
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        const size_t at = static_cast<size_t>(i * c.n + j);
        const double tol = 1e-5 * mag[at] + 1e-6, biased = ref[at] + bias[j];
        const double gelu = ref::gelu_tanh(static_cast<float>(biased));
        ASSERT_NEAR(y[at], ref[at], tol) << what << " [" << i << ", " << j << "]";
        ASSERT_NEAR(acc[at], prior[at] + biased, tol) << what << " accumulate";
        ASSERT_NEAR(g[at], gelu, tol + 1e-6 * std::fabs(gelu)) << what << " gelu";
        ASSERT_NEAR(bf16_to_f32(g16[at]), gelu, tol + 4e-3 * std::fabs(gelu)) << what << " bf16";
      }
  }
}

// A bf16 layer the tile GEMM may run runs every row count on it (oneDNN when
// XDIT_GEMM=onednn) and agrees with the reference.
TEST(Linear, AmxTileGemmRunsEveryRowCount) {
  const int64_t K = 96, N = 64 * omp_get_max_threads();
  if (!cpu::amx_gemm_takes(K, N)) GTEST_SKIP() << "no AMX tiles on this CPU";
  auto w = test::randn(N * K, 61, 0.2f), b = test::randn(N, 62);
  Linear lin(Tensor::from_vector(w, {N, K}), Tensor::from_vector(b, {N}), ComputeType::kBF16);
  const char* gemm = std::getenv("XDIT_GEMM");
  const bool tiles = gemm == nullptr || std::string(gemm) != "onednn";
  for (const int64_t m : {int64_t{45}, int64_t{600}, int64_t{2050}}) {
    const std::string impl = lin.implementation(m);
    EXPECT_EQ(impl == "xdit:amx_tiles", tiles) << m << " rows: " << impl;
    EXPECT_NE(impl.rfind("ref", 0), 0u) << impl;
    auto x = test::randn(m * K, 63 + m);
    std::vector<double> ref, mag;
    reference_bf16(x, w, m, K, N, ref, mag);
    std::vector<float> y(static_cast<size_t>(m * N));
    lin.forward(x.data(), m, y.data());
    for (int64_t i = 0; i < m * N; ++i)
      ASSERT_NEAR(y[i], ref[i] + b[i % N], 1e-5 * mag[i] + 1e-5) << m << " rows, " << i;
  }
}

TEST(Linear, RejectsWrongBias) {
  Tensor w = Tensor::from_vector(test::randn(6, 1), {2, 3});
  Tensor b = Tensor::from_vector(test::randn(3, 1), {3});
  EXPECT_THROW(Linear(w, b, ComputeType::kF32), Error);
}

// RandomWeights stored in bf16, but for the names in `f32`.
class StoredBf16 : public io::RandomWeights {
 public:
  explicit StoredBf16(std::set<std::string> f32) : RandomWeights(5), f32_(std::move(f32)) {}

 protected:
  Tensor read(const std::string& n, const Shape& e) const override {
    return as_stored(n, RandomWeights::read(n, e));
  }
  Tensor read_slice(const std::string& n, const Shape& e, int dim, int64_t begin,
                    int64_t count) const override {
    return as_stored(n, RandomWeights::read_slice(n, e, dim, begin, count));
  }

 private:
  Tensor as_stored(const std::string& n, Tensor t) const {
    return f32_.count(n) != 0 ? t : t.to(DType::kBF16);
  }
  std::set<std::string> f32_;
};

// `fused_in_bf16`: the fused layers are assembled in bf16 (their first part
// is stored so), a part stored in f32 then rounded to bf16.
void check_staged_loads(const io::WeightSource& w, bool fused_in_bf16) {
  const int64_t M = 5;
  const nn::TensorParallel whole, half{1, 2, nullptr};  // rank 1 of 2, only loading
  // [rows, cols] of `name` [out, in]: rows [r0, r0 + nr), columns [c0, c0 + nc).
  const auto block = [&](const std::string& name, int64_t out, int64_t in, int64_t r0, int64_t nr,
                         int64_t c0, int64_t nc) {
    const auto all = w.get(name, {out, in}).to_vector();
    std::vector<float> b;
    for (int64_t r = r0; r < r0 + nr; ++r)
      b.insert(b.end(), all.begin() + r * in + c0, all.begin() + r * in + c0 + nc);
    return b;
  };
  const auto expect_layer = [&](const Linear& l, int64_t in, const std::vector<float>& weight,
                                const std::vector<float>& bias, const char* what) {
    const int64_t out = l.out_features();
    ASSERT_EQ(static_cast<int64_t>(weight.size()), out * in) << what;
    const auto x = test::randn(M * in, 11);
    std::vector<float> y(static_cast<size_t>(M * out)), r(y.size());
    l.forward(x.data(), M, y.data());
    ref::linear(x.data(), weight.data(), bias.empty() ? nullptr : bias.data(), M, in, out,
                r.data());
    EXPECT_LT(test::rel_max_err(y, r), 1e-5) << what;
  };
  Linear fused, fused_half, row_half, grown;
  {
    const nn::LoadStaging outer;
    fused =
        nn::load_fused_linear(w, {"a.q", "a.k", "a.v"}, 37, {20, 24, 28}, true, ComputeType::kF32);
    fused_half = nn::load_fused_linear(w, {"a.q", "a.k", "a.v"}, 37, {20, 24, 28}, true,
                                       ComputeType::kF32, half);
    row_half = nn::load_row_linear(w, "b.o", {18, 26}, 31, true, ComputeType::kF32, half);
    {
      const nn::LoadStaging inner;  // shares the outer one's buffer, which grows here
      grown = nn::load_fused_linear(w, {"c.q", "c.k"}, 301, {150, 170}, false, ComputeType::kF32);
    }
  }
  const auto as_fused = [&](std::vector<float> v) {
    if (!fused_in_bf16) return v;
    const int64_t n = static_cast<int64_t>(v.size());
    return Tensor::from_vector(v, {n}).to(DType::kBF16).to_vector();
  };
  std::vector<float> wf, bf, wh, bh;
  for (const auto& [name, out] :
       std::vector<std::pair<std::string, int64_t>>{{"a.q", 20}, {"a.k", 24}, {"a.v", 28}}) {
    const auto rows = as_fused(block(name + ".weight", out, 37, 0, out, 0, 37));
    wf.insert(wf.end(), rows.begin(), rows.end());
    const auto b = w.get(name + ".bias", {out}).to_vector();
    bf.insert(bf.end(), b.begin(), b.end());
    const auto second = as_fused(block(name + ".weight", out, 37, out / 2, out / 2, 0, 37));
    wh.insert(wh.end(), second.begin(), second.end());
    bh.insert(bh.end(), b.begin() + out / 2, b.end());
  }
  expect_layer(fused, 37, wf, bf, "fused q/k/v");
  expect_layer(fused_half, 37, wh, bh, "rank 1's half of the fused q/k/v");
  // Row-parallel, rank 1: the second half of each part's columns, no bias (rank 0 adds it).
  std::vector<float> wr;
  const auto p0 = block("b.o.weight", 31, 44, 0, 31, 9, 9);
  const auto p1 = block("b.o.weight", 31, 44, 0, 31, 18 + 13, 13);
  for (int64_t r = 0; r < 31; ++r) {
    wr.insert(wr.end(), p0.begin() + r * 9, p0.begin() + (r + 1) * 9);
    wr.insert(wr.end(), p1.begin() + r * 13, p1.begin() + (r + 1) * 13);
  }
  expect_layer(row_half, 22, wr, {}, "rank 1's columns of the row-parallel o");
  std::vector<float> wg = as_fused(block("c.q.weight", 150, 301, 0, 150, 0, 301));
  const auto k = as_fused(block("c.k.weight", 170, 301, 0, 170, 0, 301));
  wg.insert(wg.end(), k.begin(), k.end());
  expect_layer(grown, 301, wg, {}, "fused q/k loaded in the nested staging");
}

// load_fused_linear and load_row_linear assemble their matrix in the
// LoadStaging buffer while one lives (in bf16 when the weights are stored
// so). Each layer must hold this rank's rows (fused) or columns
// (row-parallel) of the stored weights, and keep them after later loads
// reuse the buffer, grow it (the old block freed) and end it.
TEST(Linear, LoadsThroughTheStagingBufferKeepTheirWeights) {
  check_staged_loads(io::RandomWeights(5), false);
  check_staged_loads(StoredBf16({}), true);
  check_staged_loads(StoredBf16({"a.k.weight", "c.k.weight"}), true);
}

// A fused layer built from its parts (stored bf16, f16 and f32) computes
// what the layer of the stacked weight computes, bit for bit. Parts that
// fill whole 64-output blocks are packed from where they lie on a CPU whose
// oneDNN matmul takes the blocked bf16 layout (AVX-512-bf16 without AMX: the
// stacked weight is never asked for); parts that do not (70 rows) are
// stacked once, on every CPU and compute type.
TEST(Linear, FusedLayerFromItsPartsEqualsTheStackedWeight) {
  const ComputeType ct = resolve_compute_type(DType::kBF16);
  const int64_t in = 37, M = 9;
  const auto x = test::randn(M * in, 3);
  for (const std::vector<int64_t>& outs :
       {std::vector<int64_t>{128, 64, 71}, std::vector<int64_t>{70, 64, 33}}) {
    std::vector<Tensor> parts;
    std::vector<float> all;
    const DType stored[] = {DType::kBF16, DType::kF16, DType::kF32};
    for (size_t i = 0; i < outs.size(); ++i) {
      parts.push_back(Tensor::from_vector(test::randn(outs[i] * in, 40 + i, 0.2f), {outs[i], in})
                          .to(stored[i]));
      const auto v = parts.back().to_vector();  // the values as stored
      all.insert(all.end(), v.begin(), v.end());
    }
    const int64_t out = static_cast<int64_t>(all.size()) / in;
    const Tensor whole = Tensor::from_vector(all, {out, in});
    const auto bias = Tensor::from_vector(test::randn(out, 7), {out});
    int calls = 0;
    const Linear fused(parts, bias, ct, Activation::kNone, [&] {
      ++calls;
      return whole;
    });
    const Linear ref(whole, bias, ct);
    std::vector<float> y(static_cast<size_t>(M * out)), r(y.size());
    fused.forward(x.data(), M, y.data());
    ref.forward(x.data(), M, r.data());
    EXPECT_EQ(y, r) << "parts of " << outs[0] << " rows first";
    if (outs[0] % 64 != 0)
      EXPECT_EQ(calls, 1);
    else if (ct == ComputeType::kBF16 && !cpu::amx_tiles_ready())
      EXPECT_EQ(calls, 0);
    else
      EXPECT_LE(calls, 1);
  }
}

// pack_bf16_ba16a_b2a writes, byte for byte, what oneDNN's reorder writes
// for BA16a64b2a and BA16a32b2a (padding included), from f32 and from bf16
// weights of sizes that are and are not whole blocks (32-output blocks are
// the AMX tile GEMM's panels). Rows from a whole block on,
// packed as a matrix of their own at ba16a_b2a_offset, land where the whole
// matrix's pack puts them (fused layers pack each part so).
TEST(Linear, BlockedBf16PackingEqualsOnednnReorder) {
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(eng);
  for (const int64_t block : {64, 32}) {
    for (const auto& [out, in] : std::vector<std::pair<int64_t, int64_t>>{
             {128, 64}, {71, 37}, {200, 96}, {1152, 1152}, {65, 33}, {3, 5}, {96, 160}}) {
      for (const bool bf16 : {false, true}) {
        const std::string what = std::to_string(out) + " x " + std::to_string(in) +
                                 (bf16 ? " bf16" : " f32") + ", blocks of " + std::to_string(block);
        Tensor w = Tensor::from_vector(test::randn(out * in, out + in, 0.3f), {out, in});
        if (bf16) w = w.to(DType::kBF16);
        const dnnl::memory::desc user({in, out}, bf16 ? dt::bf16 : dt::f32, tag::ba);
        const dnnl::memory::desc packed({in, out}, dt::bf16,
                                        block == 64 ? tag::BA16a64b2a : tag::BA16a32b2a);
        dnnl::memory src(user, eng, const_cast<void*>(w.raw())), want(packed, eng);
        dnnl::reorder(src, want).execute(stream, src, want);
        stream.wait();
        const size_t n = packed.get_size() / 2;
        ASSERT_EQ(n,
                  static_cast<size_t>((out + block - 1) / block * block * ((in + 31) / 32 * 32)));
        const auto* ref = static_cast<const uint16_t*>(want.get_data_handle());
        const auto differ = [&](const std::vector<uint16_t>& got) {
          size_t d = 0;
          for (size_t i = 0; i < n; ++i) d += got[i] != ref[i];
          return d;
        };
        std::vector<uint16_t> got(n, 0xffff);
        cpu::pack_bf16_ba16a_b2a(w.raw(), bf16, out, in, block, got.data());
        EXPECT_EQ(differ(got), 0u) << what;
        if (out > block) {  // rows [0, block) and [block, out) packed apart
          std::vector<uint16_t> parts(n, 0xffff);
          const size_t esize = bf16 ? 2 : 4;
          cpu::pack_bf16_ba16a_b2a(w.raw(), bf16, block, in, block, parts.data());
          cpu::pack_bf16_ba16a_b2a(static_cast<const char*>(w.raw()) + block * in * esize, bf16,
                                   out - block, in, block,
                                   parts.data() + cpu::ba16a_b2a_offset(block, in, block));
          EXPECT_EQ(differ(parts), 0u) << what << ", in two parts";
        }
      }
    }
  }
}

// Every matmul of a full-size PixArt-α step at 1024 px with CFG (8192 token
// rows, 240 text rows, 2 timestep rows) and of T5-XXL (120 and 240 tokens)
// has a JIT kernel in the compute type this CPU uses; primitives are created,
// not run.
TEST(Linear, FullSizePixArtAndT5MatmulsHaveJitKernels) {
  const ComputeType ct = resolve_compute_type(DType::kBF16);
  std::set<std::pair<int64_t, int64_t>> shapes;  // (out, in)
  for (const auto& [name, shape] : models::PixArtConfig::alpha_xl_1024().weight_specs())
    if (shape.size() == 2 && name.find("scale_shift_table") == std::string::npos)
      shapes.insert({shape[0], shape[1]});
  for (const auto& [name, shape] : models::T5Config::xxl().weight_specs())
    if (shape.size() == 2 && name.find("layer.") != std::string::npos)
      shapes.insert({shape[0], shape[1]});
  // The fused projections: PixArt's q/k/v and k/v, T5's q/k/v and wi_0/wi_1.
  for (auto fused :
       {std::pair<int64_t, int64_t>{3456, 1152}, {2304, 1152}, {12288, 4096}, {20480, 4096}})
    shapes.insert(fused);
  io::RandomWeights random(5);
  for (const auto& [out, in] : shapes) {
    Linear lin(random.get("w", {out, in}), random.get("b", {out}), ct);
    for (int64_t m : {2, 120, 240, 8192}) {
      const std::string impl = lin.implementation(m);
      EXPECT_NE(impl.rfind("ref", 0), 0u) << m << "x" << in << " -> " << out << ": " << impl;
    }
  }
  EXPECT_GE(shapes.size(), 10u);
  // The bf16 output of the feed-forward's first layer too.
  Linear fc1(random.get("w", {4608, 1152}), random.get("b", {4608}), ct, Activation::kGeluTanh);
  if (fc1.is_bf16()) {
    std::vector<float> x(2 * 1152, 0.5f);
    std::vector<uint16_t> y(2 * 4608);
    fc1.forward_to_bf16(x.data(), 2, y.data());  // creates its primitive (2 rows)
  }
}

// The attention products of the same work: PixArt-α self- and cross-attention
// at 512 and 1024 px (16 heads × 72; 120 text tokens), a PipeFusion patch of
// 1024 queries on 4096 keys, and T5-XXL (64 × 64 on 120 tokens).
TEST(Attention, FullSizeProductsHaveJitKernels) {
  struct Case {
    int64_t q, kv, d;
  };
  for (const Case c : {Case{4096, 4096, 72},
                       {4096, 120, 72},
                       {1024, 1024, 72},
                       {1024, 120, 72},
                       {1024, 4096, 72},
                       {120, 120, 64}})
    for (const std::string& impl : attention_implementations(c.q, c.kv, c.d, true))
      EXPECT_NE(impl.rfind("ref", 0), 0u)
          << "q " << c.q << ", kv " << c.kv << ", head_dim " << c.d << ": " << impl;
}

}  // namespace
}  // namespace xdit::kernels
