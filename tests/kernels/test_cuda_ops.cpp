// The op harness of the CUDA backend: every CUDA op against the CPU op on
// random, odd-sized inputs. Where there is no GPU (or the build has no CUDA
// backend) each case skips saying why; the device flag's one-line errors are
// checked everywhere.
#include <gtest/gtest.h>

#include "cuda_test_util.h"

namespace xdit {
namespace {

using namespace test;  // cuda_test_util.h

TEST(Device, ParsesCpuCudaAndCudaN) {
  EXPECT_FALSE(parse_device("cpu").cuda());
  EXPECT_TRUE(parse_device("cuda").cuda());
  EXPECT_EQ(parse_device("cuda").index, 0);
  EXPECT_EQ(parse_device("cuda:3").index, 3);
  EXPECT_EQ(parse_device("cuda:3").str(), "cuda:3");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda1", "CPU", ""})
    EXPECT_THROW(parse_device(bad), Error) << bad;
  EXPECT_NO_THROW(check_device(parse_device("cpu")));
}

#ifdef XDIT_HAVE_CUDA
TEST(CudaOps, NormsMatchTheCpuOps) {
  NEED_GPU();
  for (const auto& [rows, dim] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {37, 77}, {5, 1152}, {3, 4099}, {129, 72}}) {
    const size_t n = static_cast<size_t>(rows * dim);
    const auto x = random_values(n, 1);
    const auto gamma = random_values(static_cast<size_t>(dim), 2, 0.5f, 1.5f);
    const auto beta = random_values(static_cast<size_t>(dim), 3);
    std::vector<float> want(n);
    kernels::layer_norm(x.data(), want.data(), rows, dim, 1e-6f, gamma.data(), beta.data());
    OnDevice dx(x), dy(n), dg(gamma), db(beta);
    kernels::cuda::layer_norm(dx.p(), dy.p(), rows, dim, 1e-6f, dg.p(), db.p());
    cuda::synchronize();
    EXPECT_LT(max_rel_diff(dy.get(n), want), 1e-5f) << "layer_norm " << rows << "x" << dim;
    kernels::layer_norm(x.data(), want.data(), rows, dim, 1e-6f);
    kernels::cuda::layer_norm(dx.p(), dy.p(), rows, dim, 1e-6f, nullptr, nullptr);
    EXPECT_LT(max_rel_diff(dy.get(n), want), 1e-5f) << "layer_norm (no affine)";
    kernels::rms_norm(x.data(), want.data(), rows, dim, 1e-6f, gamma.data());
    kernels::cuda::rms_norm(dx.p(), dy.p(), rows, dim, 1e-6f, dg.p());
    EXPECT_LT(max_rel_diff(dy.get(n), want), 1e-5f) << "rms_norm " << rows << "x" << dim;
  }
}

TEST(CudaOps, ActivationsMatchTheCpuOps) {
  NEED_GPU();
  for (const size_t n : {size_t{1}, size_t{1023}, size_t{70001}}) {
    const auto x = random_values(n, 4, -8.f, 8.f);
    std::vector<float> want(n);
    OnDevice dx(x), dy(n);
    kernels::gelu_tanh(x.data(), want.data(), static_cast<int64_t>(n));
    kernels::cuda::gelu_tanh(dx.p(), dy.p(), static_cast<int64_t>(n));
    EXPECT_LT(max_rel_diff(dy.get(n), want), 2e-6f) << "gelu_tanh " << n;
    kernels::silu(x.data(), want.data(), static_cast<int64_t>(n));
    kernels::cuda::silu(dx.p(), dy.p(), static_cast<int64_t>(n));
    EXPECT_LT(max_rel_diff(dy.get(n), want), 2e-6f) << "silu " << n;
  }
}

TEST(CudaOps, ModulationAndGatedResidualMatchTheCpuOps) {
  NEED_GPU();
  const int64_t batch = 3, tokens = 29, dim = 300, stride = 6 * dim;
  const size_t n = static_cast<size_t>(batch * tokens * dim);
  const auto x = random_values(n, 5), h0 = random_values(n, 6);
  const auto mod = random_values(static_cast<size_t>(batch * stride), 7, -1.f, 1.f);
  std::vector<float> want(n);
  OnDevice dx(x), dy(n), dmod(mod);
  kernels::modulate(x.data(), want.data(), batch, tokens, dim, mod.data(), mod.data() + dim,
                    stride);
  kernels::cuda::modulate(dx.p(), dy.p(), batch, tokens, dim, dmod.p(), dmod.p() + dim, stride);
  EXPECT_LT(max_rel_diff(dy.get(n), want), 1e-6f);
  for (const bool gated : {true, false}) {
    std::vector<float> h = h0;
    OnDevice dh(h0);
    const float* gate = gated ? mod.data() + 2 * dim : nullptr;
    kernels::gated_residual_add(h.data(), x.data(), batch, tokens, dim, gate, stride);
    kernels::cuda::gated_residual_add(dh.p(), dx.p(), batch, tokens, dim,
                                      gated ? dmod.p() + 2 * dim : nullptr, stride);
    EXPECT_LT(max_rel_diff(dh.get(n), h), 1e-6f) << (gated ? "gated" : "ungated");
  }
}

TEST(CudaOps, ElementwiseConversionsAndRowOpsMatchTheCpu) {
  NEED_GPU();
  const int64_t rows = 37, n = 301;
  const auto x = random_values(static_cast<size_t>(rows * 2 * n), 20);
  const auto b = random_values(static_cast<size_t>(rows * n), 21);
  DeviceScope gpu(parse_device("cuda"));
  Tensor dx = on_gpu(x), db = on_gpu(b), dy = gpu_empty(rows * 2 * n);
  auto check = [&](const char* what, const std::vector<float>& want, float tol) {
    const auto got = dy.to_vector();
    EXPECT_LT(max_rel_diff({got.begin(), got.begin() + static_cast<long>(want.size())}, want), tol)
        << what;
  };
  std::vector<float> want(x.size());
  {
    DeviceScope cpu(Device{});
    kernels::gelu_tanh_gate(x.data(), want.data(), rows, n);
  }
  kernels::gelu_tanh_gate(f(dx), f(dy), rows, n);
  check("gelu_tanh_gate", {want.begin(), want.begin() + rows * n}, 2e-6f);
  {
    DeviceScope cpu(Device{});
    kernels::silu_gate(x.data(), want.data(), rows, n);
  }
  kernels::silu_gate(f(dx), f(dy), rows, n);
  check("silu_gate", {want.begin(), want.begin() + rows * n}, 2e-6f);
  {  // cfg_renorm_patches over [1, rows, 2n] (2 x 2 patches): cond x, noise x reversed
    DeviceScope cpu(Device{});
    std::copy(x.rbegin(), x.rend(), want.begin());
    kernels::cfg_renorm_patches(x.data(), want.data(), 1, rows, 2 * n, 2);
  }
  Tensor dn = on_gpu(std::vector<float>(x.rbegin(), x.rend()));
  kernels::cfg_renorm_patches(f(dx), f(dn), 1, rows, 2 * n, 2);
  EXPECT_LT(max_rel_diff(dn.to_vector(), want), 2e-6f) << "cfg_renorm_patches";
  for (const auto& [name, cpu_op] :
       std::vector<std::pair<const char*, void (*)(const float*, float*, int64_t)>>{
           {"gelu_erf", kernels::gelu_erf},
           {"quick_gelu", kernels::quick_gelu},
           {"relu", kernels::relu},
           {"tanh", kernels::tanh}}) {
    {
      DeviceScope cpu(Device{});
      cpu_op(x.data(), want.data(), static_cast<int64_t>(x.size()));
    }
    cpu_op(f(dx), f(dy), static_cast<int64_t>(x.size()));
    check(name, want, 2e-6f);
  }
  // Strided rows: y[r, :] = x[r, 0:n] + b[r, :], and a broadcast row.
  for (const int64_t bs : {n, int64_t{0}}) {
    {
      DeviceScope cpu(Device{});
      kernels::add_rows(x.data(), 2 * n, b.data(), bs, want.data(), n, rows, n);
    }
    kernels::add_rows(f(dx), 2 * n, f(db), bs, f(dy), n, rows, n);
    check("add_rows", {want.begin(), want.begin() + rows * n}, 0);
  }
  kernels::copy_rows(f(dy), n, f(dx) + 5, 2 * n, rows, n - 5);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n - 5; ++j) want[r * n + j] = x[r * 2 * n + 5 + j];
  {
    const auto got = dy.to_vector();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n - 5; ++j)
        ASSERT_EQ(got[r * n + j], want[r * n + j]) << r << "," << j;
  }
  // One row: the strides are unused (the VAE passes 0).
  kernels::copy_rows(f(dy), 0, f(dx) + 3, 0, 1, n);
  {
    const auto got = dy.to_vector();
    for (int64_t j = 0; j < n; ++j) ASSERT_EQ(got[j], x[3 + j]) << j;
  }
  // bf16 rows: the same rounding as the CPU's (nearest even), bit for bit.
  std::vector<uint16_t> want16(static_cast<size_t>(rows * n)), got16(want16.size());
  {
    DeviceScope cpu(Device{});
    kernels::to_bf16_rows(x.data(), 2 * n, rows, n, want16.data());
  }
  kernels::to_bf16_rows(f(dx), 2 * n, rows, n, reinterpret_cast<uint16_t*>(f(dy)));
  cuda::copy(got16.data(), dy.raw(), got16.size() * 2);
  EXPECT_EQ(got16, want16);
  // Softmax in place, LayerNorm + modulation.
  std::vector<float> sm = x;
  {
    DeviceScope cpu(Device{});
    kernels::softmax_rows(sm.data(), rows, 2 * n);
  }
  Tensor ds = on_gpu(x);
  kernels::softmax_rows(f(ds), rows, 2 * n);
  EXPECT_LT(max_rel_diff(ds.to_vector(), sm), 1e-5f) << "softmax_rows";
  const int64_t batch = 3, tokens = rows / 3, dim = 2 * n;
  const auto mod = random_values(static_cast<size_t>(batch * 3 * dim), 22, -1.f, 1.f);
  Tensor dmod = on_gpu(mod);
  {
    DeviceScope cpu(Device{});
    kernels::layer_norm_modulate(x.data(), want.data(), batch, tokens, dim, 1e-6f, mod.data(),
                                 mod.data() + dim, 3 * dim);
  }
  kernels::layer_norm_modulate(f(dx), f(dy), batch, tokens, dim, 1e-6f, f(dmod), f(dmod) + dim,
                               3 * dim);
  check("layer_norm_modulate", {want.begin(), want.begin() + batch * tokens * dim}, 1e-5f);
  // bf16 out: within one bf16 step of the CPU's (the f32 values differ by rounding).
  std::vector<uint16_t> want_b(static_cast<size_t>(batch * tokens * dim)), got_b(want_b.size());
  {
    DeviceScope cpu(Device{});
    kernels::layer_norm_modulate(x.data(), want_b.data(), batch, tokens, dim, 1e-6f, mod.data(),
                                 mod.data() + dim, 3 * dim);
  }
  kernels::layer_norm_modulate(f(dx), reinterpret_cast<uint16_t*>(f(dy)), batch, tokens, dim, 1e-6f,
                               f(dmod), f(dmod) + dim, 3 * dim);
  cuda::copy(got_b.data(), dy.raw(), got_b.size() * 2);
  for (size_t i = 0; i < got_b.size(); ++i)
    ASSERT_LE(std::abs(static_cast<int>(got_b[i]) - static_cast<int>(want_b[i])), 1) << i;
}

