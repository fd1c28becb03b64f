// The op set's (kernels.h) data movement on the CPU: patchify and its
// inverse, FLUX's 2×2 packing, NCHW ↔ NHWC, nearest 2× upsampling, row
// copies, and the small embedding tables (timestep, 2-D sin-cos positions)
// computed on the host.
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"

namespace xdit::kernels {

namespace {
constexpr int64_t kGrain = 1 << 14;  // elements per OpenMP chunk for elementwise ops
}  // namespace

namespace {
// Each source pixel is written once (copied or converted) into the even
// column, then copied to the odd one.
template <class Out>
void upsample_nearest2x_to(const float* x, Out* y, int64_t batch, int64_t h, int64_t w,
                           int64_t channels, int64_t y_batch_stride) {
  if (y_batch_stride == 0) y_batch_stride = 4 * h * w * channels;
  const auto n = static_cast<size_t>(channels);
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < 2 * h; ++r)
      for (int64_t c = 0; c < w; ++c) {
        Out* dst = y + b * y_batch_stride + (r * 2 * w + 2 * c) * channels;
        const float* src = x + ((b * h + r / 2) * w + c) * channels;
        if constexpr (std::is_same_v<Out, uint16_t>)
          cpu::f32_to_bf16_array(src, dst, n);
        else
          std::memcpy(dst, src, n * sizeof(Out));
        std::memcpy(dst + channels, dst, n * sizeof(Out));
      }
}
}  // namespace

void upsample_nearest2x_nhwc(const float* x, float* y, int64_t batch, int64_t h, int64_t w,
                             int64_t channels, int64_t y_batch_stride) {
  XDIT_CUDA_OP(upsample_nearest2x_nhwc(x, y, batch, h, w, channels, y_batch_stride));
  upsample_nearest2x_to(x, y, batch, h, w, channels, y_batch_stride);
}

void upsample_nearest2x_nhwc_bf16(const float* x, uint16_t* y, int64_t batch, int64_t h, int64_t w,
                                  int64_t channels, int64_t y_batch_stride) {
  XDIT_CUDA_OP(upsample_nearest2x_nhwc_bf16(x, y, batch, h, w, channels, y_batch_stride));
  upsample_nearest2x_to(x, y, batch, h, w, channels, y_batch_stride);
}

void patchify(const float* latent, int64_t batch, int64_t channels, int64_t height, int64_t width,
              int64_t p, float* cols) {
  XDIT_CUDA_OP(patchify(latent, batch, channels, height, width, p, cols));
  const int64_t gh = height / p, gw = width / p, k = channels * p * p;
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < gh; ++r)
      for (int64_t c = 0; c < gw; ++c) {
        float* dst = cols + ((b * gh + r) * gw + c) * k;
        for (int64_t ch = 0; ch < channels; ++ch)
          for (int64_t i = 0; i < p; ++i)
            for (int64_t j = 0; j < p; ++j)
              *dst++ = latent[((b * channels + ch) * height + r * p + i) * width + c * p + j];
      }
}

void unpatchify(const float* x, int64_t batch, int64_t channels, int64_t h, int64_t w, int64_t p,
                float* out) {
  XDIT_CUDA_OP(unpatchify(x, batch, channels, h, w, p, out));
  const int64_t H = h * p, W = w * p;
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t ch = 0; ch < channels; ++ch)
      for (int64_t y = 0; y < H; ++y)
        for (int64_t xx = 0; xx < W; ++xx) {
          const int64_t r = y / p, i = y % p, c = xx / p, j = xx % p;
          out[((b * channels + ch) * H + y) * W + xx] =
              x[((b * h + r) * w + c) * (p * p * channels) + (i * p + j) * channels + ch];
        }
}

namespace {
// Small tables (a few KB a step) are computed on the host and, when `out` is
// device memory, copied there.
template <class F>
void host_table(float* out, int64_t n, F compute) {
#ifdef XDIT_HAVE_CUDA
  if (on_cuda()) {
    std::vector<float> h(static_cast<size_t>(n));
    compute(h.data());
    xdit::cuda::copy(out, h.data(), h.size() * 4);
    return;
  }
#endif
  compute(out);
}
}  // namespace

void timestep_embedding(const float* t, int64_t n, int64_t dim, bool flip_sin_to_cos,
                        float downscale_freq_shift, float* out_table, float scale) {
  host_table(out_table, n * dim, [&](float* out) {
    // diffusers embeddings.get_timestep_embedding: exponent in f32, exp in f32,
    // t·freq in f32, then sin/cos.
    const int64_t half = dim / 2;
    std::vector<float> freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      const float e = -std::log(10000.0f) * static_cast<float>(i) /
                      (static_cast<float>(half) - downscale_freq_shift);
      freq[static_cast<size_t>(i)] = std::exp(e);
    }
    for (int64_t r = 0; r < n; ++r) {
      float* o = out + r * dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = scale * (t[r] * freq[static_cast<size_t>(i)]);
        o[flip_sin_to_cos ? half + i : i] = std::sin(a);
        o[flip_sin_to_cos ? i : half + i] = std::cos(a);
      }
      if (dim % 2 == 1) o[dim - 1] = 0.0f;  // diffusers pads odd widths with a zero
    }
  });
}

