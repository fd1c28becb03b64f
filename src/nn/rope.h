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

// Fills cos[0, Σ dims) and sin[0, Σ dims) for one token at positions pos[a].
// `f32_angles`: each angle rounded to f32 before its cos and sin (Z-Image's
// RopeEmbedder: f64 angles cast to float, then torch.polar).
void rope_row(const double* pos, const std::vector<int64_t>& dims, double theta, float* cos,
              float* sin, bool f32_angles = false);

}  // namespace xdit::nn