TEST(CudaOps, GroupNormUpsamplePatchifyAndTablesMatchTheCpu) {
  NEED_GPU();
  const int64_t B = 2, H = 6, W = 10, C = 96, G = 32;
  const auto x = random_values(static_cast<size_t>(B * H * W * C), 30);
  const auto gamma = random_values(static_cast<size_t>(C), 31, 0.5f, 1.5f);
  const auto beta = random_values(static_cast<size_t>(C), 32);
  DeviceScope gpu(parse_device("cuda"));
  Tensor dx = on_gpu(x), dg = on_gpu(gamma), dbeta = on_gpu(beta);
  Tensor dy = gpu_empty(4 * B * H * W * C);
  std::vector<float> want(static_cast<size_t>(4 * B * H * W * C));
  for (const bool silu : {false, true}) {
    {
      DeviceScope cpu(Device{});
      kernels::group_norm_nhwc(x.data(), want.data(), B, H * W, C, G, 1e-6f, gamma.data(),
                               beta.data(), silu);
    }
    kernels::group_norm_nhwc(f(dx), f(dy), B, H * W, C, G, 1e-6f, f(dg), f(dbeta), silu);
    const auto got = dy.to_vector();
    EXPECT_LT(max_rel_diff({got.begin(), got.begin() + static_cast<long>(x.size())},
                           {want.begin(), want.begin() + static_cast<long>(x.size())}),
              1e-5f)
        << "group_norm silu " << silu;
  }
  // The halves: host moments, as the patch-parallel VAE sums them.
  std::vector<double> m_cpu(static_cast<size_t>(2 * B * G)), m_gpu(m_cpu.size());
  {
    DeviceScope cpu(Device{});
    kernels::group_norm_moments_nhwc(x.data(), B, H * W, C, G, m_cpu.data());
  }
  kernels::group_norm_moments_nhwc(f(dx), B, H * W, C, G, m_gpu.data());
  for (size_t i = 0; i < m_cpu.size(); ++i)
    EXPECT_NEAR(m_gpu[i], m_cpu[i], 1e-9 * std::max(1.0, std::fabs(m_cpu[i]))) << i;
  {
    DeviceScope cpu(Device{});
    kernels::upsample_nearest2x_nhwc(x.data(), want.data(), B, H, W, C);
  }
  kernels::upsample_nearest2x_nhwc(f(dx), f(dy), B, H, W, C);
  EXPECT_EQ(dy.to_vector(), want) << "upsample";
  // Patchify / unpatchify of an NCHW latent with p = 2.
  const int64_t Cl = 5, p = 2;
  const auto lat = random_values(static_cast<size_t>(B * Cl * H * W), 33);
  Tensor dl = on_gpu(lat), dc = gpu_empty(B * Cl * H * W), du = gpu_empty(B * Cl * H * W);
  std::vector<float> cols(lat.size()), back(lat.size());
  {
    DeviceScope cpu(Device{});
    kernels::patchify(lat.data(), B, Cl, H, W, p, cols.data());
    kernels::unpatchify(lat.data(), B, Cl, H / p, W / p, p, back.data());
  }
  kernels::patchify(f(dl), B, Cl, H, W, p, f(dc));
  kernels::unpatchify(f(dl), B, Cl, H / p, W / p, p, f(du));
  EXPECT_EQ(dc.to_vector(), cols) << "patchify";
  EXPECT_EQ(du.to_vector(), back) << "unpatchify";
  // The VAE's layout changes and latent unscaling, bit for bit.
  std::vector<float> nhwc(lat.size()), nchw(lat.size()), unscaled(lat.size());
  {
    DeviceScope cpu(Device{});
    kernels::nchw_rows_to_nhwc(lat.data(), B, Cl, H, W, 1, H - 2, nhwc.data());
    kernels::nhwc_to_nchw(lat.data(), B, H * W, Cl, nchw.data());
    kernels::affine_div(lat.data(), unscaled.data(), static_cast<int64_t>(lat.size()), 0.18215f,
                        0.0609f);
  }
  kernels::nchw_rows_to_nhwc(f(dl), B, Cl, H, W, 1, H - 2, f(dc));
  {
    const auto band = static_cast<size_t>(B * (H - 2) * W * Cl);
    auto got = dc.to_vector();
    got.resize(band);
    nhwc.resize(band);
    EXPECT_EQ(got, nhwc) << "nchw_rows_to_nhwc";
  }
  kernels::nhwc_to_nchw(f(dl), B, H * W, Cl, f(dc));
  EXPECT_EQ(dc.to_vector(), nchw) << "nhwc_to_nchw";
  kernels::affine_div(f(dl), f(dc), static_cast<int64_t>(lat.size()), 0.18215f, 0.0609f);
  EXPECT_EQ(dc.to_vector(), unscaled) << "affine_div";
  kernels::zero_bytes(dc.raw(), 12);
  const auto zeroed = dc.to_vector();
  EXPECT_EQ(zeroed[0] + zeroed[1] + zeroed[2], 0.f);
  EXPECT_EQ(zeroed[3], unscaled[3]);
  // Tables from host inputs land on the device unchanged.
  const std::vector<float> t = {999.f, 1.5f, 0.f};
  std::vector<float> emb(3 * 257);
  Tensor de = gpu_empty(3 * 257);
  {
    DeviceScope cpu(Device{});
    kernels::timestep_embedding(t.data(), 3, 257, true, 0.f, emb.data());
  }
  kernels::timestep_embedding(t.data(), 3, 257, true, 0.f, f(de));
  EXPECT_EQ(de.to_vector(), emb);
}

