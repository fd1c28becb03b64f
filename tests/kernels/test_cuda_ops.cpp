// The op harness of the CUDA backend: every CUDA op against the CPU op on
// random, odd-sized inputs. Where there is no GPU (or the build has no CUDA
// backend) each case skips saying why; the device flag's one-line errors are
// checked everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cli_util.h"
#include "core/device.h"
#include "core/error.h"
#include "kernels/kernels.h"
#ifdef XDIT_HAVE_CUDA
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"
#ifdef XDIT_HAVE_CUDNN_FE
#include "kernels/cuda/sdpa.h"
#endif
#include "kernels/cuda/runtime.h"
#endif

namespace xdit {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed, float lo = -3.f, float hi = 3.f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

float max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::fabs(a[i] - b[i]) / std::max(1.f, std::fabs(b[i])));
  return worst;
}

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
// Skips (with the runtime's reason) where no GPU can run the case.
#define NEED_GPU()                                                                    \
  do {                                                                                \
    std::string why;                                                                  \
    if (cuda::device_count(&why) == 0) GTEST_SKIP() << "CUDA cases skipped: " << why; \
    cuda::set_device(0);                                                              \
  } while (0)

struct OnDevice {
  cuda::DeviceBuffer buf;
  explicit OnDevice(const std::vector<float>& v) : buf(v.size() * 4) {
    buf.upload(v.data(), v.size() * 4);
  }
  explicit OnDevice(size_t n) : buf(n * 4) {}
  float* p() const { return buf.as<float>(); }
  std::vector<float> get(size_t n) const {
    std::vector<float> v(n);
    buf.download(v.data(), n * 4);
    return v;
  }
};

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
// any work; with one, the pipelines refuse it until they run there.
TEST(Device, GenerateOnCudaIsOneLineWhereItCannotRun) {
  const auto dir = test::make_test_dir("xdit_device_");
  const auto r = test::run_command(std::string("env XDIT_QUIET=1 '") + XDIT_BINARY +
                                       "' generate --device cuda --prompt x -o '" +
                                       (dir / "x.png").string() + "'",
                                   (dir / "err.txt").string());
  std::filesystem::remove_all(dir);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  std::string why;
#ifdef XDIT_HAVE_CUDA
  const bool gpu = cuda::device_count(&why) > 0;
#else
  const bool gpu = false;
  why = "built without the CUDA backend";
#endif
  if (gpu) {
    EXPECT_NE(r.err.find("do not run on the CUDA backend yet"), std::string::npos) << r.err;
  } else {
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
  }
  const auto bad = test::run_command(
      std::string("env XDIT_QUIET=1 '") + XDIT_BINARY + "' generate --device tpu --prompt x",
      "/dev/null");
  EXPECT_EQ(bad.code, 1);
}

}  // namespace
}  // namespace xdit
