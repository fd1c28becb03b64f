// Each elementwise / row-wise kernel against its plain reference on random,
// odd-sized inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "core/dtype.h"
#include "core/tensor.h"
#include "io/weights.h"
#include "kernels/conv.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/cpu/winograd.h"
#include "kernels/kernels.h"
#include "kernels/reference.h"
#include "models/vae.h"
#include "test_util.h"

namespace xdit::kernels {
namespace {

using test::randn;
using test::rel_max_err;

TEST(Ops, LayerNormWithAndWithoutAffine) {
  const int64_t rows = 37, dim = 251;
  auto x = randn(rows * dim, 1, 3.0f);
  for (auto& v : x) v += 1.5f;  // non-zero mean
  auto g = randn(dim, 2), b = randn(dim, 3);
  std::vector<float> y(x.size()), r(x.size());
  layer_norm(x.data(), y.data(), rows, dim, 1e-6f, nullptr, nullptr);
  ref::layer_norm(x.data(), r.data(), rows, dim, 1e-6f, nullptr, nullptr);
  EXPECT_LT(rel_max_err(y, r), 2e-6);
  layer_norm(x.data(), y.data(), rows, dim, 1e-5f, g.data(), b.data());
  ref::layer_norm(x.data(), r.data(), rows, dim, 1e-5f, g.data(), b.data());
  EXPECT_LT(rel_max_err(y, r), 2e-6);
  // In place gives the same.
  std::vector<float> z = x;
  layer_norm(z.data(), z.data(), rows, dim, 1e-5f, g.data(), b.data());
  EXPECT_EQ(z, y);
}

TEST(Ops, RmsNorm) {
  const int64_t rows = 11, dim = 203;
  auto x = randn(rows * dim, 20, 2.0f), w = randn(dim, 21);
  std::vector<float> y(x.size()), r(x.size());
  rms_norm(x.data(), y.data(), rows, dim, 1e-6f, w.data());
  ref::rms_norm(x.data(), r.data(), rows, dim, 1e-6f, w.data());
  EXPECT_LT(rel_max_err(y, r), 2e-6);
}

TEST(Ops, Conv2dNhwcAgainstDirectConvolution) {
  for (int64_t k : {1, 3}) {
    const int64_t B = 2, H = 7, W = 9, I = 5, O = 11, pad = k / 2;
    auto x = randn(B * H * W * I, 30), w = randn(O * I * k * k, 31, 0.3f), b = randn(O, 32);
    kernels::Conv2d conv(Tensor::from_vector(w, {O, I, k, k}), Tensor::from_vector(b, {O}), pad,
                         ComputeType::kF32);
    std::vector<float> y(B * H * W * O), r(y.size());
    conv.forward(x.data(), B, H, W, y.data());
    ref::conv2d_nhwc(x.data(), w.data(), b.data(), B, H, W, I, O, k, pad, r.data());
    EXPECT_LT(rel_max_err(y, r), 1e-5) << "k=" << k;
    if (cpu_has_bf16()) {
      kernels::Conv2d cb(Tensor::from_vector(w, {O, I, k, k}), Tensor::from_vector(b, {O}), pad,
                         ComputeType::kBF16);
      cb.forward(x.data(), B, H, W, y.data());
      EXPECT_LT(rel_max_err(y, r), 2e-2) << "bf16 k=" << k;
      // Input already in bf16: the same products, so the same result.
      std::vector<uint16_t> xb(x.size());
      for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);
      std::vector<float> yb(y.size());
      cb.forward_bf16(xb.data(), B, H, W, yb.data());
      EXPECT_EQ(yb, y) << "bf16 input k=" << k;
    }
  }
}

// bf16 3x3 convolutions run Winograd F(2x2, 3x3) on AVX-512-bf16: against
// the f32 convolution (in double) and against oneDNN's direct bf16
// convolution of the same input, for odd and even sizes (partial tiles at the
// right and bottom), channel counts of one and several vectors, with padding
// and with halo rows. A wrong transform or a misplaced tile gives errors of
// the size of the output; the rounding of the transformed input to bf16 stays
// within a few times the direct convolution's rounding.
TEST(Ops, Conv2dWinogradAgainstDirectConvolution) {
  if (!cpu::Winograd3x3::usable(16, 16)) GTEST_SKIP() << "Winograd needs AVX-512-bf16";
  struct Case {
    int64_t B, H, W, I, O;
  };
  for (const Case c : {Case{2, 7, 9, 32, 48}, Case{1, 8, 6, 16, 16}, Case{3, 5, 3, 64, 32},
                       Case{1, 1, 1, 16, 32}, Case{1, 23, 21, 48, 16}}) {
    const auto x = randn(c.B * c.H * c.W * c.I, 60), b = randn(c.O, 62);
    const auto w = randn(c.O * c.I * 9, 61, 1.0f / std::sqrt(9.0f * c.I));
    std::vector<float> r(c.B * c.H * c.W * c.O), y(r.size()), d(r.size());
    ref::conv2d_nhwc(x.data(), w.data(), b.data(), c.B, c.H, c.W, c.I, c.O, 3, 1, r.data());
    set_conv_winograd(false);
    Conv2d direct(Tensor::from_vector(w, {c.O, c.I, 3, 3}), Tensor::from_vector(b, {c.O}), 1,
                  ComputeType::kBF16);
    set_conv_winograd(true);
    Conv2d wino(Tensor::from_vector(w, {c.O, c.I, 3, 3}), Tensor::from_vector(b, {c.O}), 1,
                ComputeType::kBF16);
    set_conv_winograd(std::nullopt);
    std::ostringstream os;
    os << "B" << c.B << " " << c.H << "x" << c.W << " " << c.I << "->" << c.O;
    const std::string what = os.str();
    ASSERT_EQ(wino.implementation(c.B, c.H, c.W).rfind("xdit:winograd", 0), 0u) << what;
    ASSERT_EQ(direct.implementation(c.B, c.H, c.W).rfind("xdit:winograd", 0), std::string::npos);
    direct.forward(x.data(), c.B, c.H, c.W, d.data());
    wino.forward(x.data(), c.B, c.H, c.W, y.data());
    const double err_d = rel_max_err(d, r), err_w = rel_max_err(y, r);
    std::cout << what << ": direct " << err_d << ", winograd " << err_w << "\n";
    EXPECT_LT(err_w, 2e-2) << what;
    EXPECT_LT(err_w, 4 * err_d + 1e-3) << what;
    // With halo rows: the same image as one band with zero halo rows.
    const int64_t item = (c.H + 2) * c.W * c.I;
    std::vector<uint16_t> in(static_cast<size_t>(c.B * item), 0);
    for (int64_t bi = 0; bi < c.B; ++bi)
      for (int64_t i = 0; i < c.H * c.W * c.I; ++i)
        in[bi * item + c.W * c.I + i] = f32_to_bf16(x[bi * c.H * c.W * c.I + i]);
    std::vector<float> h(r.size());
    wino.forward_halo(in.data(), c.B, c.H, c.W, h.data());
    EXPECT_EQ(h, y) << what << " with halo rows";
  }
}

// The kernels' level is the CPU's, capped by ONEDNN_MAX_CPU_ISA as oneDNN's
// is: ctest runs these binaries again under AVX2, AVX512_CORE and SSE41 caps
// (tests/CMakeLists.txt), so the AVX2 and baseline builds are checked on any
// machine.
TEST(Ops, KernelIsaIsTheCpusCappedByOnednnMaxCpuIsa) {
  __builtin_cpu_init();
  CpuIsa cpu = CpuIsa::kBaseline;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) cpu = CpuIsa::kAvx2;
  if (cpu == CpuIsa::kAvx2 && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    cpu = CpuIsa::kAvx512;
  if (cpu == CpuIsa::kAvx512 && __builtin_cpu_supports("avx512bf16")) cpu = CpuIsa::kAvx512Bf16;
  if (cpu == CpuIsa::kAvx512Bf16 && __builtin_cpu_supports("amx-bf16")) cpu = CpuIsa::kAmx;
  EXPECT_EQ(cpu_hardware_isa(), cpu);
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  const std::string c = cap != nullptr ? cap : "";
  if (c == "AVX2") {
    EXPECT_EQ(cpu_isa(), std::min(cpu, CpuIsa::kAvx2));
  } else if (c == "AVX512_CORE") {
    EXPECT_EQ(cpu_isa(), std::min(cpu, CpuIsa::kAvx512));
  } else if (c == "SSE41") {
    EXPECT_EQ(cpu_isa(), CpuIsa::kBaseline);
  } else if (c.empty()) {
    // AMX also needs the OS's permission for the tile state, which oneDNN asks.
    if (cpu == CpuIsa::kAmx)
      EXPECT_GE(cpu_isa(), CpuIsa::kAvx512Bf16);
    else
      EXPECT_EQ(cpu_isa(), cpu);
  }
  EXPECT_LE(cpu_isa(), cpu_hardware_isa());
  EXPECT_EQ(cpu_has_bf16(), cpu_isa() >= CpuIsa::kAvx512Bf16);
  EXPECT_EQ(cpu_has_amx(), cpu_isa() == CpuIsa::kAmx);
  std::cout << "kernels: " << cpu_isa_level_name(cpu_isa())
            << " (CPU: " << cpu_isa_level_name(cpu_hardware_isa()) << ", oneDNN " << cpu_isa_name()
            << ")\n";
}

// The portable exp every build of the plain-loop kernels uses (SiLU, GELU,
// the softmax without AVX-512): f32 accuracy across the range, 0 below it,
// ∞ above it, denormal results, and NaN kept.
TEST(Ops, PortableExpMatchesStdExpOverTheWholeRange) {
  std::vector<float> x = randn(4001, 91);
  for (size_t i = 0; i < x.size(); ++i) x[i] = x[i] * 40.0f + (i % 2 != 0 ? -60.0f : 40.0f);
  for (float v : {-INFINITY, -1e30f, -110.0f, -103.9f, -100.0f, -90.0f, -87.5f, -1e-7f, 0.0f, 1e-7f,
                  88.0f, 88.5f, 88.72f, 88.73f, 95.0f, 1e30f, INFINITY})
    x.push_back(v);
  for (float v : x) {
    const double want = std::exp(static_cast<double>(v));
    const float got = cpu::exp_approx(v);
    if (want > 3.4028234663852886e38) {
      EXPECT_EQ(got, INFINITY) << v;
    } else if (want < 1.1754943508222875e-38) {  // denormal or 0: within one denormal step
      EXPECT_NEAR(got, want, 1.5e-45) << v;
    } else {
      EXPECT_NEAR(got, want, 3e-7 * want) << v;
    }
  }
  EXPECT_TRUE(std::isnan(cpu::exp_approx(NAN)));
}

// A value of XDIT_CONV that is neither winograd nor direct is refused in one
// line that names it, when a layer it would apply to is built.
TEST(Ops, UnknownXditConvIsRefusedByName) {
  if (!cpu::Winograd3x3::usable(16, 16)) GTEST_SKIP() << "XDIT_CONV applies with AVX-512-bf16";
  const auto w = randn(16 * 16 * 9, 80), b = randn(16, 81);
  ASSERT_EQ(setenv("XDIT_CONV", "fast", 1), 0);
  const std::string m = test::error_message([&] {
    Conv2d c(Tensor::from_vector(w, {16, 16, 3, 3}), Tensor::from_vector(b, {16}), 1,
             ComputeType::kBF16);
  });
  unsetenv("XDIT_CONV");
  EXPECT_NE(m.find("XDIT_CONV='fast'"), std::string::npos) << m;
  EXPECT_NE(m.find("winograd, direct"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

// An output of 64 MB or more is stored non-temporally when it starts on a
// cache line: the same values as the ordinary stores (the output one float
// off the line), on a size whose reference in double would take too long.
TEST(Ops, Conv2dWinogradStreamedOutputEqualsTheStoredOne) {
  if (!cpu::Winograd3x3::usable(16, 16)) GTEST_SKIP() << "Winograd needs AVX-512-bf16";
  const int64_t H = 259, W = 255, I = 16, O = 256;  // 64.5 MiB of f32 output
  const auto x = randn(H * W * I, 70), b = randn(O, 72);
  const auto w = randn(O * I * 9, 71, 1.0f / std::sqrt(9.0f * I));
  set_conv_winograd(true);
  Conv2d wino(Tensor::from_vector(w, {O, I, 3, 3}), Tensor::from_vector(b, {O}), 1,
              ComputeType::kBF16);
  set_conv_winograd(std::nullopt);
  Tensor line = Tensor::empty({H * W * O + 16}, DType::kF32);  // 64-byte aligned
  ASSERT_EQ(reinterpret_cast<uintptr_t>(line.data<float>()) % 64, 0u);
  wino.forward(x.data(), 1, H, W, line.data<float>());
  const std::vector<float> streamed(line.data<float>(), line.data<float>() + H * W * O);
  wino.forward(x.data(), 1, H, W, line.data<float>() + 1);
  const std::vector<float> stored(line.data<float>() + 1, line.data<float>() + 1 + H * W * O);
  EXPECT_EQ(streamed, stored);
  // And a few outputs against the convolution in double.
  for (const int64_t p : {int64_t{0}, W - 1, (H - 1) * W, H * W - 1, 131 * W + 77}) {
    const int64_t r = p / W, c = p % W;
    for (const int64_t o : {int64_t{0}, O - 1, int64_t{101}}) {
      double want = b[o];
      for (int64_t i = -1; i <= 1; ++i)
        for (int64_t j = -1; j <= 1; ++j)
          if (r + i >= 0 && r + i < H && c + j >= 0 && c + j < W)
            for (int64_t ch = 0; ch < I; ++ch)
              want += static_cast<double>(w[((o * I + ch) * 3 + i + 1) * 3 + j + 1]) *
                      x[((r + i) * W + c + j) * I + ch];
      EXPECT_NEAR(streamed[p * O + o], want, 3e-2 * (1 + std::fabs(want)))
          << "pixel " << r << "," << c << " channel " << o;
    }
  }
}

// A row band with its halo rows supplied (the patch-parallel VAE): rows
// [r0, r1) of the whole convolution, for bands at the top, inside and at the
// bottom, in f32 and bf16.
TEST(Ops, Conv2dHaloBandEqualsThoseRowsOfTheWholeConvolution) {
  const int64_t B = 2, H = 9, W = 7, I = 6, O = 5;
  auto x = randn(B * H * W * I, 50), w = randn(O * I * 9, 51, 0.3f), b = randn(O, 52);
  for (ComputeType ct : {ComputeType::kF32, ComputeType::kBF16}) {
    if (ct == ComputeType::kBF16 && !cpu_has_bf16()) continue;
    Conv2d conv(Tensor::from_vector(w, {O, I, 3, 3}), Tensor::from_vector(b, {O}), 1, ct);
    ASSERT_EQ(conv.halo(), 1);
    std::vector<float> whole(B * H * W * O);
    conv.forward(x.data(), B, H, W, whole.data());
    for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, 4}, {4, 5}, {5, 9}}) {
      const int64_t rows = r1 - r0, item = (rows + 2) * W * I;
      std::vector<float> in(static_cast<size_t>(B * item), 0.0f);
      for (int64_t bi = 0; bi < B; ++bi)
        for (int64_t r = r0 - 1; r <= r1; ++r)
          if (r >= 0 && r < H)
            std::copy_n(x.data() + (bi * H + r) * W * I, W * I,
                        in.data() + bi * item + (r - r0 + 1) * W * I);
      std::vector<float> y(B * rows * W * O);
      if (ct == ComputeType::kBF16) {
        std::vector<uint16_t> inb(in.size());
        for (size_t i = 0; i < in.size(); ++i) inb[i] = f32_to_bf16(in[i]);
        conv.forward_halo(inb.data(), B, rows, W, y.data());
      } else {
        conv.forward_halo(in.data(), B, rows, W, y.data());
      }
      for (int64_t bi = 0; bi < B; ++bi)
        for (int64_t i = 0; i < rows * W * O; ++i)
          ASSERT_NEAR(y[bi * rows * W * O + i], whole[(bi * H + r0) * W * O + i], 1e-5)
              << "rows " << r0 << ".." << r1 << (ct == ComputeType::kBF16 ? " bf16" : " f32");
    }
  }
}

// The SD / PixArt VAE decoder's convolutions at a 1024 px image (latents
// 128 x 128): each has a JIT kernel in the compute type this CPU uses — a
// reference kernel there turned a decode into hours. Primitives are created,
// not run.
TEST(Ops, VaeDecoderConvolutionsAt1024PxHaveJitKernels) {
  if (cpu_isa() < CpuIsa::kAvx2)
    GTEST_SKIP() << "below AVX2 (here " << cpu_isa_level_name(cpu_isa())
                 << ") oneDNN has no JIT convolution for some of the decoder's layers; such a CPU "
                    "runs them on reference kernels, with a warning each";
  const models::VaeConfig vae;  // block_out_channels 128, 256, 512, 512
  const ComputeType ct = resolve_compute_type(DType::kBF16);
  io::RandomWeights random(3);
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> seen;
  for (const auto& [name, shape] : vae.decoder_weight_specs()) {
    if (shape.size() != 4) continue;
    // The spatial size each convolution runs at: latent size in the mid
    // block, doubled by every up block's upsampler.
    int64_t size = 128;
    if (name.rfind("decoder.up_blocks.", 0) == 0) {
      const int64_t block = std::stoll(name.substr(18));
      size <<= block + (name.find("upsamplers") != std::string::npos ? 1 : 0);
    } else if (name == "decoder.conv_out.weight") {
      size = 1024;
    }
    if (!seen.insert({shape[0], shape[1], shape[2], size}).second) continue;
    const std::string prefix = name.substr(0, name.size() - 7);
    // bf16 3x3 layers run Winograd by default ("xdit:winograd_2x2_3x3+" and
    // its GEMMs' oneDNN kernel) and oneDNN's direct convolution with
    // XDIT_CONV=direct: neither may be a reference kernel.
    for (bool winograd : {true, false}) {
      set_conv_winograd(winograd);
      Conv2d conv(random.get(name, shape), random.get(prefix + ".bias", {shape[0]}), shape[2] / 2,
                  ct);
      // The decoder runs its 3x3 convolutions on bands with halo rows: the
      // whole image, and the band of one of two, three or four ranks.
      for (int64_t bands : {1, 2, 3, 4}) {
        if (shape[2] == 1 && bands > 1) break;
        const int64_t rows = (size + bands - 1) / bands;
        const std::string impl = shape[2] == 1
                                     ? conv.implementation(1, size, size)
                                     : conv.implementation(1, rows + 2 * conv.halo(), size, true);
        EXPECT_NE(impl.rfind("ref", 0), 0u)
            << name << " at " << size << " px, " << rows << " rows: " << impl;
        EXPECT_EQ(impl.find("+ref"), std::string::npos)
            << name << " at " << size << " px, " << rows << " rows: " << impl;
      }
    }
    set_conv_winograd(std::nullopt);
  }
  EXPECT_GE(seen.size(), 10u);
}

// The convolution that oneDNN 3.2 runs with a reference kernel in the layout
// packed at load (256 -> 128 channels at 256 x 256): re-packed for its size,
// it still computes the convolution (against oneDNN's f32 result).
TEST(Ops, Conv2dRepackedForItsSizeComputesTheSame) {
  if (!cpu_has_bf16()) GTEST_SKIP() << "needs native bf16 (the case arises in bf16)";
  const int64_t I = 256, O = 128, H = 256, W = 256;
  auto w = randn(O * I * 9, 41, 0.05f), b = randn(O, 42), x = randn(H * W * I, 43);
  Conv2d f32(Tensor::from_vector(w, {O, I, 3, 3}), Tensor::from_vector(b, {O}), 1,
             ComputeType::kF32);
  if (f32.implementation(1, H, W).rfind("ref", 0) == 0)
    GTEST_SKIP() << "no f32 JIT kernel to compare with";
  set_conv_winograd(false);  // the case is oneDNN's direct convolution's
  Conv2d bf16(Tensor::from_vector(w, {O, I, 3, 3}), Tensor::from_vector(b, {O}), 1,
              ComputeType::kBF16);
  set_conv_winograd(std::nullopt);
  EXPECT_NE(bf16.implementation(1, H, W).rfind("ref", 0), 0u);
  EXPECT_EQ(bf16.implementation(1, H, W).rfind("xdit:winograd", 0), std::string::npos);
  std::vector<float> y(H * W * O), r(y.size());
  f32.forward(x.data(), 1, H, W, r.data());
  bf16.forward(x.data(), 1, H, W, y.data());
  EXPECT_LT(rel_max_err(y, r), 2e-2);
}

TEST(Ops, GroupNormNhwcWithAndWithoutSilu) {
  const int64_t B = 2, HW = 35, C = 24, G = 8;
  auto x = randn(B * HW * C, 33, 2.0f), g = randn(C, 34), b = randn(C, 35);
  for (auto& v : x) v += 0.7f;
  std::vector<float> y(x.size()), r(x.size());
  for (bool s : {false, true}) {
    group_norm_nhwc(x.data(), y.data(), B, HW, C, G, 1e-6f, g.data(), b.data(), s);
    ref::group_norm_nhwc(x.data(), r.data(), B, HW, C, G, 1e-6f, g.data(), b.data(), s);
    EXPECT_LT(rel_max_err(y, r), 1e-5) << "silu=" << s;
    // bf16 output: the f32 result rounded (one bf16 step at most apart).
    std::vector<uint16_t> yb(x.size());
    group_norm_nhwc_bf16(x.data(), yb.data(), B, HW, C, G, 1e-6f, g.data(), b.data(), s);
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(bf16_to_f32(yb[i]), y[i], std::fabs(y[i]) / 128 + 1e-30) << i;
  }
}

// GroupNorm over row bands: each band's moments, added, normalise each band
// as the whole image (into a buffer with a halo row above and below each item).
TEST(Ops, GroupNormFromMomentsOfRowBandsEqualsTheWhole) {
  const int64_t B = 2, H = 5, W = 7, C = 24, G = 8, HW = H * W;
  auto x = randn(B * HW * C, 60, 2.0f), g = randn(C, 61), b = randn(C, 62);
  for (auto& v : x) v += 0.7f;
  std::vector<float> whole(x.size());
  group_norm_nhwc(x.data(), whole.data(), B, HW, C, G, 1e-6f, g.data(), b.data(), true);
  const int64_t split = 2;  // rows [0, 2) and [2, 5)
  std::vector<std::vector<float>> bands;
  std::vector<double> sum(static_cast<size_t>(2 * B * G), 0.0);
  for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, split}, {split, H}}) {
    std::vector<float> band;
    for (int64_t bi = 0; bi < B; ++bi)
      band.insert(band.end(), x.begin() + (bi * H + r0) * W * C, x.begin() + (bi * H + r1) * W * C);
    std::vector<double> m(sum.size());
    group_norm_moments_nhwc(band.data(), B, (r1 - r0) * W, C, G, m.data());
    for (size_t i = 0; i < m.size(); ++i) sum[i] += m[i];
    bands.push_back(band);
  }
  for (int i = 0; i < 2; ++i) {
    const int64_t r0 = i == 0 ? 0 : split, rows = i == 0 ? split : H - split;
    const int64_t item = (rows + 2) * W * C;
    std::vector<float> y(static_cast<size_t>(B * item), -7.0f);
    std::vector<uint16_t> yb(y.size());
    group_norm_apply_nhwc(bands[i].data(), y.data() + W * C, B, rows * W, C, G, 1e-6f, g.data(),
                          b.data(), true, sum.data(), static_cast<double>(HW * (C / G)), item);
    group_norm_apply_nhwc_bf16(bands[i].data(), yb.data() + W * C, B, rows * W, C, G, 1e-6f,
                               g.data(), b.data(), true, sum.data(),
                               static_cast<double>(HW * (C / G)), item);
    for (int64_t bi = 0; bi < B; ++bi) {
      EXPECT_EQ(y[bi * item], -7.0f) << "the halo rows are left alone";
      for (int64_t k = 0; k < rows * W * C; ++k) {
        const float want = whole[(bi * H + r0) * W * C + k];
        ASSERT_NEAR(y[bi * item + W * C + k], want, 1e-5f * (1 + std::fabs(want)));
        ASSERT_NEAR(bf16_to_f32(yb[bi * item + W * C + k]), want, std::fabs(want) / 128 + 1e-30);
      }
    }
  }
}

