// Blockwise attention against full-matrix attention: output and log-sum-exp,
// several key blocks, key padding masks, strided layouts, f32 and bf16.
#include <gtest/gtest.h>

#include "core/error.h"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/softmax_row.h"
#include "kernels/kernels.h"
#include "kernels/reference.h"
#include "test_util.h"

namespace xdit::kernels {
namespace {

struct Case {
  int64_t B, H, Sq, Sk, D;
  bool mask;
  bool bias = false;
};

// a with its outputs pointed at out and lse.
AttentionArgs into(AttentionArgs a, std::vector<float>& out, std::vector<float>& lse) {
  a.out = out.data();
  a.lse = lse.data();
  return a;
}

// Runs attention on case c (random Q/K/V in strided rows) and returns out
// and lse; with `check`, asserts both against the full-matrix reference.
std::pair<std::vector<float>, std::vector<float>> run(const Case& c, bool bf16, double tol,
                                                      bool check = true) {
  // Q/K/V live inside wider rows (stride > H·D), as slices of a fused QKV would.
  const int64_t qs = c.H * c.D + 5, ks = c.H * c.D + 3, os = c.H * c.D + 1;
  auto q = test::randn(c.B * c.Sq * qs, 1), k = test::randn(c.B * c.Sk * ks, 2),
       v = test::randn(c.B * c.Sk * ks, 3);
  std::vector<uint8_t> mask(c.B * c.Sk, 1);
  if (c.mask)
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t j = 0; j < c.Sk; ++j) mask[b * c.Sk + j] = (j * 7 + b) % 3 != 0 && j < c.Sk - b;
  AttentionArgs a;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.q_stride = qs;
  a.k_stride = ks;
  a.v_stride = ks;
  a.out_stride = os;
  a.batch = c.B;
  a.heads = c.H;
  a.q_len = c.Sq;
  a.kv_len = c.Sk;
  a.head_dim = c.D;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
  a.key_mask = c.mask ? mask.data() : nullptr;
  auto bias = test::randn(c.H * c.Sq * c.Sk, 4, 2.0f);
  a.bias = c.bias ? bias.data() : nullptr;
  a.bf16 = bf16;
  std::vector<float> out(c.B * c.Sq * os, 0.0f), ref_out(out.size(), 0.0f);
  std::vector<float> lse(c.B * c.H * c.Sq), ref_lse(lse.size());
  attention(into(a, out, lse));
  if (check) {
    ref::attention(into(a, ref_out, ref_lse));
    EXPECT_LT(test::rel_max_err(out, ref_out), tol);
    for (size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(lse[i], ref_lse[i], tol * 10) << i;
  }
  return {out, lse};
}

TEST(Attention, SingleBlockF32) {
  set_attention_blocks(128, 512);
  run({2, 3, 37, 29, 8, false}, false, 1e-5);
}

TEST(Attention, ManyBlocksF32) {
  set_attention_blocks(16, 24);  // forces several query and key blocks, ragged tails
  run({2, 3, 101, 77, 12, false}, false, 1e-5);
  run({1, 2, 45, 130, 72, false}, false, 1e-5);
  set_attention_blocks(128, 512);
}

TEST(Attention, KeyPaddingMaskF32) {
  set_attention_blocks(16, 8);
  run({3, 2, 33, 19, 8, true}, false, 1e-5);
  set_attention_blocks(128, 512);
}

TEST(Attention, AdditiveBiasWithMaskAndBlocks) {
  set_attention_blocks(16, 8);  // the bias must follow the kept keys' original positions
  run({3, 2, 33, 19, 8, true, true}, false, 1e-5);
  run({2, 3, 20, 41, 16, false, true}, false, 1e-5);
  set_attention_blocks(128, 512);
}

TEST(Attention, Bf16) {
  if (!cpu_has_bf16()) GTEST_SKIP() << "no native bf16 on this CPU";
  set_attention_blocks(32, 64);
  run({2, 4, 150, 140, 72, false}, true, 3e-2);
  run({2, 2, 50, 21, 16, true}, true, 3e-2);
  set_attention_blocks(128, 512);
}

// The key and value packs of the tile products are vector shuffles that run
// on any AVX-512 CPU: each word against the layouts amx_tiles.h describes,
// for 64 keys, a head dim of 96 (three 32-deep chunks) and values of 80
// columns in rows of 96.
TEST(Attention, AmxKeyAndValuePacksFollowTheTileLayouts) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw"))
    GTEST_SKIP() << "no AVX-512 BW on this CPU (the packs are only used with AMX)";
  const int64_t keys = 64, dp = 96, dv = 80;
  std::vector<uint16_t> rows(keys * dp);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<uint16_t>(i * 2654435761u >> 7);
  std::vector<uint16_t> k(keys * dp, 0xffff), v(keys * dv, 0xffff);
  cpu::amx_pack_k(rows.data(), keys, dp, k.data());
  cpu::amx_pack_v(rows.data(), keys, dp, dv, v.data());
  size_t k_wrong = 0, v_wrong = 0;
  // K: per 16 keys and 32-deep chunk a tile [16 dim pairs][16 keys][2].
  for (int64_t g = 0; g < keys / 16; ++g)
    for (int64_t c = 0; c < dp / 32; ++c)
      for (int64_t i = 0; i < 16; ++i)
        for (int64_t n = 0; n < 16; ++n)
          for (int64_t e = 0; e < 2; ++e)
            k_wrong += k[((g * (dp / 32) + c) * 16 + i) * 32 + 2 * n + e] !=
                       rows[(g * 16 + n) * dp + c * 32 + 2 * i + e];
  // V: per 32 keys and 16 columns a tile [16 key pairs][16 columns][2].
  for (int64_t c = 0; c < keys / 32; ++c)
    for (int64_t g = 0; g < dv / 16; ++g)
      for (int64_t i = 0; i < 16; ++i)
        for (int64_t m = 0; m < 16; ++m)
          for (int64_t e = 0; e < 2; ++e)
            v_wrong += v[((c * (dv / 16) + g) * 16 + i) * 32 + 2 * m + e] !=
                       rows[(c * 32 + 2 * i + e) * dp + g * 16 + m];
  EXPECT_EQ(k_wrong, 0u);
  EXPECT_EQ(v_wrong, 0u);
}

// The hand-written AMX tile products (the default for bf16 on AMX) against
// oneDNN's matmuls on the same packed bf16 operands: head dims whose value
// width is an odd number of 16-column tiles (40 → 48, 72 → 80) and a single
// one (16), query counts off the 32-row granule, several key blocks with
// ragged tails (which the next-block pieces interleave with), key masks.
TEST(Attention, AmxTileProductsMatchOneDnnMatmuls) {
  if (!cpu::amx_tiles_ready()) GTEST_SKIP() << "no AMX tiles on this CPU (oneDNN matmuls only)";
  const Case cases[] = {{2, 3, 150, 140, 72, false},
                        {1, 2, 45, 130, 40, true},
                        {2, 2, 33, 97, 16, false},
                        {1, 2, 70, 300, 72, false, true}};
  for (const auto& [qb, kb] : {std::pair<int64_t, int64_t>{32, 64}, {128, 512}, {40, 96}}) {
    set_attention_blocks(qb, kb);
    for (const Case& c : cases) {
      set_attention_tiles(true);
      const auto tiles = run(c, true, 3e-2);
      set_attention_tiles(false);
      const auto onednn = run(c, true, 3e-2, false);
      // The same bf16 products with f32 sums in another order.
      EXPECT_LT(test::rel_max_err(tiles.first, onednn.first), 1e-4)
          << "blocks " << qb << "×" << kb << ", D " << c.D;
      EXPECT_LT(test::rel_max_err(tiles.second, onednn.second), 1e-5);
    }
  }
  set_attention_tiles(true);
  set_attention_blocks(128, 512);
}

// A later key block whose scores lie far above the running maximum (by more
// than the exponent's headroom) restarts the softmax from its own maximum;
// small key blocks put the jump several blocks in. With scale 1 the jump
// (~40) stays below f32's exp range, where the fused AMX blocks renormalise
// the row; with scale 2.5 (~100) their exponentials overflow, and the query
// block must start again on the two-pass path. The jump starts at key 70
// (later fused blocks follow the renormalised one), and at scale 1 also in
// the ragged last block (nothing follows it, so a wrong renormalisation
// cannot be hidden by a later overflow sending the block back through the
// two-pass path; at scale 2.5 the few jumping keys there put bf16's input
// rounding past the tolerance on every path, the previous kernel's too).
// The last case's values are 1e20: the jump's exponentials (~e^48) are
// finite but P·V overflows f32 in the fused block, which the two-pass path
// (every p ≤ 1) does not; the row must not come out infinite.
TEST(Attention, ScoresJumpingFarAboveTheRunningMaximum) {
  set_attention_blocks(16, 32);
  const int64_t B = 1, H = 2, Sq = 21, Sk = 100, D = 72;
  const auto q = test::randn(B * Sq * H * D, 31);
  struct Case {
    int64_t from;
    float scale, v_scale;
  };
  for (const auto& [from, scale, v_scale] :
       {Case{70, 1.0f, 1.0f}, Case{70, 2.5f, 1.0f}, Case{96, 1.0f, 1.0f}, Case{70, 1.0f, 1e20f}}) {
    auto k = test::randn(B * Sk * H * D, 32), v = test::randn(B * Sk * H * D, 33);
    for (auto& x : v) x *= v_scale;
    for (int64_t t = from; t < Sk; ++t)  // keys aligned with every query: scores of ~+60
      for (int64_t i = 0; i < H * D; ++i) k[t * H * D + i] = q[(t % Sq) * H * D + i] * 0.9f + 0.5f;
    for (bool bf16 : {false, true}) {
      if (bf16 && !cpu_has_bf16()) continue;
      AttentionArgs a;
      a.q = q.data(), a.k = k.data(), a.v = v.data();
      a.q_stride = a.k_stride = a.v_stride = a.out_stride = H * D;
      a.batch = B, a.heads = H, a.q_len = Sq, a.kv_len = Sk, a.head_dim = D, a.scale = scale;
      a.bf16 = bf16;
      std::vector<float> out(B * Sq * H * D), want(out.size()), lse(B * H * Sq),
          want_lse(lse.size());
      attention(into(a, out, lse));
      ref::attention(into(a, want, want_lse));
      EXPECT_LT(test::rel_max_err(out, want), bf16 ? 3e-2 : 1e-5)
          << (bf16 ? "bf16" : "f32") << ", scale " << scale << ", jump at key " << from;
      for (size_t i = 0; i < lse.size(); ++i)
        ASSERT_NEAR(lse[i], want_lse[i], (bf16 ? 2e-2 : 1e-4) * std::fabs(want_lse[i]))
            << i << ", scale " << scale << ", jump at key " << from;
    }
  }
  set_attention_blocks(128, 512);
}

// The softmax's exponentials against std::exp, in f32 and bf16 output, on a
// ragged row (odd length, padded), with −∞ and far-negative scores giving 0
// and an overflowing one giving +∞ in the sum the caller checks.
TEST(Attention, SoftmaxRowExponentialsMatchStdExp) {
  const int64_t n = 77, n_pad = 96;
  const float scale = 0.37f, m = 3.25f;
  auto s = test::randn(n, 41);
  for (auto& x : s) x *= 12.0f;  // exponents over about ±40
  s[5] = -INFINITY;
  s[6] = -1e30f;
  s[7] = -300.0f;
  for (bool bf16 : {false, true}) {
    if (bf16 && !cpu_has_bf16()) continue;
    std::vector<float> pf(n_pad, 7.0f);
    std::vector<uint16_t> pb(n_pad, 7);
    const float sum = cpu::exp_row(s.data(), n, n_pad, scale, m, bf16 ? nullptr : pf.data(),
                                   bf16 ? pb.data() : nullptr);
    double want_sum = 0.0;
    for (int64_t i = 0; i < n_pad; ++i) {
      const double want = i < n ? std::exp(static_cast<double>(s[i]) * scale - m) : 0.0;
      want_sum += want;
      const double got = bf16 ? bf16_to_f32(pb[i]) : pf[i];
      // bf16 rounds to half its 2^-7 ulp; the degree-3 polynomial adds 1e-4,
      // the degree-5 one 2e-7.
      ASSERT_NEAR(got, want, (bf16 ? 4e-3 : 1e-6) * want + 1e-38) << i << (bf16 ? " bf16" : "");
    }
    EXPECT_NEAR(sum, want_sum, 2e-4 * want_sum) << (bf16 ? "bf16" : "f32");
    s[8] = 300.0f / scale;  // exp(300 − m) overflows f32
    const float inf_sum = cpu::exp_row(s.data(), n, n_pad, scale, m, bf16 ? nullptr : pf.data(),
                                       bf16 ? pb.data() : nullptr);
    EXPECT_EQ(inf_sum, INFINITY);
    s[8] = 0.5f;
  }
}

TEST(Attention, PrepackedKVGivesTheSameResultAsStridedKV) {
  // K/V packed in two pieces at token offsets (as PipeFusion's buffers fill),
  // then attention from the packed buffer: bit-equal to packing inside the
  // call, in f32 and (where the CPU has it) bf16; the unpacked copy round-trips
  // (exactly in f32, to bf16 rounding otherwise).
  set_attention_blocks(16, 24);
  const int64_t B = 2, H = 3, Sq = 19, Sk = 53, D = 8, ks = H * D + 3, split = 21;
  auto q = test::randn(B * Sq * H * D, 7), k = test::randn(B * Sk * ks, 8),
       v = test::randn(B * Sk * ks, 9);
  for (bool bf16 : {false, true}) {
    if (bf16 && !cpu_has_bf16()) continue;
    AttentionArgs a;
    a.q = q.data(), a.k = k.data(), a.v = v.data();
    a.q_stride = a.out_stride = H * D;
    a.k_stride = a.v_stride = ks;
    a.batch = B, a.heads = H, a.q_len = Sq, a.kv_len = Sk, a.head_dim = D, a.scale = 0.3f;
    a.bf16 = bf16;
    std::vector<float> want(B * Sq * H * D), got(want.size(), -1.0f);
    a.out = want.data();
    attention(a);
    // Pack tokens [split, Sk) first, then [0, split), from per-piece copies.
    const size_t esz = attention_packs_bf16(bf16) ? 2 : 4;
    std::vector<uint8_t> kp(B * H * Sk * D * esz), vp(kp.size());
    for (auto [t0, t1] : {std::pair<int64_t, int64_t>{split, Sk}, {0, split}}) {
      std::vector<float> kk((t1 - t0) * B * ks), vv(kk.size());
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = t0; t < t1; ++t)
          for (int64_t i = 0; i < ks; ++i) {
            kk[(b * (t1 - t0) + t - t0) * ks + i] = k[(b * Sk + t) * ks + i];
            vv[(b * (t1 - t0) + t - t0) * ks + i] = v[(b * Sk + t) * ks + i];
          }
      attention_pack_kv(kk.data(), ks, B, H, t1 - t0, D, bf16, kp.data(), Sk, t0);
      attention_pack_kv(vv.data(), ks, B, H, t1 - t0, D, bf16, vp.data(), Sk, t0);
    }
    AttentionArgs p = a;
    p.k = p.v = nullptr;
    p.k_packed = kp.data();
    p.v_packed = vp.data();
    p.out = got.data();
    attention(p);
    EXPECT_EQ(got, want) << (bf16 ? "bf16" : "f32");
    // A key mask over packed K/V (a text mask under PipeFusion): the same as
    // over the rows, with a different pattern per batch item.
    std::vector<uint8_t> mask(static_cast<size_t>(B * Sk), 1);
    for (int64_t j = 3; j < Sk; j += 4) mask[static_cast<size_t>(j)] = 0;
    for (int64_t j = 1; j < 9; ++j) mask[static_cast<size_t>((B - 1) * Sk + j)] = 0;
    const std::vector<float> unmasked = want;
    a.key_mask = p.key_mask = mask.data();
    attention(a);
    attention(p);
    EXPECT_EQ(got, want) << "masked, " << (bf16 ? "bf16" : "f32");
    EXPECT_NE(want, unmasked) << "the mask must matter";
    a.key_mask = p.key_mask = nullptr;
    std::vector<float> back(B * Sk * H * D), dense(back.size());
    attention_unpack_kv(kp.data(), B, H, Sk, D, bf16, back.data());
    for (int64_t bt = 0; bt < B * Sk; ++bt)
      for (int64_t i = 0; i < H * D; ++i) dense[bt * H * D + i] = k[bt * ks + i];
    EXPECT_LE(test::rel_max_err(back, dense), bf16 ? 1e-2 : 0.0) << (bf16 ? "bf16" : "f32");
  }
  set_attention_blocks(128, 512);
}

