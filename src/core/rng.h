// torch-compatible random numbers: torch.Generator().manual_seed(seed) on CPU
// (an mt19937) followed by torch.randn(shape) in float32, so that a seed gives
// the initial noise diffusers would draw.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace xdit {

class TorchGenerator {
 public:
  explicit TorchGenerator(uint64_t seed);
  uint32_t random();    // one mt19937 output
  uint64_t random64();  // two outputs, the first in the high half
  // torch.randn(n) in float32 (consumes the generator as torch does).
  void randn(float* out, int64_t n);
  Tensor randn(const Shape& shape);

 private:
  uint32_t state_[624];
  int index_ = 624;
  bool has_cached_normal_ = false;
  double cached_normal_ = 0.0;
};

// A seed as torch.manual_seed takes it: an integer in [-2^63, 2^64 − 1];
// negative values wrap to 2^64 + value, as torch does. Anything else throws
// one line naming the value.
uint64_t parse_torch_seed(const std::string& text);

}  // namespace xdit
