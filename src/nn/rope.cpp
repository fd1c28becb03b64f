#include "nn/rope.h"

#include <cmath>

namespace xdit::nn {

void rope_row(const double* pos, const std::vector<int64_t>& dims, double theta, float* cos,
              float* sin, bool f32_angles) {
  int64_t off = 0;
  for (size_t ax = 0; ax < dims.size(); ++ax) {
    const int64_t d = dims[ax];
    for (int64_t j = 0; j < d / 2; ++j) {
      const double freq =
          1.0 / std::pow(theta, static_cast<double>(2 * j) / static_cast<double>(d));
      double ang = pos[ax] * freq;
      if (f32_angles) ang = static_cast<float>(ang);
      const auto cv = static_cast<float>(std::cos(ang)), sv = static_cast<float>(std::sin(ang));
      cos[off + 2 * j] = cos[off + 2 * j + 1] = cv;
      sin[off + 2 * j] = sin[off + 2 * j + 1] = sv;
    }
    off += d;
  }
}

}  // namespace xdit::nn
