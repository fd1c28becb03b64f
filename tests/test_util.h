// Helpers shared by the tests: seeded random data and error measures.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"

namespace xdit::test {

// Image latents [B, C, H, W] (the goldens') as the models take them,
// [B, C, 1, H, W]: a view of the same values.
inline Tensor one_frame(const Tensor& latents) {
  return latents.reshape({latents.dim(0), latents.dim(1), 1, latents.dim(2), latents.dim(3)});
}

// A path fixed at build time, overridable from the environment: a checkout
// on a GPU machine runs binaries built elsewhere (scripts/gpu_check.sh).
inline std::string path_from_env(const char* name, const char* built) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : built;
}
// Why a CUDA device cannot run the GPU cases here ("" where cuda:0 can):
// the runtime's one line (no backend, no driver, no device).
inline std::string no_gpu() {
  try {
    check_device(Device{Device::Kind::kCuda, 0});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#ifdef XDIT_MODELS
// The tiny model folders (XDIT_MODELS in the environment overrides).
inline std::string models_dir() {
  return path_from_env("XDIT_MODELS", XDIT_MODELS);
}
#endif

inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// max|a − b| / max|b|: the relative measure the parity targets are stated in.
inline double rel_max_err(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return den == 0 ? num : num / den;
}
inline double rel_max_err(const std::vector<float>& a, const std::vector<float>& b) {
  return rel_max_err(a.data(), b.data(), std::min(a.size(), b.size())) +
         (a.size() == b.size() ? 0.0 : 1e9);
}

// The message of the xdit::Error that `f` throws, or "(no error)".
// Peak signal-to-noise ratio of `a` against the reference `b` (f32), in dB,
// the peak being max|b|; 1e9 when they are equal.
inline double psnr(const Tensor& a, const Tensor& b) {
  double mse = 0, peak = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = a.data<float>()[i] - b.data<float>()[i];
    mse += d * d;
    peak = std::max(peak, std::fabs(static_cast<double>(b.data<float>()[i])));
  }
  mse /= static_cast<double>(a.numel());
  return mse == 0 ? 1e9 : 10 * std::log10(peak * peak / mse);
}

// PSNR (dB, peak 255) of 8-bit pixels `a` against `b`; 1e9 when equal.
inline double psnr_rgb8(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double se = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    se += d * d;
  }
  if (a.size() != b.size()) return -1;
  return se == 0 ? 1e9 : 10 * std::log10(255.0 * 255.0 * static_cast<double>(a.size()) / se);
}

// The largest difference (of 255) between 8-bit RGB pixels [H, W, 3] and a
// diffusers image [3, H, W] in [-1, 1] postprocessed as diffusers does it
// (x / 2 + 0.5, clamped, × 255, rounded).
inline int worst_pixel_difference(const std::vector<uint8_t>& rgb, const float* chw, int64_t H,
                                  int64_t W) {
  int worst = 0;
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) {
        const float v = std::clamp(chw[(c * H + y) * W + x] / 2 + 0.5f, 0.0f, 1.0f);
        worst = std::max(worst,
                         std::abs(static_cast<int>(std::nearbyint(v * 255.0f)) -
                                  static_cast<int>(rgb[static_cast<size_t>((y * W + x) * 3 + c)])));
      }
  return worst;
}

// diffusers' output_type "np" ([H, W, 3] in [0, 1], n values) as 8-bit pixels.
inline std::vector<uint8_t> np_image_rgb8(const float* hwc, size_t n) {
  std::vector<uint8_t> rgb(n);
  for (size_t i = 0; i < n; ++i) rgb[i] = static_cast<uint8_t>(std::nearbyint(hwc[i] * 255.0f));
  return rgb;
}

// The largest difference (of 255) between 8-bit RGB images, one after
// another, and diffusers' output_type "np" of them ([B, H, W, 3] in [0, 1]).
inline int worst_pixel_difference(const std::vector<std::vector<uint8_t>>& images,
                                  const float* bhwc) {
  int worst = 0;
  size_t off = 0;
  for (const auto& img : images) {
    const std::vector<uint8_t> ref = np_image_rgb8(bhwc + off, img.size());
    off += img.size();
    for (size_t i = 0; i < img.size(); ++i)
      worst = std::max(worst, std::abs(static_cast<int>(ref[i]) - static_cast<int>(img[i])));
  }
  return worst;
}

// The largest difference (of 255) between two 8-bit images of one size.
inline int worst_pixel_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 256;
  int worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<int>(a[i]) - static_cast<int>(b[i])));
  return worst;
}

inline std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The name of a test instantiated per model folder ("flux-dev" →
// "flux_dev": gtest takes letters, digits and underscores only).
inline std::string model_param_name(const testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

}  // namespace xdit::test
