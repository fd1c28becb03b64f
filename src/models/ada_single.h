// The AdaLN-single pieces PixArt's and Wan's transformers share: one
// timestep projection t6 [B, 6d] per call, each block adding its own
// scale_shift_table [6, d] to it (shift, scale, gate of the attention, then
// of the MLP), and a final layer whose 2-row table is added to the embedded
// timestep [B, d] (shift, scale) before the modulated norm, the projection
// and the unpatchify.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/linear.h"
#include "nn/layers.h"

namespace xdit::models {

// A block's first modulated norm, norm1(h)·(1 + scale_msa) + shift_msa:
// h [B, N, d] with the block's table + t6 (written into `mod`, B·6d floats).
Tensor ada_single_modulated_input(const float* h, const float* table, const float* t6, int64_t B,
                                  int64_t N, int64_t d, float eps, nn::Scratch& mod);

// The final layer on h [B, rows·grid_width, d]: [B, out_channels, rows·p,
// width]. `fin`, `norm` and `patches` are scratch.
struct FinalLayer {
  const float* table;  // scale_shift_table [2, d]
  const float* emb;    // the embedded timestep [B, d]
  const kernels::Linear* proj_out;
  int64_t out_channels, patch;
  float eps;
};
Tensor ada_single_final(const FinalLayer& f, const float* h, int64_t B, int64_t rows,
                        int64_t grid_width, int64_t width, int64_t d, nn::Scratch& fin,
                        nn::Scratch& norm, nn::Scratch& patches);

}  // namespace xdit::models
