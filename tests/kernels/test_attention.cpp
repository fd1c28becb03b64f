// Blockwise attention against full-matrix attention: output and log-sum-exp,
// several key blocks, key padding masks, strided layouts, f32 and bf16.
#include <gtest/gtest.h>

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

void run(const Case& c, bool bf16, double tol) {
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
  a.out = out.data();
  a.lse = lse.data();
  attention(a);
  AttentionArgs r = a;
  r.out = ref_out.data();
  r.lse = ref_lse.data();
  ref::attention(r);
  EXPECT_LT(test::rel_max_err(out, ref_out), tol);
  for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], ref_lse[i], tol * 10) << i;
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