// FLUX's own ops: the 2×2 packing both ways, q/k RMSNorm + rotary.
TEST(CudaOps, FluxPackingAndQkNormRopeMatchTheCpu) {
  NEED_GPU();
  const int64_t B = 2, C = 3, H = 6, W = 10, r0 = 1, r1 = 3;
  const auto lat = random_values(static_cast<size_t>(B * C * H * W), 70);
  const int64_t packed_n = B * (r1 - r0) * (W / 2) * 4 * C;
  std::vector<float> want(static_cast<size_t>(packed_n)), back(want.size());
  {
    DeviceScope cpu(Device{});
    kernels::pack_2x2(lat.data(), want.data(), B, C, H, W, r0, r1, true);
    kernels::pack_2x2(want.data(), back.data(), B, C, H, W, r0, r1, false);
  }
  DeviceScope gpu(parse_device("cuda"));
  Tensor dl = on_gpu(lat), dp = gpu_empty(packed_n), db = gpu_empty(packed_n);
  kernels::pack_2x2(f(dl), f(dp), B, C, H, W, r0, r1, true);
  kernels::pack_2x2(f(dp), f(db), B, C, H, W, r0, r1, false);
  EXPECT_EQ(dp.to_vector(), want);
  EXPECT_EQ(db.to_vector(), back);
  const int64_t seq = 23, heads = 3, hd = 40, rb = 4, rows = 15;
  const auto qkv = random_values(static_cast<size_t>(B * seq * 3 * heads * hd), 71);
  const auto wq = random_values(static_cast<size_t>(hd), 72, 0.5f, 1.5f);
  const auto wk = random_values(static_cast<size_t>(hd), 73, 0.5f, 1.5f);
  const auto cs = random_values(static_cast<size_t>(seq * hd), 74, -1.f, 1.f);
  const auto sn = random_values(static_cast<size_t>(seq * hd), 75, -1.f, 1.f);
  std::vector<float> wantq = qkv;
  {
    DeviceScope cpu(Device{});
    kernels::qk_norm_rope(wantq.data(), B, seq, rb, rows, heads, hd, 1e-6f, wq.data(), wk.data(),
                          cs.data(), sn.data());
  }
  Tensor dq = on_gpu(qkv), dwq = on_gpu(wq), dwk = on_gpu(wk), dc = on_gpu(cs), ds = on_gpu(sn);
  kernels::qk_norm_rope(f(dq), B, seq, rb, rows, heads, hd, 1e-6f, f(dwq), f(dwk), f(dc), f(ds));
  EXPECT_LT(max_rel_diff(dq.to_vector(), wantq), 1e-5f);
}