TEST(Ops, UpsampleNearest2x) {
  const int64_t B = 2, H = 3, W = 5, C = 7;
  auto x = randn(B * H * W * C, 36);
  std::vector<float> y(B * 4 * H * W * C);
  upsample_nearest2x_nhwc(x.data(), y.data(), B, H, W, C);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < 2 * H; ++r)
      for (int64_t c = 0; c < 2 * W; ++c)
        for (int64_t k = 0; k < C; ++k)
          ASSERT_EQ(y[((b * 2 * H + r) * 2 * W + c) * C + k],
                    x[((b * H + r / 2) * W + c / 2) * C + k]);
  // bf16, into a buffer with one halo row above and below each item.
  const int64_t item = (2 * H + 2) * 2 * W * C;
  std::vector<uint16_t> yb(static_cast<size_t>(B * item), 0xFFFF);
  upsample_nearest2x_nhwc_bf16(x.data(), yb.data() + 2 * W * C, B, H, W, C, item);
  for (int64_t b = 0; b < B; ++b) {
    EXPECT_EQ(yb[b * item], 0xFFFF) << "the halo rows are left alone";
    for (int64_t r = 0; r < 2 * H; ++r)
      for (int64_t c = 0; c < 2 * W; ++c)
        for (int64_t k = 0; k < C; ++k)
          ASSERT_EQ(yb[b * item + ((r + 1) * 2 * W + c) * C + k],
                    f32_to_bf16(x[((b * H + r / 2) * W + c / 2) * C + k]));
  }
}

