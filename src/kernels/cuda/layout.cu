// The data movement of the CUDA op set (ops.h): nearest 2× upsampling,
// patchify and its inverse, attention's K/V packing, FLUX's 2×2 packing and
// NCHW ↔ NHWC.
#include <cuda_runtime.h>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/ops.h"

namespace xdit::kernels::cuda {

namespace {

template <class Out>
__global__ void upsample2x_kernel(const float* __restrict__ x, Out* __restrict__ y, int64_t h,
                                  int64_t w, int64_t channels, int64_t y_batch_stride,
                                  int64_t total) {
  XDIT_GRID_LOOP(i, total) {  // over the output's B · 2h · 2w · C values
    const int64_t ch = i % channels, q = (i / channels) % (2 * w);
    const int64_t r = (i / (channels * 2 * w)) % (2 * h), b = i / (channels * 4 * w * h);
    store(y + b * y_batch_stride + (r * 2 * w + q) * channels + ch,
          x[((b * h + r / 2) * w + q / 2) * channels + ch]);
  }
}

// cols [B·gh·gw, C·p·p] in (c, i, j) order from latent [B, C, H, W].
__global__ void patchify_kernel(const float* __restrict__ latent, int64_t channels, int64_t height,
                                int64_t width, int64_t p, float* __restrict__ cols, int64_t total) {
  const int64_t gh = height / p, gw = width / p, k = channels * p * p;
  XDIT_GRID_LOOP(o, total) {
    const int64_t e = o % k, tok = o / k;
    const int64_t ch = e / (p * p), i = (e / p) % p, j = e % p;
    const int64_t c = tok % gw, r = (tok / gw) % gh, b = tok / (gw * gh);
    cols[o] = latent[((b * channels + ch) * height + r * p + i) * width + c * p + j];
  }
}

// out [B, C, h·p, w·p] from x [B, h·w, p·p·C] in (p, q, c) order.
__global__ void unpatchify_kernel(const float* __restrict__ x, int64_t channels, int64_t h,
                                  int64_t w, int64_t p, float* __restrict__ out, int64_t total) {
  const int64_t H = h * p, W = w * p;
  XDIT_GRID_LOOP(o, total) {
    const int64_t xx = o % W, yy = (o / W) % H, ch = (o / (W * H)) % channels,
                  b = o / (W * H * channels);
    const int64_t r = yy / p, i = yy % p, c = xx / p, j = xx % p;
    out[o] = x[((b * h + r) * w + c) * (p * p * channels) + (i * p + j) * channels + ch];
  }
}

// Token-major rows (`stride` apart, batch items `batch_stride` apart) into a
// head-major [B, H, total, D] buffer at token t0. In: f32 or bf16; out: the
// compute type.
template <class In, class Out>
__global__ void pack_kv_kernel(const In* __restrict__ src, int64_t stride, int64_t batch_stride,
                               int64_t heads, int64_t n, int64_t d, Out* __restrict__ dst,
                               int64_t total_tokens, int64_t t0, int64_t count) {
  XDIT_GRID_LOOP(i, count) {  // over B · H · n · D
    const int64_t e = i % d, tok = (i / d) % n, h = (i / (d * n)) % heads, b = i / (d * n * heads);
    store(dst + ((b * heads + h) * total_tokens + t0 + tok) * d + e,
          to_float(src[b * batch_stride + tok * stride + h * d + e]));
  }
}

template <class In>
__global__ void unpack_kv_kernel(const In* __restrict__ src, int64_t heads, int64_t total_tokens,
                                 int64_t d, float* __restrict__ dst, int64_t count) {
  XDIT_GRID_LOOP(i, count) {  // over B · total · H · D, dst token-major
    const int64_t e = i % d, h = (i / d) % heads, tok = (i / (d * heads)) % total_tokens,
                  b = i / (d * heads * total_tokens);
    dst[i] = to_float(src[((b * heads + h) * total_tokens + tok) * d + e]);
  }
}

// FLUX's 2×2 packing, one thread per value (see kernels.h).
__global__ void pack_2x2_kernel(const float* __restrict__ src, float* __restrict__ dst, int64_t C,
                                int64_t H, int64_t W, int64_t r0, int64_t r1, bool pack,
                                int64_t total) {
  const int64_t gw = W / 2, n = (r1 - r0) * gw, rows = 2 * (r1 - r0);
  const int64_t plain_h = pack ? H : rows, plain_y0 = pack ? 2 * r0 : 0;
  XDIT_GRID_LOOP(i, total) {  // over B · C · rows · W
    const int64_t x = i % W, y = (i / W) % rows, ch = (i / (W * rows)) % C, b = i / (W * rows * C);
    const int64_t plain = ((b * C + ch) * plain_h + plain_y0 + y) * W + x;
    const int64_t packed = (b * n + (y / 2) * gw + x / 2) * 4 * C + ch * 4 + (y % 2) * 2 + x % 2;
    dst[pack ? packed : plain] = src[pack ? plain : packed];
  }
}

__global__ void nchw_rows_to_nhwc_kernel(const float* __restrict__ x, int64_t C, int64_t H,
                                         int64_t W, int64_t r0, int64_t rows, float* __restrict__ y,
                                         int64_t total) {
  XDIT_GRID_LOOP(i, total) {  // over y: B · rows · W · C
    const int64_t ch = i % C, p = (i / C) % (rows * W), b = i / (C * rows * W);
    y[i] = x[((b * C + ch) * H + r0) * W + p];
  }
}

__global__ void nhwc_to_nchw_kernel(const float* __restrict__ x, int64_t hw, int64_t C,
                                    float* __restrict__ y, int64_t total) {
  XDIT_GRID_LOOP(i, total) {  // over y: B · C · hw
    const int64_t p = i % hw, k = (i / hw) % C, b = i / (hw * C);
    y[i] = x[(b * hw + p) * C + k];
  }
}

template <class Out>
void upsample2x(const float* x, Out* y, int64_t batch, int64_t h, int64_t w, int64_t channels,
                int64_t y_batch_stride, Stream s) {
  if (y_batch_stride == 0) y_batch_stride = 4 * h * w * channels;
  const int64_t n = batch * 4 * h * w * channels;
  XDIT_LAUNCH(upsample2x_kernel<Out>, n, s, x, y, h, w, channels, y_batch_stride, n);
}

}  // namespace

void upsample_nearest2x_nhwc(const float* x, float* y, int64_t batch, int64_t h, int64_t w,
                             int64_t channels, int64_t y_batch_stride, Stream s) {
  upsample2x(x, y, batch, h, w, channels, y_batch_stride, s);
}

void upsample_nearest2x_nhwc_bf16(const float* x, uint16_t* y, int64_t batch, int64_t h, int64_t w,
                                  int64_t channels, int64_t y_batch_stride, Stream s) {
  upsample2x(x, y, batch, h, w, channels, y_batch_stride, s);
}

void patchify(const float* latent, int64_t batch, int64_t channels, int64_t height, int64_t width,
              int64_t p, float* cols, Stream s) {
  const int64_t n = batch * channels * (height / p) * p * (width / p) * p;
  XDIT_LAUNCH(patchify_kernel, n, s, latent, channels, height, width, p, cols, n);
}

void unpatchify(const float* x, int64_t batch, int64_t channels, int64_t h, int64_t w, int64_t p,
                float* out, Stream s) {
  const int64_t n = batch * channels * h * p * w * p;
  XDIT_LAUNCH(unpatchify_kernel, n, s, x, channels, h, w, p, out, n);
}

void pack_kv(const void* src, bool src_bf16, int64_t stride, int64_t batch, int64_t heads,
             int64_t n, int64_t head_dim, bool dst_bf16, void* dst, int64_t total, int64_t t,
             int64_t batch_stride, Stream s) {
  if (batch_stride == 0) batch_stride = n * stride;
  const int64_t count = batch * heads * n * head_dim;
  const auto launch = [&](const auto* in) {
    if (dst_bf16)
      XDIT_LAUNCH(pack_kv_kernel, count, s, in, stride, batch_stride, heads, n, head_dim,
                  static_cast<uint16_t*>(dst), total, t, count);
    else
      XDIT_LAUNCH(pack_kv_kernel, count, s, in, stride, batch_stride, heads, n, head_dim,
                  static_cast<float*>(dst), total, t, count);
  };
  if (src_bf16)
    launch(static_cast<const uint16_t*>(src));
  else
    launch(static_cast<const float*>(src));
}

void unpack_kv(const void* src, int64_t batch, int64_t heads, int64_t total, int64_t head_dim,
               bool bf16, float* dst, Stream s) {
  const int64_t count = batch * total * heads * head_dim;
  if (bf16)
    XDIT_LAUNCH(unpack_kv_kernel, count, s, static_cast<const uint16_t*>(src), heads, total,
                head_dim, dst, count);
  else
    XDIT_LAUNCH(unpack_kv_kernel, count, s, static_cast<const float*>(src), heads, total, head_dim,
                dst, count);
}

void pack_2x2(const float* src, float* dst, int64_t batch, int64_t channels, int64_t height,
              int64_t width, int64_t r0, int64_t r1, bool pack, Stream s) {
  const int64_t n = batch * channels * 2 * (r1 - r0) * width;
  XDIT_LAUNCH(pack_2x2_kernel, n, s, src, dst, channels, height, width, r0, r1, pack, n);
}

void nchw_rows_to_nhwc(const float* x, int64_t batch, int64_t channels, int64_t height,
                       int64_t width, int64_t r0, int64_t rows, float* y, Stream s) {
  const int64_t n = batch * rows * width * channels;
  XDIT_LAUNCH(nchw_rows_to_nhwc_kernel, n, s, x, channels, height, width, r0, rows, y, n);
}

void nhwc_to_nchw(const float* x, int64_t batch, int64_t hw, int64_t channels, float* y, Stream s) {
  const int64_t n = batch * hw * channels;
  XDIT_LAUNCH(nhwc_to_nchw_kernel, n, s, x, hw, channels, y, n);
}

}  // namespace xdit::kernels::cuda