// The bf16 operands: q/k/v given as bf16 rows give bit for bit what the same
// values given as f32 give (the attention rounds them the same way), and
// out_bf16 is the f32 output rounded to nearest even, at the strided
// positions (the gaps between rows untouched); on the tile path (head_dim
// 72, several query and key blocks) with a key mask. bf16 q/k/v with an f32
// attention are refused.
TEST(Attention, Bf16OperandsMatchTheF32Path) {
  if (!cpu_has_bf16()) GTEST_SKIP() << "no native bf16 on this CPU";
  set_attention_blocks(32, 64);
  const int64_t B = 2, H = 3, Sq = 77, Sk = 141, D = 72, qs = 3 * H * D, os = H * D + 5;
  auto qkv = test::randn(B * Sk * qs, 21);
  std::vector<uint16_t> qkv_b(qkv.size());
  to_bf16_array(qkv.data(), qkv_b.data(), static_cast<int64_t>(qkv.size()));
  std::vector<uint8_t> mask(B * Sk, 1);
  for (int64_t j = 0; j < Sk; j += 4) mask[Sk + j] = 0;
  AttentionArgs a;
  a.q = qkv.data(), a.k = qkv.data() + H * D, a.v = qkv.data() + 2 * H * D;
  a.q_stride = a.k_stride = a.v_stride = qs;
  a.out_stride = os;
  a.batch = B, a.heads = H, a.q_len = Sq, a.kv_len = Sk, a.head_dim = D;
  a.scale = 1.0f / std::sqrt(static_cast<float>(D));
  a.key_mask = mask.data();
  a.bf16 = true;
  std::vector<float> want(B * Sq * os, 0.0f), got(want.size(), 0.0f);
  a.out = want.data();
  attention(a);
  AttentionArgs b = a;
  b.q = b.k = b.v = nullptr;
  b.q_bf16 = qkv_b.data(), b.k_bf16 = qkv_b.data() + H * D, b.v_bf16 = qkv_b.data() + 2 * H * D;
  b.out = got.data();
  attention(b);
  EXPECT_EQ(got, want);
  std::vector<uint16_t> out_b(want.size(), 0x7fc0);  // NaN where nothing may be written
  b.out = nullptr;
  b.out_bf16 = out_b.data();
  attention(b);
  for (int64_t r = 0; r < B * Sq; ++r)
    for (int64_t i = 0; i < os; ++i) {
      const size_t at = static_cast<size_t>(r * os + i);
      const uint16_t expect = i < H * D ? f32_to_bf16(want[at]) : uint16_t{0x7fc0};
      ASSERT_EQ(out_b[at], expect) << "row " << r << " col " << i;
    }
  b.bf16 = false;
  EXPECT_THROW(attention(b), Error);
  set_attention_blocks(128, 512);
}

TEST(Attention, FullyMaskedRowAttendsUniformlyLikeDiffusersBias) {
  // All keys padded: diffusers adds −10000 to every score, which cancels.
  set_attention_blocks(128, 512);
  const int64_t Sq = 5, Sk = 6, D = 4;
  auto q = test::randn(Sq * D, 4), k = test::randn(Sk * D, 5), v = test::randn(Sk * D, 6);
  std::vector<uint8_t> mask(Sk, 0);
  std::vector<float> out(Sq * D), ref_out(Sq * D);
  AttentionArgs a;
  a.q = q.data(), a.k = k.data(), a.v = v.data(), a.out = out.data();
  a.q_stride = a.k_stride = a.v_stride = a.out_stride = D;
  a.batch = 1, a.heads = 1, a.q_len = Sq, a.kv_len = Sk, a.head_dim = D, a.scale = 0.5f;
  a.key_mask = mask.data();
  attention(a);
  a.out = ref_out.data();
  ref::attention(a);
  EXPECT_LT(test::rel_max_err(out, ref_out), 1e-5);
}

}  // namespace
}  // namespace xdit::kernels