// f32 → bf16 conversions, contiguous and over strided rows: each value
// rounded to nearest even as f32_to_bf16 does.
TEST(Ops, ToBf16ArrayAndStridedRows) {
  const int64_t rows = 37, n = 23, stride = 31;  // odd sizes; stride > n
  auto x = randn(rows * stride, 44, 3.0f);
  std::vector<uint16_t> a(x.size()), r(static_cast<size_t>(rows * n), 0xFFFF);
  to_bf16_array(x.data(), a.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(a[i], f32_to_bf16(x[i])) << i;
  to_bf16_rows(x.data(), stride, rows, n, r.data());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j)
      ASSERT_EQ(r[static_cast<size_t>(i * n + j)],
                f32_to_bf16(x[static_cast<size_t>(i * stride + j)]))
          << i << "," << j;
}

TEST(Ops, LayerNormModulateEqualsLayerNormThenModulate) {
  const int64_t B = 3, T = 19, D = 251, stride = 6 * D;
  auto x = randn(B * T * D, 11, 2.0f), mod = randn(B * stride, 12);
  for (auto& v : x) v -= 0.7f;  // non-zero mean
  const float* shift = mod.data() + 3 * D;
  const float* scale = mod.data() + 4 * D;
  std::vector<float> fused(x.size()), two(x.size());
  layer_norm_modulate(x.data(), fused.data(), B, T, D, 1e-6f, shift, scale, stride);
  layer_norm(x.data(), two.data(), B * T, D, 1e-6f, nullptr, nullptr);
  modulate(two.data(), two.data(), B, T, D, shift, scale, stride);
  EXPECT_LT(rel_max_err(fused, two), 1e-6);
  // bf16 out: the f32 result rounded to nearest even, as a bf16 linear layer
  // would round it (the row width 251 leaves a masked tail).
  std::vector<uint16_t> b16(x.size(), 0x7fc0);
  layer_norm_modulate(x.data(), b16.data(), B, T, D, 1e-6f, shift, scale, stride);
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_LE(std::abs(static_cast<int>(b16[i]) - static_cast<int>(f32_to_bf16(fused[i]))), 1)
        << i << ": " << bf16_to_f32(b16[i]) << " vs " << fused[i];
}

