// Plain reference implementations of the kernels: straightforward loops in
// double precision, written for clarity, used only by the op tests.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace xdit::kernels::ref {

// y[m, n] = x[m, k] · w[n, k]ᵀ + b[n]
void linear(const float* x, const float* w, const float* b, int64_t m, int64_t k, int64_t n,
            float* y);
void layer_norm(const float* x, float* y, int64_t rows, int64_t dim, float eps, const float* gamma,
                const float* beta);
void rms_norm(const float* x, float* y, int64_t rows, int64_t dim, float eps, const float* weight);
float gelu_tanh(float x);
float silu(float x);
float gelu_erf(float x);
float quick_gelu(float x);
void softmax_rows(float* x, int64_t rows, int64_t cols);
// Full-matrix attention with the same argument conventions as kernels::attention.
void attention(const AttentionArgs& a);
// Direct p×p stride-p convolution: latent [B,C,H,W], w [D,C,p,p] → [B, (H/p)(W/p), D].
void patch_conv(const float* latent, const float* w, const float* bias, int64_t batch, int64_t c,
                int64_t h, int64_t wd, int64_t p, int64_t d, float* out);
// Direct convolution, NHWC activations, torch [out, in, k, k] weight, stride 1.
void conv2d_nhwc(const float* x, const float* w, const float* bias, int64_t batch, int64_t h,
                 int64_t wd, int64_t in, int64_t out, int64_t k, int64_t pad, float* y);
void group_norm_nhwc(const float* x, float* y, int64_t batch, int64_t hw, int64_t channels,
                     int64_t groups, float eps, const float* gamma, const float* beta, bool silu);
void timestep_embedding(const float* t, int64_t n, int64_t dim, bool flip, float shift, float* out);
void sincos_pos_embed_2d(int64_t dim, int64_t gh, int64_t gw, float base_size, float interp,
                         float* out);

}  // namespace xdit::kernels::ref
