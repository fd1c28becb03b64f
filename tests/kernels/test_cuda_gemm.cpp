// The CUDA backend's products against the CPU: cuBLASLt (descriptors
// without a device, then the Linear and its epilogues), cuDNN's SDPA and
// convolution graphs (validated without a device, then run), attention and
// Conv2d through the dispatch. Each case skips where there is no GPU.
#include <gtest/gtest.h>

#include "cuda_test_util.h"

namespace xdit {
namespace {

using namespace test;  // cuda_test_util.h

#ifdef XDIT_HAVE_CUDA
// cuBLASLt's descriptors need no device: made and checked here for the
// Linear shapes of the models (PixArt-α, FLUX.1, T5-XXL) at odd token counts.
TEST(CudaGemm, DescriptorsForTheModelsShapes) {
  using kernels::cuda::Epilogue;
  using kernels::cuda::GemmShape;
  using kernels::cuda::GemmType;
  for (const auto& [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {4097, 3456, 1152},
           {4097, 4608, 1152},
           {4097, 1152, 4608},  // PixArt-α
           {4608, 21504, 3072},
           {4608, 3072, 15360},  // FLUX.1 single block
           {121, 10240, 4096},
           {121, 4096, 10240}}) {  // T5-XXL
    for (const Epilogue e : {Epilogue::kNone, Epilogue::kBias, Epilogue::kGeluBias}) {
      EXPECT_NO_THROW(kernels::cuda::check_gemm_descriptors(
          GemmShape{m, n, k, GemmType::kBF16, GemmType::kBF16, e}));
      EXPECT_NO_THROW(kernels::cuda::check_gemm_descriptors(
          GemmShape{m, n, k, GemmType::kF32, GemmType::kF32, e}));
    }
  }
  // bf16 rows must be 16-byte aligned: a K or N off the multiple of 8 is one line.
  EXPECT_THROW(kernels::cuda::check_gemm_descriptors(GemmShape{7, 64, 72 + 4}), Error);
  EXPECT_THROW(kernels::cuda::check_gemm_descriptors(GemmShape{7, 0, 64}), Error);
}

// y = x · wᵀ + bias (GELU) against a plain loop over the same bf16 inputs.
TEST(CudaGemm, MatchesTheCpuLinearWithItsEpilogues) {
  NEED_GPU();
  using kernels::cuda::Epilogue;
  using kernels::cuda::GemmShape;
  using kernels::cuda::GemmType;
  kernels::cuda::Gemm gemm;
  const int64_t m = 77, n = 136, k = 200;
  auto round_bf16 = [](std::vector<float> v) {
    std::vector<uint16_t> b(v.size());
    kernels::to_bf16_array(v.data(), b.data(), static_cast<int64_t>(v.size()));
    for (size_t i = 0; i < v.size(); ++i) {
      const uint32_t u = static_cast<uint32_t>(b[i]) << 16;
      std::memcpy(&v[i], &u, 4);
    }
    return std::pair{v, b};
  };
  const auto [x, xb] = round_bf16(random_values(static_cast<size_t>(m * k), 8, -1.f, 1.f));
  const auto [w, wb] = round_bf16(random_values(static_cast<size_t>(n * k), 9, -0.2f, 0.2f));
  const auto bias = random_values(static_cast<size_t>(n), 10);
  cuda::DeviceBuffer dx(xb.size() * 2), dw(wb.size() * 2), dy(static_cast<size_t>(m * n) * 4);
  dx.upload(xb.data(), xb.size() * 2);
  dw.upload(wb.data(), wb.size() * 2);
  OnDevice dbias(bias);
  for (const Epilogue e : {Epilogue::kNone, Epilogue::kBias, Epilogue::kGeluBias}) {
    std::vector<float> want(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t c = 0; c < k; ++c) acc += double{x[i * k + c]} * w[j * k + c];
        float v = static_cast<float>(acc) + (e == Epilogue::kNone ? 0.f : bias[j]);
        want[i * n + j] = v;
      }
    if (e == Epilogue::kGeluBias)
      kernels::gelu_tanh(want.data(), want.data(), static_cast<int64_t>(want.size()));
    gemm.run(GemmShape{m, n, k, GemmType::kBF16, GemmType::kF32, e}, dx.data(), dw.data(),
             e == Epilogue::kNone ? nullptr : dbias.p(), dy.data());
    cuda::synchronize();
    std::vector<float> got(want.size());
    dy.download(got.data(), got.size() * 4);
    EXPECT_LT(max_rel_diff(got, want), 1e-3f) << static_cast<int>(e);
  }
  EXPECT_EQ(gemm.plans(), 3u);  // one plan per shape, reused
  gemm.run(GemmShape{m, n, k, GemmType::kBF16, GemmType::kF32, Epilogue::kNone}, dx.data(),
           dw.data(), nullptr, dy.data());
  EXPECT_EQ(gemm.plans(), 3u);
}

#ifdef XDIT_HAVE_CUDNN_FE
// cuDNN's SDPA graphs validate without a device once the SM version is set:
// the attention shapes of PixArt-α (72-wide heads), FLUX.1, SD3, and Ring's
// and PipeFusion's unequal query and key lengths.
TEST(CudaSdpa, GraphsValidateForTheModelsShapes) {
  using kernels::cuda::SdpaShape;
  for (const SdpaShape& s : std::vector<SdpaShape>{{2, 16, 4096, 4096, 72},
                                                   {1, 24, 4608, 4608, 128},
                                                   {2, 24, 4429, 4429, 64},
                                                   {2, 16, 1024, 4096, 72},
                                                   {1, 3, 37, 53, 64}})
    EXPECT_NO_THROW(kernels::cuda::check_sdpa_graph(s)) << s.str();
  try {
    kernels::cuda::check_sdpa_graph(SdpaShape{1, 2, 16, 16, 70});
    FAIL() << "head_dim 70 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 8"), std::string::npos) << e.what();
  }
}

