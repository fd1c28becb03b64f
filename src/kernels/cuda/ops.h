// The CUDA op set: the ops of kernels/kernels.h with the same meaning and
// arguments, on device pointers, queued on a stream. tests/kernels/
// test_cuda_ops.cpp checks each against the CPU op on random, odd-sized
// inputs (skipped, saying why, where there is no GPU).
#pragma once

#include <cstdint>

#include "kernels/cuda/runtime.h"

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

// AdaLN: y[b,t,:] = x[b,t,:] · (1 + scale_b) + shift_b, shift_b = shift + b·mod_stride.
void modulate(const float* x, float* y, int64_t batch, int64_t tokens, int64_t dim,
              const float* shift, const float* scale, int64_t mod_stride, Stream s = nullptr);

// h[b,t,:] += gate_b · y[b,t,:] (gate_b = gate + b·gate_stride, 1 when gate is null).
void gated_residual_add(float* h, const float* y, int64_t batch, int64_t tokens, int64_t dim,
                        const float* gate, int64_t gate_stride, Stream s = nullptr);

}  // namespace xdit::kernels::cuda
