// Rotary position tables as diffusers builds them for FLUX.1 and Wan
// (get_1d_rotary_pos_embed with use_real and repeat_interleave_real, f64
// frequencies): a token's row of head_dim values, per axis a of dims[a]
// channels the angles pos[a] · θ^(−2j/dims[a]) for pairs j, cos and sin in
// f64 rounded to f32, each written for both members of its pair (the
// interleaved layout kernels::qk_norm_rope and rms_scale_rope rotate).
#pragma once

#include <cstdint>
#include <vector>

namespace xdit::nn {

// How a model's diffusers code rounds the angles.
enum class RopeMath {
  kF64,        // FLUX, Wan: f64 frequencies and angles, cos/sin rounded to f32
  kF32Angles,  // Z-Image's RopeEmbedder: f64 angles cast to f32, then torch.polar
  kF32,        // Qwen-Image's QwenEmbedRope: f32 frequencies, f32 products, polar
};

// Fills cos[0, Σ dims) and sin[0, Σ dims) for one token at positions pos[a].
void rope_row(const double* pos, const std::vector<int64_t>& dims, double theta, float* cos,
              float* sin, RopeMath math = RopeMath::kF64);

}  // namespace xdit::nn
