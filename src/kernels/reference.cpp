#include "kernels/reference.h"

#include <cmath>
#include <vector>

namespace xdit::kernels::ref {

void linear(const float* x, const float* w, const float* b, int64_t m, int64_t k, int64_t n,
            float* y) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = b ? b[j] : 0.0;
      for (int64_t t = 0; t < k; ++t) acc += static_cast<double>(x[i * k + t]) * w[j * k + t];
      y[i * n + j] = static_cast<float>(acc);
    }
}

void layer_norm(const float* x, float* y, int64_t rows, int64_t dim, float eps, const float* gamma,
                const float* beta) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < dim; ++i) mean += xr[i];
    mean /= dim;
    for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= dim;
    for (int64_t i = 0; i < dim; ++i) {
      double v = (xr[i] - mean) / std::sqrt(var + eps);
      if (gamma) v *= gamma[i];
      if (beta) v += beta[i];
      y[r * dim + i] = static_cast<float>(v);
    }
  }
}

void rms_norm(const float* x, float* y, int64_t rows, int64_t dim, float eps, const float* weight) {
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0;
    for (int64_t i = 0; i < dim; ++i) sq += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(sq / dim + eps);
    for (int64_t i = 0; i < dim; ++i)
      y[r * dim + i] = static_cast<float>(weight[i] * x[r * dim + i] * inv);
  }
}

float gelu_tanh(float x) {
  const double v = x;
  return static_cast<float>(0.5 * v *
                            (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))));
}

float gelu_erf(float x) {
  const double v = x;
  return static_cast<float>(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
}

float quick_gelu(float x) {
  return static_cast<float>(x / (1.0 + std::exp(-1.702 * static_cast<double>(x))));
}

float silu(float x) {
  return static_cast<float>(x / (1.0 + std::exp(-static_cast<double>(x))));
}

void softmax_rows(float* x, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* p = x + r * cols;
    double m = -INFINITY, s = 0;
    for (int64_t i = 0; i < cols; ++i) m = std::max<double>(m, p[i]);
    for (int64_t i = 0; i < cols; ++i) s += std::exp(p[i] - m);
    for (int64_t i = 0; i < cols; ++i) p[i] = static_cast<float>(std::exp(p[i] - m) / s);
  }
}

void attention(const AttentionArgs& a) {
  const int64_t D = a.head_dim;
  std::vector<double> sc(static_cast<size_t>(a.kv_len));
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.heads; ++h)
      for (int64_t i = 0; i < a.q_len; ++i) {
        const float* q = a.q + (b * a.q_len + i) * a.q_stride + h * D;
        double m = -INFINITY;
        for (int64_t j = 0; j < a.kv_len; ++j) {
          const float* k = a.k + (b * a.kv_len + j) * a.k_stride + h * D;
          double s = 0;
          for (int64_t t = 0; t < D; ++t) s += static_cast<double>(q[t]) * k[t];
          s *= a.scale;
          if (a.bias) s += a.bias[(h * a.q_len + i) * a.kv_len + j];
          // diffusers' mask: an additive bias of −10000 on padded keys.
          if (a.key_mask && a.key_mask[b * a.kv_len + j] == 0) s += -10000.0;
          sc[static_cast<size_t>(j)] = s;
          m = std::max(m, s);
        }
        double sum = 0;
        for (auto& s : sc) sum += (s = std::exp(s - m));
        float* o = a.out + (b * a.q_len + i) * a.out_stride + h * D;
        for (int64_t t = 0; t < D; ++t) {
          double acc = 0;
          for (int64_t j = 0; j < a.kv_len; ++j)
            acc += sc[static_cast<size_t>(j)] * a.v[(b * a.kv_len + j) * a.v_stride + h * D + t];
          o[t] = static_cast<float>(acc / sum);
        }
        if (a.lse) a.lse[(b * a.heads + h) * a.q_len + i] = static_cast<float>(m + std::log(sum));
      }
}

