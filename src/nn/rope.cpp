#include "nn/rope.h"

#include <cmath>

namespace xdit::nn {

void rope_row(const double* pos, const std::vector<int64_t>& dims, double theta, float* cos,
              float* sin, RopeMath math) {
  int64_t off = 0;
  for (size_t ax = 0; ax < dims.size(); ++ax) {
    const int64_t d = dims[ax];
    for (int64_t j = 0; j < d / 2; ++j) {
      double ang;
      if (math == RopeMath::kF32) {
        // 1 / θ^(f32(2j) / d) with each step rounded to f32, then pos · that in f32.
        const float e = static_cast<float>(2 * j) / static_cast<float>(d);
        const auto p = static_cast<float>(std::pow(theta, static_cast<double>(e)));
        ang = static_cast<float>(pos[ax]) * (1.0f / p);
      } else {
        const double freq =
            1.0 / std::pow(theta, static_cast<double>(2 * j) / static_cast<double>(d));
        ang = pos[ax] * freq;
        if (math == RopeMath::kF32Angles) ang = static_cast<float>(ang);
      }
      const auto cv = static_cast<float>(std::cos(ang)), sv = static_cast<float>(std::sin(ang));
      cos[off + 2 * j] = cos[off + 2 * j + 1] = cv;
      sin[off + 2 * j] = sin[off + 2 * j + 1] = sv;
    }
    off += d;
  }
}

}  // namespace xdit::nn