// The fused residual passes do exactly what the ops they replace do, one
// after the other: the residual add (gated or not), then the bf16 copy of h
// or the modulated LayerNorm of the new h, f32 and bf16 out; odd width (a
// masked tail), batch items' modulations a stride apart.
TEST(Ops, FusedResidualPassesEqualTheOpsInTurn) {
  const int64_t B = 2, T = 23, D = 203, stride = 6 * D;
  auto h0 = randn(B * T * D, 31, 3.0f), y = randn(B * T * D, 32), mod = randn(B * stride, 33);
  for (auto& v : h0) v += 0.4f;  // non-zero mean
  const float* gate = mod.data() + 2 * D;
  const float* shift = mod.data() + 3 * D;
  const float* scale = mod.data() + 4 * D;
  for (const float* g : {gate, static_cast<const float*>(nullptr)}) {
    auto want_h = h0;
    gated_residual_add(want_h.data(), y.data(), B, T, D, g, stride);
    std::vector<float> want_n(h0.size());
    std::vector<uint16_t> want_b(h0.size()), want_hb(h0.size());
    layer_norm_modulate(want_h.data(), want_n.data(), B, T, D, 1e-6f, shift, scale, stride);
    layer_norm_modulate(want_h.data(), want_b.data(), B, T, D, 1e-6f, shift, scale, stride);
    to_bf16_array(want_h.data(), want_hb.data(), B * T * D);

    auto h = h0;
    std::vector<uint16_t> hb(h0.size(), 0x7fc0);
    gated_residual_add(h.data(), y.data(), B, T, D, g, stride, hb.data());
    EXPECT_EQ(h, want_h);
    EXPECT_EQ(hb, want_hb);

    h = h0;
    std::vector<float> n(h0.size(), NAN);
    residual_layer_norm_modulate(h.data(), y.data(), B, T, D, g, 1e-6f, shift, scale, stride,
                                 n.data());
    EXPECT_EQ(h, want_h);
    EXPECT_EQ(n, want_n);

    h = h0;
    std::vector<uint16_t> b(h0.size(), 0x7fc0);
    residual_layer_norm_modulate(h.data(), y.data(), B, T, D, g, 1e-6f, shift, scale, stride,
                                 b.data());
    EXPECT_EQ(h, want_h);
    EXPECT_EQ(b, want_b);
  }
}