void patch_conv(const float* latent, const float* w, const float* bias, int64_t batch, int64_t c,
                int64_t h, int64_t wd, int64_t p, int64_t d, float* out) {
  const int64_t gh = h / p, gw = wd / p;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < gh; ++r)
      for (int64_t q = 0; q < gw; ++q)
        for (int64_t o = 0; o < d; ++o) {
          double acc = bias ? bias[o] : 0.0;
          for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t i = 0; i < p; ++i)
              for (int64_t j = 0; j < p; ++j)
                acc += static_cast<double>(w[((o * c + ch) * p + i) * p + j]) *
                       latent[((b * c + ch) * h + r * p + i) * wd + q * p + j];
          out[((b * gh + r) * gw + q) * d + o] = static_cast<float>(acc);
        }
}

void conv2d_nhwc(const float* x, const float* w, const float* bias, int64_t batch, int64_t h,
                 int64_t wd, int64_t in, int64_t out, int64_t k, int64_t pad, float* y) {
  const int64_t oh = h + 2 * pad - k + 1, ow = wd + 2 * pad - k + 1;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < oh; ++r)
      for (int64_t c = 0; c < ow; ++c)
        for (int64_t o = 0; o < out; ++o) {
          double acc = bias ? bias[o] : 0.0;
          for (int64_t i = 0; i < k; ++i)
            for (int64_t j = 0; j < k; ++j) {
              const int64_t rr = r + i - pad, cc = c + j - pad;
              if (rr < 0 || rr >= h || cc < 0 || cc >= wd) continue;
              for (int64_t ch = 0; ch < in; ++ch)
                acc += static_cast<double>(w[((o * in + ch) * k + i) * k + j]) *
                       x[((b * h + rr) * wd + cc) * in + ch];
            }
          y[((b * oh + r) * ow + c) * out + o] = static_cast<float>(acc);
        }
}

void group_norm_nhwc(const float* x, float* y, int64_t batch, int64_t hw, int64_t channels,
                     int64_t groups, float eps, const float* gamma, const float* beta, bool silu) {
  const int64_t cg = channels / groups;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t g = 0; g < groups; ++g) {
      double m = 0, v = 0;
      for (int64_t p = 0; p < hw; ++p)
        for (int64_t c = g * cg; c < (g + 1) * cg; ++c) m += x[(b * hw + p) * channels + c];
      m /= static_cast<double>(hw * cg);
      for (int64_t p = 0; p < hw; ++p)
        for (int64_t c = g * cg; c < (g + 1) * cg; ++c) {
          const double d = x[(b * hw + p) * channels + c] - m;
          v += d * d;
        }
      v /= static_cast<double>(hw * cg);
      for (int64_t p = 0; p < hw; ++p)
        for (int64_t c = g * cg; c < (g + 1) * cg; ++c) {
          double r = (x[(b * hw + p) * channels + c] - m) / std::sqrt(v + eps) * gamma[c] + beta[c];
          if (silu) r = r / (1.0 + std::exp(-r));
          y[(b * hw + p) * channels + c] = static_cast<float>(r);
        }
    }
}

void timestep_embedding(const float* t, int64_t n, int64_t dim, bool flip, float shift,
                        float* out) {
  const int64_t half = dim / 2;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < half; ++i) {
      const double f = std::exp(-std::log(10000.0) * i / (half - shift));
      const double a = t[r] * f;
      out[r * dim + (flip ? half + i : i)] = static_cast<float>(std::sin(a));
      out[r * dim + (flip ? i : half + i)] = static_cast<float>(std::cos(a));
    }
}

void sincos_pos_embed_2d(int64_t dim, int64_t gh, int64_t gw, float base_size, float interp,
                         float* out) {
  const int64_t q = dim / 4;
  for (int64_t r = 0; r < gh; ++r)
    for (int64_t c = 0; c < gw; ++c)
      for (int64_t i = 0; i < q; ++i) {
        const double omega = std::pow(10000.0, -static_cast<double>(i) / q);
        const double pw = c / (static_cast<double>(gw) / base_size) / interp;
        const double ph = r / (static_cast<double>(gh) / base_size) / interp;
        float* o = out + (r * gw + c) * dim;
        o[i] = static_cast<float>(std::sin(pw * omega));
        o[q + i] = static_cast<float>(std::cos(pw * omega));
        o[2 * q + i] = static_cast<float>(std::sin(ph * omega));
        o[3 * q + i] = static_cast<float>(std::cos(ph * omega));
      }
}

}  // namespace xdit::kernels::ref
