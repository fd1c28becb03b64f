// Ulysses, Ring and USP attention under mpirun against serial attention on the
// same random inputs, for every (ulysses, ring) factorisation of the world
// size; plus the mesh's rank layout and the exact log-sum-exp merge.
#include <gtest/gtest.h>

#include "dist/world.h"

#include <cstring>
#include "kernels/kernels.h"
#include "nn/attention.h"
#include "parallel/config.h"
#include "parallel/usp_attention.h"
#include "test_util.h"

namespace xdit::parallel {
namespace {

using test::world;

void check_factorisation(int u, int r, bool bf16) {
  ParallelConfig pc;
  pc.ulysses_degree = u;
  pc.ring_degree = r;
  Mesh mesh(pc, world());
  const int sp = u * r, me = mesh.coord().sp;
  // Odd sizes: 2 batches, 4 heads of 12, 7 tokens per rank (+ strided layout).
  const int64_t B = 2, H = 4, D = 12, Nl = 7, N = Nl * sp, stride = 3 * H * D;
  auto qkv = test::randn(static_cast<size_t>(B * N * stride), 42);  // the same on every rank
  std::vector<float> ref(static_cast<size_t>(B * N * H * D));
  kernels::attention(nn::fused_qkv_args(qkv.data(), B, N, H, D, ref.data(), H * D, bf16));
  // This rank's token chunk, packed as the model would hold it.
  std::vector<float> local(static_cast<size_t>(B * Nl * stride)),
      out(static_cast<size_t>(B * Nl * H * D));
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(local.data() + b * Nl * stride, qkv.data() + (b * N + me * Nl) * stride,
                static_cast<size_t>(Nl * stride) * 4);
  const kernels::AttentionArgs l =
      nn::fused_qkv_args(local.data(), B, Nl, H, D, out.data(), H * D, bf16);
  UspAttention usp(mesh.ulysses_group(), mesh.ring_group());
  usp.attend(l, {0, false});
  std::vector<float> want(out.size());
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(want.data() + b * Nl * H * D, ref.data() + (b * N + me * Nl) * H * D,
                static_cast<size_t>(Nl * H * D) * 4);
  EXPECT_LT(test::rel_max_err(out, want), bf16 ? 3e-2 : 1e-5)
      << "ulysses " << u << " ring " << r << " rank " << me;
}

TEST(UspAttention, EveryFactorisationMatchesSerial) {
  const int n = world().size();
  for (int u = 1; u <= n; ++u)
    if (n % u == 0) check_factorisation(u, n / u, false);
}

// Joint attention (FLUX): T replicated text tokens lead each batch item on
// every rank, then the rank's image tokens; with `uneven`, SP rank k holds
// 3 + k % 2 image tokens (set_sequence_split). Against serial attention over
// [text; every image token].
void check_joint(int u, int r, bool uneven) {
  ParallelConfig pc;
  pc.ulysses_degree = u;
  pc.ring_degree = r;
  Mesh mesh(pc, world());
  const int sp = u * r, me = mesh.coord().sp;
  const int64_t B = 2, H = 12, D = 8, T = 5, stride = 3 * H * D;  // 12 heads: u up to 4
  std::vector<int64_t> share(static_cast<size_t>(sp));
  for (int k = 0; k < sp; ++k) share[static_cast<size_t>(k)] = uneven ? 3 + k % 2 : 4;
  int64_t N = 0, at = 0;
  for (int k = 0; k < sp; ++k) {
    if (k == me) at = N;
    N += share[static_cast<size_t>(k)];
  }
  const int64_t S = T + N, n = share[static_cast<size_t>(me)];
  auto qkv = test::randn(static_cast<size_t>(B * S * stride), 43);  // the same on every rank
  std::vector<float> ref(static_cast<size_t>(B * S * H * D));
  kernels::attention(nn::fused_qkv_args(qkv.data(), B, S, H, D, ref.data(), H * D, false));
  // This rank's rows: the text, then its image tokens.
  std::vector<int64_t> rows;
  for (int64_t t = 0; t < T; ++t) rows.push_back(t);
  for (int64_t i = 0; i < n; ++i) rows.push_back(T + at + i);
  const int64_t L = static_cast<int64_t>(rows.size());
  std::vector<float> local(static_cast<size_t>(B * L * stride)),
      out(static_cast<size_t>(B * L * H * D)), want(out.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i) {
      std::memcpy(local.data() + (b * L + i) * stride, qkv.data() + (b * S + rows[i]) * stride,
                  static_cast<size_t>(stride) * 4);
      std::memcpy(want.data() + (b * L + i) * H * D, ref.data() + (b * S + rows[i]) * H * D,
                  static_cast<size_t>(H * D) * 4);
    }
  const kernels::AttentionArgs l =
      nn::fused_qkv_args(local.data(), B, L, H, D, out.data(), H * D, false);
  UspAttention usp(mesh.ulysses_group(), mesh.ring_group());
  if (uneven) usp.set_sequence_split(share);
  nn::AttentionSite site;
  site.text_tokens = T;
  usp.attend(l, site);
  EXPECT_LT(test::rel_max_err(out, want), 1e-5)
      << "ulysses " << u << " ring " << r << " rank " << me << (uneven ? " uneven" : "");
}

TEST(UspAttention, JointTextAndUnevenSharesMatchSerialForEveryFactorisation) {
  const int n = world().size();
  for (int u = 1; u <= n; ++u)
    if (n % u == 0)
      for (bool uneven : {false, true}) check_joint(u, n / u, uneven);
}

TEST(UspAttention, Bf16) {
  if (!kernels::cpu_has_bf16()) GTEST_SKIP();
  const int n = world().size();
  check_factorisation(n, 1, true);
  check_factorisation(1, n, true);
}

TEST(UspAttention, CrossAttentionStaysLocal) {
  ParallelConfig pc;
  pc.ulysses_degree = world().size();
  Mesh mesh(pc, world());
  const int64_t B = 1, H = 4, D = 8, Sq = 5, Sk = 9;
  auto q = test::randn(static_cast<size_t>(B * Sq * H * D), 7 + mesh.coord().sp),
       kv = test::randn(static_cast<size_t>(B * Sk * H * D), 8);
  std::vector<float> o1(static_cast<size_t>(B * Sq * H * D)), o2(o1.size());
  kernels::AttentionArgs a;
  a.q = q.data();
  a.k = a.v = kv.data();
  a.q_stride = a.k_stride = a.v_stride = a.out_stride = H * D;
  a.batch = B, a.heads = H, a.q_len = Sq, a.kv_len = Sk, a.head_dim = D, a.scale = 0.3f;
  a.out = o1.data();
  kernels::attention(a);
  a.out = o2.data();
  UspAttention usp(mesh.ulysses_group(), mesh.ring_group());
  usp.attend(a, {0, true});
  EXPECT_EQ(o1, o2);
}

TEST(Mesh, RankOrderIsXDiTs) {
  // 16 ranks, dp = cfg = pp... here without pp: dp=2 cfg=2 ulysses=2 ring=2.
  ParallelConfig pc;
  pc.data_parallel_degree = 2;
  pc.use_cfg_parallel = true;
  pc.ulysses_degree = 2;
  pc.ring_degree = 2;
  for (int r = 0; r < 16; ++r) {
    const Coord k = Mesh::coord_of(pc, r);
    EXPECT_EQ(k.ulysses, r % 2);     // Ulysses: contiguous
    EXPECT_EQ(k.ring, (r / 2) % 2);  // Ring: strided
    EXPECT_EQ(k.cfg, (r / 4) % 2);
    EXPECT_EQ(k.dp, r / 8);  // dp outermost
  }
}

TEST(Merge, TwoHalvesOfTheKeysEqualTheWhole) {
  const int64_t B = 2, H = 3, S = 5, D = 4, K = 11;
  auto q = test::randn(static_cast<size_t>(B * S * H * D), 1),
       k = test::randn(static_cast<size_t>(B * K * H * D), 2),
       v = test::randn(static_cast<size_t>(B * K * H * D), 3);
  auto run = [&](int64_t k0, int64_t k1, std::vector<float>& o, std::vector<float>& lse) {
    std::vector<float> ks, vs;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = k0; j < k1; ++j)
        for (int64_t c = 0; c < H * D; ++c) {
          ks.push_back(k[(b * K + j) * H * D + c]);
          vs.push_back(v[(b * K + j) * H * D + c]);
        }
    o.assign(static_cast<size_t>(B * S * H * D), 0);
    lse.assign(static_cast<size_t>(B * H * S), 0);
    kernels::AttentionArgs a;
    a.q = q.data(), a.k = ks.data(), a.v = vs.data(), a.out = o.data(), a.lse = lse.data();
    a.q_stride = a.k_stride = a.v_stride = a.out_stride = H * D;
    a.batch = B, a.heads = H, a.q_len = S, a.kv_len = k1 - k0, a.head_dim = D, a.scale = 0.5f;
    kernels::attention(a);
  };
  std::vector<float> ow, lw, o1, l1, o2, l2;
  run(0, K, ow, lw);
  run(0, 4, o1, l1);
  run(4, K, o2, l2);
  kernels::attention_merge(o1.data(), l1.data(), o2.data(), l2.data(), B, S, H, D);
  EXPECT_LT(test::rel_max_err(o1, ow), 1e-6);
  EXPECT_LT(test::rel_max_err(l1, lw), 1e-6);
}

}  // namespace
}  // namespace xdit::parallel