TEST(Ops, ModulateAndGatedResidual) {
  const int64_t B = 3, T = 17, D = 45, stride = 6 * D;
  auto x = randn(B * T * D, 6), mod = randn(B * stride, 7), y = randn(B * T * D, 8);
  std::vector<float> out(x.size());
  const float* shift = mod.data() + 2 * D;
  const float* scale = mod.data() + 4 * D;
  modulate(x.data(), out.data(), B, T, D, shift, scale, stride);
  auto h = x;
  gated_residual_add(h.data(), y.data(), B, T, D, mod.data() + D, stride);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) {
        const int64_t i = (b * T + t) * D + d;
        // FMA contraction may round differently: compare to 1e-6 relative.
        const double mo =
            static_cast<double>(x[i]) * (1 + scale[b * stride + d]) + shift[b * stride + d];
        const double ho = x[i] + static_cast<double>(mod[b * stride + D + d]) * y[i];
        EXPECT_NEAR(out[i], mo, 1e-6 * (1 + std::fabs(mo)));
        EXPECT_NEAR(h[i], ho, 1e-6 * (1 + std::fabs(ho)));
      }
}

TEST(Ops, PatchifyThenGemmEqualsConvolution) {
  const int64_t B = 2, C = 3, H = 10, W = 14, p = 2, D = 7, K = C * p * p;
  auto lat = randn(B * C * H * W, 9), w = randn(D * K, 10), bias = randn(D, 11);
  const int64_t N = B * (H / p) * (W / p);
  std::vector<float> cols(N * K), y(N * D), r(N * D);
  patchify(lat.data(), B, C, H, W, p, cols.data());
  ref::linear(cols.data(), w.data(), bias.data(), N, K, D, y.data());
  ref::patch_conv(lat.data(), w.data(), bias.data(), B, C, H, W, p, D, r.data());
  EXPECT_LT(rel_max_err(y, r), 1e-6);
}