// The parallel layer's ops through the dispatch: Ring attention's exact merge
// (rows where one or both sides have no keys yet included) and strided byte
// rows (the exchange buffers' bf16 rows, odd pitches).
TEST(CudaOps, ParallelLayerOpsMatchTheCpu) {
  NEED_GPU();
  const int64_t B = 2, S = 13, H = 3, D = 40;
  const auto o = random_values(static_cast<size_t>(B * S * H * D), 90);
  const auto ob = random_values(o.size(), 91);
  auto lse = random_values(static_cast<size_t>(B * H * S), 92, -3.f, 3.f);
  auto lb = random_values(lse.size(), 93, -3.f, 3.f);
  lse[5] = lb[5] = -INFINITY;  // neither side has keys: the row stays
  lb[7] = -INFINITY;           // only the accumulator has
  lse[9] = -INFINITY;          // only the new part has
  std::vector<float> want_o = o, want_l = lse;
  {
    DeviceScope cpu(Device{});
    kernels::attention_merge(want_o.data(), want_l.data(), ob.data(), lb.data(), B, S, H, D);
  }
  DeviceScope gpu(parse_device("cuda"));
  Tensor d_o = on_gpu(o), d_l = on_gpu(lse), d_ob = on_gpu(ob), d_lb = on_gpu(lb);
  kernels::attention_merge(f(d_o), f(d_l), f(d_ob), f(d_lb), B, S, H, D);
  EXPECT_LT(max_rel_diff(d_o.to_vector(), want_o), 1e-5f);
  auto got_l = d_l.to_vector();
  EXPECT_TRUE(std::isinf(got_l[5]) && got_l[5] < 0);
  got_l[5] = want_l[5] = 0;
  EXPECT_LT(max_rel_diff(got_l, want_l), 1e-5f);

  const int64_t rows = 37;
  const size_t src_pitch = 50, dst_pitch = 42, row_bytes = 34;
  std::vector<float> src = random_values(rows * src_pitch / 4 + 1, 94);
  std::vector<float> want(rows * dst_pitch / 4 + 1, 0.f);
  {
    DeviceScope cpu(Device{});
    kernels::copy_row_bytes(want.data(), dst_pitch, src.data(), src_pitch, rows, row_bytes);
  }
  Tensor d_src = on_gpu(src), d_dst = on_gpu(std::vector<float>(want.size(), 0.f));
  kernels::copy_row_bytes(f(d_dst), dst_pitch, f(d_src), src_pitch, rows, row_bytes);
  const auto got = d_dst.to_vector();
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0);
}

