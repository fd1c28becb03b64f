#include "pipeline/resolution.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace xdit::pipeline {

namespace {
struct Bin {
  int64_t table;
  const char* ratio;
  int64_t height, width;
};
constexpr Bin kBins[] = {
#include "pipeline/aspect_ratio_bins.inc"
};

// torch's linear interpolation indices for one axis (align_corners=False).
struct Axis {
  std::vector<int64_t> i0, i1;
  std::vector<float> w0, w1;
};
Axis linear_axis(int64_t in, int64_t out) {
  Axis a;
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  for (int64_t o = 0; o < out; ++o) {
    const float real = std::max(scale * (static_cast<float>(o) + 0.5f) - 0.5f, 0.0f);
    const int64_t i0 = std::min(static_cast<int64_t>(std::floor(real)), in - 1);
    const float lambda = std::min(std::max(real - static_cast<float>(i0), 0.0f), 1.0f);
    a.i0.push_back(i0);
    a.i1.push_back(i0 + (i0 < in - 1 ? 1 : 0));
    a.w0.push_back(1.0f - lambda);
    a.w1.push_back(lambda);
  }
  return a;
}
}  // namespace

int64_t bin_table_for_sample_size(int64_t s) {
  switch (s) {
    case 32:
      return 256;
    case 64:
      return 512;
    case 128:
      return 1024;
    case 256:
      return 2048;
  }
  XDIT_FAIL("resolution binning has no table for transformer sample_size ", s,
            " (32, 64, 128 or 256): pass --no_resolution_binning");
}

std::pair<int64_t, int64_t> classify_height_width_bin(int64_t height, int64_t width,
                                                      int64_t table) {
  const double ar = static_cast<double>(height) / static_cast<double>(width);
  const Bin* best = nullptr;
  double best_d = 0;
  for (const Bin& b : kBins) {
    if (b.table != table) continue;
    const double d = std::fabs(std::strtod(b.ratio, nullptr) - ar);
    if (best == nullptr || d < best_d) best = &b, best_d = d;
  }
  XDIT_CHECK(best != nullptr, "no aspect-ratio bins for ", table, " px");
  return {best->height, best->width};
}

Tensor resize_and_crop(const Tensor& image, int64_t nh, int64_t nw) {
  const int64_t B = image.dim(0), C = image.dim(1), H = image.dim(2), W = image.dim(3);
  XDIT_CHECK(nh > 0 && nw > 0 && H > 0 && W > 0, "cannot resize ", H, "x", W, " to ", nh, "x", nw);
  if (H == nh && W == nw) return image;
  const double ratio = std::max(static_cast<double>(nh) / H, static_cast<double>(nw) / W);
  // int(W · ratio) as diffusers computes it; never below the target, which a
  // rounding of W · (nw / W) to nw − 1 would make (the crop would read
  // outside the resized image).
  const int64_t rw = std::max(static_cast<int64_t>(W * ratio), nw);
  const int64_t rh = std::max(static_cast<int64_t>(H * ratio), nh);
  const Axis ay = linear_axis(H, rh), ax = linear_axis(W, rw);
  const int64_t sx = (rw - nw) / 2, sy = (rh - nh) / 2;
  Tensor out = Tensor::empty({B, C, nh, nw});
  for (int64_t bc = 0; bc < B * C; ++bc) {
    const float* src = image.data<float>() + bc * H * W;
    float* dst = out.data<float>() + bc * nh * nw;
    for (int64_t y = 0; y < nh; ++y) {
      const int64_t oy = y + sy;
      for (int64_t x = 0; x < nw; ++x) {
        const int64_t ox = x + sx;
        const float* r0 = src + ay.i0[oy] * W;
        const float* r1 = src + ay.i1[oy] * W;
        const float top = ax.w0[ox] * r0[ax.i0[ox]] + ax.w1[ox] * r0[ax.i1[ox]];
        const float bot = ax.w0[ox] * r1[ax.i0[ox]] + ax.w1[ox] * r1[ax.i1[ox]];
        dst[y * nw + x] = ay.w0[oy] * top + ay.w1[oy] * bot;
      }
    }
  }
  return out;
}

}  // namespace xdit::pipeline