TEST(Ops, UnpatchifyInvertsTheDiTLayout) {
  const int64_t B = 2, C = 5, h = 3, w = 4, p = 2;
  auto x = randn(B * h * w * p * p * C, 12);
  std::vector<float> out(x.size());
  unpatchify(x.data(), B, C, h, w, p, out.data());
  // diffusers: reshape(B,h,w,p,p,C) then einsum nhwpqc->nchpwq.
  for (int64_t n = 0; n < B; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t hh = 0; hh < h; ++hh)
        for (int64_t pp = 0; pp < p; ++pp)
          for (int64_t ww = 0; ww < w; ++ww)
            for (int64_t q = 0; q < p; ++q) {
              const float src = x[((((n * h + hh) * w + ww) * p + pp) * p + q) * C + c];
              const float dst = out[((n * C + c) * (h * p) + hh * p + pp) * (w * p) + ww * p + q];
              ASSERT_EQ(src, dst);
            }
}

TEST(Ops, TimestepEmbedding) {
  const int64_t n = 5, dim = 256;
  std::vector<float> t = {0.0f, 1.0f, 421.0f, 999.0f, 37.5f};
  std::vector<float> y(n * dim), r(n * dim);
  for (bool flip : {true, false}) {
    timestep_embedding(t.data(), n, dim, flip, 0.0f, y.data());
    ref::timestep_embedding(t.data(), n, dim, flip, 0.0f, r.data());
    // f32 argument rounding at t≈1000 allows ~1e-4 absolute.
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], r[i], 2e-4) << i;
  }
  EXPECT_FLOAT_EQ(y[0], 0.0f);  // sin(0) first when not flipped
}

TEST(Ops, SinCosPositionEmbedding) {
  const int64_t dim = 24, gh = 3, gw = 5;
  std::vector<float> y(gh * gw * dim), r(y.size());
  sincos_pos_embed_2d(dim, gh, gw, 64.0f, 2.0f, y.data());
  ref::sincos_pos_embed_2d(dim, gh, gw, 64.0f, 2.0f, r.data());
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], r[i], 1e-5) << i;
}

}  // namespace
}  // namespace xdit::kernels