// The denoising loop's ops (guidance, the schedulers' updates) through the
// dispatch, against the CPU: the same roundings, so equal to the last bit
// but for the order the hardware gives products (within 1e-6).
TEST(CudaOps, LoopOpsMatchTheCpu) {
  NEED_GPU();
  const int64_t items = 6, n = 1037, hist = 1500;  // odd runs, history rows apart
  const auto mo = random_values(static_cast<size_t>(items * n), 100);
  const auto x = random_values(mo.size(), 101);
  const auto c = random_values(mo.size(), 102);
  const auto prev = random_values(static_cast<size_t>(items * hist), 103);
  kernels::DpmUpdate k;
  k.xa = 0.83f, k.xb = -0.41f, k.cs = 0.97f, k.c0 = 0.12f, k.c1 = -0.05f, k.inv_r0 = 1.7f;
  for (const bool second : {false, true}) {
    k.second_order = second;
    std::vector<float> want_x = x, want_cur(prev.size(), 0.f), want_g(mo.size()), want_a = c,
                       want_f = x;
    {
      DeviceScope cpu(Device{});
      kernels::dpm_solver_step(mo.data(), want_x.data(), want_cur.data(), prev.data(), items, n,
                               hist, k);
      kernels::guidance_combine(mo.data(), c.data(), 4.5f, want_g.data(), items * n);
      kernels::guidance_add(want_a.data(), mo.data(), x.data(), 2.8f, items * n);
      kernels::flow_euler_step(mo.data(), want_f.data(), -0.0625f, items * n);
    }
    DeviceScope gpu(parse_device("cuda"));
    Tensor d_mo = on_gpu(mo), d_x = on_gpu(x), d_c = on_gpu(c), d_prev = on_gpu(prev);
    Tensor d_cur = on_gpu(std::vector<float>(prev.size(), 0.f)), d_g = gpu_empty(items * n);
    Tensor d_a = on_gpu(c), d_f = on_gpu(x);
    kernels::dpm_solver_step(f(d_mo), f(d_x), f(d_cur), f(d_prev), items, n, hist, k);
    kernels::guidance_combine(f(d_mo), f(d_c), 4.5f, f(d_g), items * n);
    kernels::guidance_add(f(d_a), f(d_mo), f(d_x), 2.8f, items * n);
    kernels::flow_euler_step(f(d_mo), f(d_f), -0.0625f, items * n);
    EXPECT_LT(max_rel_diff(d_x.to_vector(), want_x), 1e-6f) << "dpm_solver_step " << second;
    EXPECT_LT(max_rel_diff(d_cur.to_vector(), want_cur), 1e-6f) << "the history";
    EXPECT_LT(max_rel_diff(d_g.to_vector(), want_g), 1e-6f) << "guidance_combine";
    EXPECT_LT(max_rel_diff(d_a.to_vector(), want_a), 1e-6f) << "guidance_add";
    EXPECT_LT(max_rel_diff(d_f.to_vector(), want_f), 1e-6f) << "flow_euler_step";
  }
}