void sincos_pos_embed_2d(int64_t dim, int64_t gh, int64_t gw, float base_size,
                         float interpolation_scale, float* out_table) {
  host_table(out_table, gh * gw * dim, [&](float* out) {
    // diffusers get_2d_sincos_pos_embed: grid coordinates in f32
    // (arange / (n / base_size) / interpolation_scale), frequencies and products
    // in f64, result cast to f32.
    const int64_t quarter = dim / 4;
    std::vector<double> omega(static_cast<size_t>(quarter));
    for (int64_t i = 0; i < quarter; ++i)
      omega[static_cast<size_t>(i)] =
          1.0 / std::pow(10000.0, static_cast<double>(i) / (static_cast<double>(dim) / 4.0));
    const float hs = static_cast<float>(static_cast<double>(gh) / base_size);
    const float ws = static_cast<float>(static_cast<double>(gw) / base_size);
    for (int64_t r = 0; r < gh; ++r)
      for (int64_t c = 0; c < gw; ++c) {
        const float ch = static_cast<float>(r) / hs / interpolation_scale;
        const float cw = static_cast<float>(c) / ws / interpolation_scale;
        float* o = out + (r * gw + c) * dim;
        for (int64_t i = 0; i < quarter; ++i) {
          const double a = cw * omega[static_cast<size_t>(i)];
          const double b = ch * omega[static_cast<size_t>(i)];
          o[i] = static_cast<float>(std::sin(a));
          o[quarter + i] = static_cast<float>(std::cos(a));
          o[2 * quarter + i] = static_cast<float>(std::sin(b));
          o[3 * quarter + i] = static_cast<float>(std::cos(b));
        }
      }
  });
}

void copy_from_host(void* dst, const void* host, size_t bytes) {
#ifdef XDIT_HAVE_CUDA
  if (on_cuda()) return xdit::cuda::copy(dst, host, bytes);
#endif
  std::memcpy(dst, host, bytes);
}

void nchw_rows_to_nhwc(const float* x, int64_t B, int64_t C, int64_t H, int64_t W, int64_t r0,
                       int64_t rows, float* y) {
  XDIT_CUDA_OP(nchw_rows_to_nhwc(x, B, C, H, W, r0, rows, y));
#pragma omp parallel for collapse(2) if (B * C * rows * W > kGrain)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t p = 0; p < rows * W; ++p)
        y[(b * rows * W + p) * C + ch] = x[((b * C + ch) * H + r0) * W + p];
}

void nhwc_to_nchw(const float* x, int64_t B, int64_t hw, int64_t C, float* y) {
  XDIT_CUDA_OP(nhwc_to_nchw(x, B, hw, C, y));
#pragma omp parallel for collapse(2) if (B * hw * C > kGrain)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < hw; ++p)
      for (int64_t k = 0; k < C; ++k) y[(b * C + k) * hw + p] = x[(b * hw + p) * C + k];
}

void zero_bytes(void* dst, size_t bytes) {
#ifdef XDIT_HAVE_CUDA
  if (on_cuda()) return xdit::cuda::fill_bytes(dst, 0, bytes);
#endif
  std::memset(dst, 0, bytes);
}

void pack_2x2(const float* src, float* dst, int64_t B, int64_t C, int64_t H, int64_t W, int64_t r0,
              int64_t r1, bool pack) {
  XDIT_CUDA_OP(pack_2x2(src, dst, B, C, H, W, r0, r1, pack));
  const int64_t gw = W / 2, n = (r1 - r0) * gw, y0 = 2 * r0, rows = 2 * (r1 - r0);
  const int64_t plain_h = pack ? H : rows, plain_y0 = pack ? y0 : 0;
#pragma omp parallel for collapse(2) if (B * C * rows * W > (1 << 16))
  for (int64_t b = 0; b < B; ++b)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t y = 0; y < rows; ++y)
        for (int64_t x = 0; x < W; ++x) {
          const int64_t plain = ((b * C + ch) * plain_h + plain_y0 + y) * W + x;
          const int64_t packed =
              (b * n + (y / 2) * gw + x / 2) * 4 * C + ch * 4 + (y % 2) * 2 + x % 2;
          dst[pack ? packed : plain] = src[pack ? plain : packed];
        }
}

void copy_row_bytes(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, int64_t rows,
                    size_t row_bytes) {
  if (rows <= 0 || row_bytes == 0) return;
  // One row's pitches are unused (they may be 0); cudaMemcpy2D wants them
  // at least a row.
  if (rows == 1) dst_pitch = src_pitch = row_bytes;
#ifdef XDIT_HAVE_CUDA
  if (on_cuda())
    return xdit::cuda::copy_rows(dst, dst_pitch, src, src_pitch, row_bytes,
                                 static_cast<size_t>(rows));
#endif
#pragma omp parallel for if (static_cast <size_t>(rows) * row_bytes > kGrain * 4)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char*>(dst) + static_cast<size_t>(r) * dst_pitch,
                static_cast<const char*>(src) + static_cast<size_t>(r) * src_pitch, row_bytes);
}

void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
               int64_t n) {
  copy_row_bytes(dst, static_cast<size_t>(dst_stride) * 4, src, static_cast<size_t>(src_stride) * 4,
                 rows, static_cast<size_t>(n) * 4);
}

}  // namespace xdit::kernels