// o and the log-sum-exp against a plain loop, q_len != kv_len.
TEST(CudaSdpa, MatchesPlainAttentionAndItsLogSumExp) {
  NEED_GPU();
  const kernels::cuda::SdpaShape s{2, 3, 37, 53, 64};
  const int64_t hd = s.heads * s.head_dim;
  auto bf16 = [](const std::vector<float>& v, std::vector<float>* rounded) {
    std::vector<uint16_t> b(v.size());
    kernels::to_bf16_array(v.data(), b.data(), static_cast<int64_t>(v.size()));
    rounded->resize(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const uint32_t u = static_cast<uint32_t>(b[i]) << 16;
      std::memcpy(&(*rounded)[i], &u, 4);
    }
    return b;
  };
  std::vector<float> q, k, v;
  const auto qb = bf16(random_values(static_cast<size_t>(s.batch * s.q_len * hd), 11), &q);
  const auto kb = bf16(random_values(static_cast<size_t>(s.batch * s.kv_len * hd), 12), &k);
  const auto vb = bf16(random_values(static_cast<size_t>(s.batch * s.kv_len * hd), 13), &v);
  std::vector<float> want(static_cast<size_t>(s.batch * s.q_len * hd));
  std::vector<float> want_lse(static_cast<size_t>(s.batch * s.heads * s.q_len));
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < s.q_len; ++i) {
        std::vector<double> p(static_cast<size_t>(s.kv_len));
        double mx = -1e300;
        for (int64_t j = 0; j < s.kv_len; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < s.head_dim; ++c)
            dot += double{q[(b * s.q_len + i) * hd + h * s.head_dim + c]} *
                   k[(b * s.kv_len + j) * hd + h * s.head_dim + c];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (auto& x : p) sum += (x = std::exp(x - mx));
        want_lse[(b * s.heads + h) * s.q_len + i] = static_cast<float>(mx + std::log(sum));
        for (int64_t c = 0; c < s.head_dim; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < s.kv_len; ++j)
            acc += p[j] * v[(b * s.kv_len + j) * hd + h * s.head_dim + c];
          want[(b * s.q_len + i) * hd + h * s.head_dim + c] = static_cast<float>(acc / sum);
        }
      }
  cuda::DeviceBuffer dq(qb.size() * 2), dk(kb.size() * 2), dv(vb.size() * 2), dout(want.size() * 2);
  dq.upload(qb.data(), qb.size() * 2);
  dk.upload(kb.data(), kb.size() * 2);
  dv.upload(vb.data(), vb.size() * 2);
  OnDevice dlse(want_lse.size());
  kernels::cuda::Sdpa sdpa;
  sdpa.run(s, dq.data(), dk.data(), dv.data(), dout.data(), dlse.p());
  cuda::synchronize();
  std::vector<uint16_t> ob(want.size());
  dout.download(ob.data(), ob.size() * 2);
  std::vector<float> got(want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const uint32_t u = static_cast<uint32_t>(ob[i]) << 16;
    std::memcpy(&got[i], &u, 4);
  }
  EXPECT_LT(max_rel_diff(got, want), 1e-2f);  // bf16 output
  EXPECT_LT(max_rel_diff(dlse.get(want_lse.size()), want_lse), 1e-3f);
  EXPECT_EQ(sdpa.plans(), 1u);
}
#endif