TEST(CudaRuntime, ADeviceIndexPastTheDevicesIsOneLine) {
  NEED_GPU();
  const int n = cuda::device_count();
  try {
    check_device(parse_device("cuda:" + std::to_string(n)));
    FAIL() << "cuda:" << n << " accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("asked for"), std::string::npos) << e.what();
  }
}
#else
TEST(CudaOps, Skipped) {
  GTEST_SKIP() << "CUDA cases skipped: this build has no CUDA backend (no nvcc at configure time)";
}
#endif

// On a machine without a GPU, `--device cuda` is one line saying why, before
// any work; with one, the tiny SD3 pipeline runs there end to end.
// Every family (PixArt, FLUX.1, SD3) takes --device cuda where there is a
// GPU; without one, set_device says why in one line and the pipeline stays
// on the CPU.
TEST(Device, EveryFamilyTakesCudaWhereThereIsAGpu) {
  std::string why;
#ifdef XDIT_HAVE_CUDA
  const bool gpu = cuda::device_count(&why) > 0;
#else
  const bool gpu = false;
#endif
  for (const char* model : {"pixart-sigma-tiny", "flux-schnell-tiny", "sd3-tiny"}) {
    pipeline::Pipeline pipe(models_dir() + "/" + model, DType::kF32);
    if (gpu) {
      EXPECT_NO_THROW(pipe.set_device(parse_device("cuda"))) << model;
      EXPECT_TRUE(pipe.device().cuda()) << model;
      continue;
    }
    try {
      pipe.set_device(parse_device("cuda"));
      ADD_FAILURE() << model << " took --device cuda without a GPU";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
    EXPECT_FALSE(pipe.device().cuda()) << model;
  }
}

// Host-made values reach the ops without a copy on the CPU; empty is null.
TEST(Device, HostValuesOnTheCpuAreTheHostBuffer) {
  Tensor keep;
  const std::vector<float> v = {1.5f, -2.f, 3.f};
  const std::vector<uint8_t> none;
  EXPECT_EQ(nn::on_current_device(v, keep), v.data());
  EXPECT_EQ(nn::on_current_device(none, keep), nullptr);
  EXPECT_FALSE(keep.defined());
}

// A DeviceScope that cannot be entered leaves the thread on its device; a
// tensor cannot be made on a device that is not there.
TEST(Device, ScopesNestAndFailCleanly) {
  EXPECT_FALSE(current_device().cuda());
  {
    DeviceScope cpu(Device{});
    EXPECT_FALSE(current_device().cuda());
  }
  std::string why;
#ifdef XDIT_HAVE_CUDA
  if (cuda::device_count(&why) > 0)
    GTEST_SKIP() << "the failure half needs a machine without a GPU";
#endif
  EXPECT_THROW(DeviceScope(parse_device("cuda")), Error);
  EXPECT_FALSE(current_device().cuda());
  EXPECT_THROW(Tensor::empty({3}, DType::kF32, parse_device("cuda")), Error);
}

TEST(Device, GenerateOnCudaIsOneLineWhereItCannotRun) {
  const auto dir = test::make_test_dir("xdit_device_");
  const auto png = dir / "x.png";
  const auto r = test::run_command(
      std::string("env XDIT_QUIET=1 '") + binary() + "' generate --device cuda --model '" +
          models_dir() + "/sd3-tiny' --prompt x --height 64 --width 64 -o '" + png.string() + "'",
      (dir / "err.txt").string());
  const bool wrote = std::filesystem::exists(png);
  std::filesystem::remove_all(dir);
  std::string why;
#ifdef XDIT_HAVE_CUDA
  const bool gpu = cuda::device_count(&why) > 0;
#else
  const bool gpu = false;
  why = "built without the CUDA backend";
#endif
  if (gpu) {  // the whole SD3 pipeline on the GPU, end to end
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(wrote);
  } else {
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
    EXPECT_FALSE(wrote);
  }
  const auto bad = test::run_command(
      std::string("env XDIT_QUIET=1 '") + binary() + "' generate --device tpu --prompt x",
      "/dev/null");
  EXPECT_EQ(bad.code, 1);
}

}  // namespace
}  // namespace xdit
