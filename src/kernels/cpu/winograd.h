// 3×3 convolution (stride 1) by Winograd's minimal filtering F(2×2, 3×3)
// (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016):
// each 2×2 output tile comes from its 4×4 input tile through 16 products per
// (input, output) channel pair instead of 36, 2.25× fewer multiply-adds.
// Over a block of tiles the 16 products are 16 bf16 GEMMs
// [tiles × in] · [in × out], run as one batched oneDNN matmul; the input and
// output transforms are additions on AVX-512 vectors, done per block while
// the block is in cache.
//
// Written here because oneDNN 3 has no bf16 Winograd convolution (its only
// Winograd kernel is f32 on AVX-512, slower than its bf16 direct one), and
// the VAE decoder spends nearly all its time in 3×3 convolutions.
//
// The transformed input is rounded to bf16 as the direct convolution's input
// is; its values are sums of up to four inputs, so the rounding error grows:
// 1.1–2.3× the direct bf16 convolution's largest error on the tested layers
// (docs/PERFORMANCE.md, "Issue 9, seventh round").
#pragma once

#include <cstdint>
#include <string>

#include "core/aligned.h"

namespace xdit::kernels::cpu {

class Winograd3x3 {
 public:
  // Whether this CPU and these channel counts can use it: AVX-512-bf16, and
  // both counts multiples of 16 (whole vectors).
  static bool usable(int64_t in, int64_t out);
  // w: [out, in, 3, 3] in f32.
  Winograd3x3(const float* w, int64_t in, int64_t out);

  // x: bf16 NHWC [batch, in_rows, width, in]; y: f32 NHWC
  // [batch, in_rows + 2·top − 2, width, out], plus bias[out]. `top` zero rows
  // are taken above the first input row and below the last (1: the layer's
  // padding; 0: x already carries halo rows); one zero column on each side.
  void forward(const uint16_t* x, int64_t batch, int64_t in_rows, int64_t width, int64_t top,
               const float* bias, float* y) const;

  // "xdit:winograd_2x2_3x3+" and the oneDNN implementation of its GEMMs.
  std::string implementation() const;

 private:
  int64_t in_ = 0, out_ = 0;
  int64_t tiles_ = 0;           // tiles per block: the GEMMs' row count
  AlignedVector<char> packed_;  // the transformed weights of the 16 points, blocked
};

}  // namespace xdit::kernels::cpu