// Attention through the dispatch: f32 (own kernel), key masks, T5's bias,
// the log-sum-exp, packed K/V in f32 and bf16, and bf16 through cuDNN.
TEST(CudaOps, AttentionMatchesTheCpuInEveryForm) {
  NEED_GPU();
  const int64_t B = 2, Hh = 3, S = 45, L = 29, D = 72;
  const int64_t hd = Hh * D;
  const auto q = random_values(static_cast<size_t>(B * S * hd), 40, -1.f, 1.f);
  const auto kv = random_values(static_cast<size_t>(B * L * 2 * hd), 41, -1.f, 1.f);
  const auto bias = random_values(static_cast<size_t>(Hh * S * L), 42);
  std::vector<uint8_t> mask(static_cast<size_t>(B * L), 1);
  for (int64_t j = 20; j < L; ++j) mask[static_cast<size_t>(L + j)] = 0;  // item 1: 20 keys
  DeviceScope gpu(parse_device("cuda"));
  Tensor dq = on_gpu(q), dkv = on_gpu(kv), dbias = on_gpu(bias), dout = gpu_empty(B * S * hd),
         dlse = gpu_empty(B * Hh * S), mask_keep;
  const uint8_t* dmask = nn::on_current_device(mask, mask_keep);
  for (int form = 0; form < 5; ++form) {
    kernels::AttentionArgs a;
    a.batch = B;
    a.heads = Hh;
    a.q_len = S;
    a.kv_len = L;
    a.head_dim = D;
    a.scale = 1.f / std::sqrt(static_cast<float>(D));
    a.q_stride = hd;
    a.k_stride = a.v_stride = 2 * hd;
    a.out_stride = hd;
    a.bf16 = form >= 3;
    std::vector<float> want(static_cast<size_t>(B * S * hd)), want_lse(B * Hh * S);
    kernels::AttentionArgs c = a;
    c.q = q.data();
    c.k = kv.data();
    c.v = kv.data() + hd;
    c.out = want.data();
    c.lse = want_lse.data();
    if (form == 1) c.key_mask = mask.data();
    if (form == 2) c.bias = bias.data();
    {
      DeviceScope cpu(Device{});
      kernels::attention(c);
    }
    a.q = f(dq);
    a.k = f(dkv);
    a.v = f(dkv) + hd;
    a.out = f(dout);
    a.lse = f(dlse);
    if (form == 1) a.key_mask = dmask;
    if (form == 2) a.bias = f(dbias);
    Tensor packed_k, packed_v;
    if (form == 4) {  // PipeFusion's buffers, packed on the device
      const int64_t bytes = kernels::attention_packs_bf16(true) ? 2 : 4;
      packed_k = Tensor::empty({B * Hh * L * D * bytes / 4}, DType::kF32, parse_device("cuda"));
      packed_v = Tensor::empty({B * Hh * L * D * bytes / 4}, DType::kF32, parse_device("cuda"));
      kernels::attention_pack_kv(f(dkv), 2 * hd, B, Hh, L, D, true, packed_k.raw(), L, 0);
      kernels::attention_pack_kv(f(dkv) + hd, 2 * hd, B, Hh, L, D, true, packed_v.raw(), L, 0);
      a.k_packed = packed_k.raw();
      a.v_packed = packed_v.raw();
    }
    kernels::attention(a);
    const float tol = a.bf16 ? 2e-2f : 2e-5f;
    EXPECT_LT(max_rel_diff(dout.to_vector(), want), tol) << "form " << form;
    EXPECT_LT(max_rel_diff(dlse.to_vector(), want_lse), a.bf16 ? 1e-2f : 1e-5f) << "form " << form;
  }
}

// Linear under a CUDA DeviceScope: weights uploaded once, cuBLASLt with the
// bias and GELU epilogues, accumulate, bf16 in and out, and the f32 fallback
// of bf16 layers whose sizes are off cuBLASLt's 16-byte rows.
TEST(CudaOps, LinearMatchesTheCpuLinear) {
  NEED_GPU();
  for (const auto& [m, in, out] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{77, 200, 136}, {5, 99, 37}}) {
    const auto w = random_values(static_cast<size_t>(out * in), 50, -0.2f, 0.2f);
    const auto bias = random_values(static_cast<size_t>(out), 51);
    const auto x = random_values(static_cast<size_t>(m * in), 52, -1.f, 1.f);
    const Tensor tw = Tensor::from_vector(w, {out, in}), tb = Tensor::from_vector(bias, {out});
    for (const auto ct : {kernels::ComputeType::kF32, kernels::ComputeType::kBF16}) {
      for (const auto act : {kernels::Activation::kNone, kernels::Activation::kGeluTanh}) {
        std::vector<float> want(static_cast<size_t>(m * out));
        kernels::Linear cpu_l(tw, tb, kernels::ComputeType::kF32, act);
        cpu_l.forward(x.data(), m, want.data());
        DeviceScope gpu(parse_device("cuda"));
        kernels::Linear l(tw, tb, ct, act);
        Tensor dx = on_gpu(x), dy = gpu_empty(m * out);
        l.forward(f(dx), m, f(dy));
        const float tol = l.is_bf16() ? 2e-2f : 1e-5f;
        EXPECT_LT(max_rel_diff(dy.to_vector(), want), tol) << m << "x" << in << "->" << out;
        if (act == kernels::Activation::kNone) {  // y += x·wᵀ + b
          l.forward(f(dx), m, f(dy), true);
          std::vector<float> twice = want;
          for (auto& v : twice) v *= 2;
          EXPECT_LT(max_rel_diff(dy.to_vector(), twice), tol) << "accumulate";
        }
      }
    }
  }
}

