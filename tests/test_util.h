// Helpers shared by the tests: seeded random data and error measures.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace xdit::test {

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
inline std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace xdit::test
