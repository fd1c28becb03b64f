// The CUDA op set: the ops of kernels/kernels.h with the same meaning and
// arguments, on device pointers, queued on a stream. The kernels.h ops call
// these when the thread's current device is a CUDA device (DeviceScope), so
// model code reaches them without naming a backend. tests/kernels/
// test_cuda_ops.cpp checks each against the CPU op on random, odd-sized
// inputs (skipped, saying why, where there is no GPU).
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"
#include "kernels/kernels.h"

namespace xdit::kernels::cuda {

using xdit::cuda::Stream;

// y = (x - mean) / sqrt(var + eps) [* gamma + beta] per row of `dim` values.
void layer_norm(const float* x, float* y, int64_t rows, int64_t dim, float eps, const float* gamma,
                const float* beta, Stream s = nullptr);

// T5's RMSNorm: y = x / sqrt(mean(x²) + eps) · weight.
void rms_norm(const float* x, float* y, int64_t rows, int64_t dim, float eps, const float* weight,
              Stream s = nullptr);

// Elementwise; y may equal x.
void gelu_tanh(const float* x, float* y, int64_t n, Stream s = nullptr);
void silu(const float* x, float* y, int64_t n, Stream s = nullptr);
void tanh(const float* x, float* y, int64_t n, Stream s = nullptr);

// AdaLN: y[b,t,:] = x[b,t,:] · (1 + scale_b) + shift_b, shift_b = shift + b·mod_stride.
void modulate(const float* x, float* y, int64_t batch, int64_t tokens, int64_t dim,
              const float* shift, const float* scale, int64_t mod_stride, Stream s = nullptr);

// h[b,t,:] += gate_b · y[b,t,:] (gate_b = gate + b·gate_stride, 1 when gate is null).
void gated_residual_add(float* h, const float* y, int64_t batch, int64_t tokens, int64_t dim,
                        const float* gate, int64_t gate_stride, Stream s = nullptr);

void gelu_tanh_gate(const float* x, float* y, int64_t rows, int64_t n, Stream s = nullptr);
void silu_gate(const float* x, float* y, int64_t rows, int64_t n, Stream s = nullptr);
void gelu_erf(const float* x, float* y, int64_t n, Stream s = nullptr);
void quick_gelu(const float* x, float* y, int64_t n, Stream s = nullptr);
void relu(const float* x, float* y, int64_t n, Stream s = nullptr);
void softmax_rows(float* x, int64_t rows, int64_t cols, Stream s = nullptr);
void layer_norm_modulate(const float* x, float* y, int64_t batch, int64_t tokens, int64_t dim,
                         float eps, const float* shift, const float* scale, int64_t mod_stride,
                         Stream s = nullptr);
void layer_norm_modulate(const float* x, uint16_t* y, int64_t batch, int64_t tokens, int64_t dim,
                         float eps, const float* shift, const float* scale, int64_t mod_stride,
                         Stream s = nullptr);

// Conversions: f32 rows (`stride` apart) → packed bf16, and back.
void to_bf16_array(const float* x, uint16_t* y, int64_t n, Stream s = nullptr);
void to_bf16_rows(const float* x, int64_t stride, int64_t rows, int64_t n, uint16_t* y,
                  Stream s = nullptr);
void from_bf16_rows(const uint16_t* x, int64_t rows, int64_t n, float* y, int64_t stride,
                    Stream s = nullptr);

// y[r·y_stride + j] = x[r·x_stride + j] + bias[j].
void add_rows(const float* x, int64_t x_stride, const float* b, int64_t b_stride, float* y,
              int64_t y_stride, int64_t rows, int64_t n, Stream s = nullptr);

// GroupNorm, whole or in halves. `moments` ([B, G, 2] doubles) are host
// memory as on the CPU (the patch-parallel VAE sums them across ranks).
void group_norm_nhwc(const float* x, void* y, bool y_bf16, int64_t batch, int64_t hw,
                     int64_t channels, int64_t groups, float eps, const float* gamma,
                     const float* beta, bool silu, Stream s = nullptr);
void group_norm_moments_nhwc(const float* x, int64_t batch, int64_t hw, int64_t channels,
                             int64_t groups, double* moments, Stream s = nullptr);
void group_norm_apply_nhwc(const float* x, float* y, int64_t batch, int64_t hw, int64_t channels,
                           int64_t groups, float eps, const float* gamma, const float* beta,
                           bool silu, const double* moments, double count, int64_t y_batch_stride,
                           Stream s = nullptr);
void group_norm_apply_nhwc_bf16(const float* x, uint16_t* y, int64_t batch, int64_t hw,
                                int64_t channels, int64_t groups, float eps, const float* gamma,
                                const float* beta, bool silu, const double* moments, double count,
                                int64_t y_batch_stride, Stream s = nullptr);
void upsample_nearest2x_nhwc(const float* x, float* y, int64_t batch, int64_t h, int64_t w,
                             int64_t channels, int64_t y_batch_stride, Stream s = nullptr);
void upsample_nearest2x_nhwc_bf16(const float* x, uint16_t* y, int64_t batch, int64_t h, int64_t w,
                                  int64_t channels, int64_t y_batch_stride, Stream s = nullptr);

void patchify(const float* latent, int64_t batch, int64_t channels, int64_t height, int64_t width,
              int64_t p, float* cols, Stream s = nullptr);
void unpatchify(const float* x, int64_t batch, int64_t channels, int64_t h, int64_t w, int64_t p,
                float* out, Stream s = nullptr);

void affine_div(const float* x, float* y, int64_t n, float divisor, float shift,
                Stream s = nullptr);
void guidance_combine(const float* uncond, const float* cond, float g, float* noise, int64_t n,
                      Stream s = nullptr);
void guidance_add(float* noise, const float* cond, const float* skip, float scale, int64_t n,
                  Stream s = nullptr);
void cfg_renorm_patches(const float* cond, float* noise, int64_t channels, int64_t rows,
                        int64_t width, int64_t p, Stream s = nullptr);
void flow_euler_step(const float* model_output, float* sample, float dt, int64_t n,
                     Stream s = nullptr);
// `coeff`: host values (at most 4 orders), passed by value to the kernel.
void taylor_update(const float* y, float* factors, int64_t have, float delta, int64_t n,
                   Stream s = nullptr);
void taylor_predict(const float* factors, const float* coeff, int64_t orders, float* out, int64_t n,
                    Stream s = nullptr);
void dpm_solver_step(const float* model_output, float* sample, float* cur, const float* prev,
                     int64_t items, int64_t n, int64_t hist_stride, const DpmUpdate& k,
                     Stream s = nullptr);
void unipc_step(const float* model_output, float* sample, const float* cur, float* prev,
                float* last, int64_t items, int64_t n, int64_t hist_stride, const UniPcUpdate& k,
                Stream s = nullptr);
void nchw_rows_to_nhwc(const float* x, int64_t batch, int64_t channels, int64_t height,
                       int64_t width, int64_t r0, int64_t rows, float* y, Stream s = nullptr);
void nhwc_to_nchw(const float* x, int64_t batch, int64_t hw, int64_t channels, float* y,
                  Stream s = nullptr);
void pack_2x2(const float* src, float* dst, int64_t batch, int64_t channels, int64_t height,
              int64_t width, int64_t r0, int64_t r1, bool pack, Stream s = nullptr);
void qk_norm_rope(float* qkv, int64_t batch, int64_t seq, int64_t row_begin, int64_t rows,
                  int64_t heads, int64_t head_dim, float eps, const float* wq, const float* wk,
                  const float* cos, const float* sin, Stream s = nullptr);
void row_sum_squares(const float* x, int64_t rows, int64_t stride, int64_t width, float* sumsq,
                     Stream s = nullptr);
void rms_scale_rope(float* x, int64_t rows, int64_t stride, int64_t width, const float* sumsq,
                    int64_t total_width, float eps, const float* w, int64_t seq, int64_t head_dim,
                    const float* cos, const float* sin, Stream s = nullptr);

// Attention (attention.cu): the CPU op's arguments on device pointers. The
// packed K/V layout is head-major [B, H, kv_len, D], bf16 when bf16 was asked for.
bool attention_packs_bf16(bool bf16);
void attention(const AttentionArgs& a, Stream s = nullptr);
// src f32 or bf16 rows → tokens [t, t + n) of a packed buffer of `total` tokens.
void pack_kv(const void* src, bool src_bf16, int64_t stride, int64_t batch, int64_t heads,
             int64_t n, int64_t head_dim, bool dst_bf16, void* dst, int64_t total, int64_t t,
             int64_t batch_stride, Stream s = nullptr);
void attention_merge(float* o, float* lse, const float* ob, const float* lse_b, int64_t batch,
                     int64_t tokens, int64_t heads, int64_t head_dim, Stream s = nullptr);
void unpack_kv(const void* src, int64_t batch, int64_t heads, int64_t total, int64_t head_dim,
               bool bf16, float* dst, Stream s = nullptr);

}  // namespace xdit::kernels::cuda