#ifdef XDIT_HAVE_CUDNN_FE
// cuDNN's convolution graphs validate without a device (SM 90) for the VAE
// decoder's convolutions at 1024 px: conv_in (4 or 16 latent channels),
// the 512 / 256 / 128-channel ResNet layers, the shortcut 1×1 and conv_out
// (3 channels), whole and as a row band with its halo.
TEST(CudaConv, GraphsValidateForTheVaeShapes) {
  using kernels::cuda::ConvShape;
  for (const bool bf16 : {true, false})
    for (const ConvShape& c : std::vector<ConvShape>{{1, 128, 128, 4, 512, 3, 1},
                                                     {1, 128, 128, 16, 512, 3, 1},
                                                     {1, 128, 128, 512, 512, 3, 1},
                                                     {1, 512, 512, 512, 256, 3, 1},
                                                     {1, 512, 512, 512, 256, 1, 0},
                                                     {1, 1024, 1024, 128, 128, 3, 1},
                                                     {1, 1024, 1024, 128, 3, 3, 1},
                                                     {2, 37, 53, 64, 32, 3, 1}}) {
      ConvShape s = c;
      s.bf16 = bf16;
      EXPECT_NO_THROW(kernels::cuda::check_conv_graph(s)) << s.str();
      s.halo = true;
      EXPECT_NO_THROW(kernels::cuda::check_conv_graph(s)) << s.str();
    }
  // A band of 1 row with a 3×3 kernel and no halo rows has no output: refused.
  ConvShape none{1, 1, 8, 8, 8, 3, 1};
  none.halo = true;
  EXPECT_THROW(kernels::cuda::check_conv_graph(none), Error) << none.str();
}

// Conv2d under a CUDA DeviceScope against the CPU's Conv2d: f32 and bf16,
// whole and as a band with halo rows.
TEST(CudaConv, Conv2dMatchesTheCpu) {
  NEED_GPU();
  const int64_t B = 2, H = 9, W = 13, Cin = 24, Cout = 40;
  const auto w = random_values(static_cast<size_t>(Cout * Cin * 9), 80, -0.2f, 0.2f);
  const auto bias = random_values(static_cast<size_t>(Cout), 81);
  const auto x = random_values(static_cast<size_t>(B * H * W * Cin), 82);
  const Tensor tw = Tensor::from_vector(w, {Cout, Cin, 3, 3}),
               tb = Tensor::from_vector(bias, {Cout});
  for (const auto ct : {kernels::ComputeType::kF32, kernels::ComputeType::kBF16}) {
    std::vector<float> want(static_cast<size_t>(B * H * W * Cout)),
        want_band(static_cast<size_t>(B * (H - 2) * W * Cout));
    kernels::Conv2d cpu_c(tw, tb, 1, kernels::ComputeType::kF32);
    cpu_c.forward(x.data(), B, H, W, want.data());
    cpu_c.forward_halo(x.data(), B, H - 2, W, want_band.data());
    DeviceScope gpu(parse_device("cuda"));
    kernels::Conv2d c(tw, tb, 1, ct);
    Tensor dx = on_gpu(x), dy = gpu_empty(B * H * W * Cout);
    c.forward(f(dx), B, H, W, f(dy));
    const float tol = ct == kernels::ComputeType::kBF16 ? 2e-2f : 1e-5f;
    EXPECT_LT(max_rel_diff(dy.to_vector(), want), tol);
    if (ct == kernels::ComputeType::kF32) {  // the halo input in the layer's type (f32 here)
      Tensor db = gpu_empty(B * (H - 2) * W * Cout);
      c.forward_halo(f(dx), B, H - 2, W, f(db));
      EXPECT_LT(max_rel_diff(db.to_vector(), want_band), tol) << "halo";
    }
  }
}
#endif
#endif  // XDIT_HAVE_CUDA

}  // namespace
}  // namespace xdit
