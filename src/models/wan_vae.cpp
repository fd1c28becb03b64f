#include "models/wan_vae.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/error.h"
#include "kernels/kernels.h"
#include "nn/layers.h"

namespace xdit::models {

using io::WeightSource;

// A causal convolution over time (WanCausalConv3d): kernel t = 3 taps over
// the frame and the two before it (its history: the last two input frames,
// zeros before the first), or 1. A 3-tap kernel is one 2-D convolution over
// the three frames' channels stacked oldest first: W'[o, k·in + i] = W[o, i, k].
struct WanVaeDecoder::Causal {
  kernels::Conv2d conv;
  int64_t in = 0, taps = 1;
  std::vector<Tensor> history;  // at most the last 2 input frames
  Tensor stacked;               // the frames' channels stacked, reused while the size holds

  Causal(const WeightSource& w, const std::string& p, int64_t in_ch, int64_t out, int64_t kt,
         int64_t ks, nn::ComputeType ct)
      : in(in_ch), taps(kt) {
    Tensor wt = w.get(p + ".weight", {out, in_ch, kt, ks, ks}).to(DType::kF32);
    Tensor stacked = Tensor::empty({out, kt * in_ch, ks, ks});
    const float* src = wt.data<float>();
    float* dst = stacked.data<float>();
    const int64_t area = ks * ks;
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in_ch; ++i)
        for (int64_t k = 0; k < kt; ++k)
          std::copy_n(src + ((o * in_ch + i) * kt + k) * area, area,
                      dst + ((o * kt + k) * in_ch + i) * area);
    conv = kernels::Conv2d(stacked, w.get(p + ".bias", {out}), ks / 2, ct);
  }
  // One frame x [B, h, w, in] → [B, h, w, out]; on `dec`'s band (with halo
  // rows) when it decodes one.
  Tensor forward(const Tensor& x, WanVaeDecoder& dec) {
    const int64_t B = x.dim(0), h = x.dim(1), wd = x.dim(2), px = B * h * wd;
    const auto past = static_cast<int64_t>(history.size());
    Tensor y;
    if (dec.bands_ != nullptr && conv.halo() > 0) {
      std::vector<const Tensor*> parts;
      for (int64_t k = 0; k < taps; ++k) {
        const int64_t back = taps - 1 - k;  // frames before x; null: before the video
        parts.push_back(back == 0 ? &x : back <= past ? &history[past - back] : nullptr);
      }
      y = dec.banded_conv(conv, parts, in);
    } else {
      y = Tensor::empty({B, h, wd, conv.out_channels()}, DType::kF32, current_device());
      if (taps == 1) {
        conv.forward(x.data<float>(), B, h, wd, y.data<float>());
        return y;
      }
      const Shape shape{B, h, wd, taps * in};
      if (stacked.shape() != shape || stacked.device() != current_device())
        stacked = Tensor::empty(shape, DType::kF32, current_device());
      // Zeros stand for the frames before the video (only the first two frames lack some).
      if (past < taps - 1) kernels::zero_bytes(stacked.raw(), stacked.nbytes());
      for (int64_t k = 0; k < taps; ++k) {
        const int64_t back = taps - 1 - k;  // frames before x
        const Tensor* f = back == 0 ? &x : back <= past ? &history[past - back] : nullptr;
        if (f != nullptr)
          kernels::copy_rows(stacked.data<float>() + k * in, taps * in, f->data<float>(), in, px,
                             in);
      }
      conv.forward(stacked.data<float>(), B, h, wd, y.data<float>());
    }
    if (taps > 1) {
      history.push_back(x.clone());
      if (history.size() > 2) history.erase(history.begin());
    }
    return y;
  }
};

struct WanVaeDecoder::Resnet {
  Tensor g1, g2;
  std::unique_ptr<Causal> c1, c2, shortcut;
};

struct WanVaeDecoder::Up {
  std::vector<std::unique_ptr<Resnet>> resnets;
  WanVaeConfig::UpMode mode = WanVaeConfig::UpMode::kNone;
  bool shortcut = false;  // Wan2.2: DupUp3D of the block's input added to its output
  kernels::Conv2d resample;
  std::unique_ptr<Causal> time_conv;
};

namespace {

// WanRMS_norm: F.normalize over the channels · √C · γ (no bias), then SiLU
// when `silu`: rms_norm with an ε far below any non-zero pixel's mean square.
Tensor rms(const Tensor& x, const Tensor& gamma, bool silu) {
  const int64_t C = x.dim(3), rows = x.numel() / C;
  Tensor y = Tensor::empty(x.shape(), DType::kF32, current_device());
  kernels::rms_norm(x.data<float>(), y.data<float>(), rows, C, 1e-24f / static_cast<float>(C),
                    gamma.data<float>());
  if (silu) kernels::silu(y.data<float>(), y.data<float>(), y.numel());
  return y;
}

// DupUp3D, Wan2.2's up-block shortcut, added to y: input frame x [B, h, w,
// in] spreads into `ft` frames [B, 2h, 2w, out] (ft = 2 where the block
// doubles time); copy a's channel o at pixel (2r + i, 2c + j) is x's channel
// (o·S + 4a + 2i + j) / (out·S / in) at (r, c), S = 4·ft. (A reshape in
// diffusers: repeat_interleave over the channels, then the copies' axes
// moved beside time and the two pixel axes.)
void add_dup_up(const Tensor& x, int64_t a, int64_t ft, Tensor& y) {
  const int64_t B = x.dim(0), h = x.dim(1), w = x.dim(2), in = x.dim(3), out = y.dim(3);
  const int64_t S = 4 * ft, repeats = out * S / in;
  const float* xs = x.data<float>();
  float* ys = y.data<float>();
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < 2 * h; ++r)
      for (int64_t c = 0; c < 2 * w; ++c) {
        const float* src = xs + ((b * h + r / 2) * w + c / 2) * in;
        float* dst = ys + ((b * 2 * h + r) * 2 * w + c) * out;
        const int64_t offset = 4 * a + 2 * (r % 2) + c % 2;
        for (int64_t o = 0; o < out; ++o) dst[o] += src[(o * S + offset) / repeats];
      }
}

}  // namespace

WanVaeDecoder::WanVaeDecoder(const WanVaeConfig& cfg, const WeightSource& w, DType compute)
    : cfg_(cfg), ct_(kernels::resolve_compute_type(compute)) {
  const nn::LoadStaging staging;
  const auto d = cfg.level_dims();
  const auto causal = [&](const std::string& p, int64_t in, int64_t out, int64_t kt, int64_t ks) {
    auto k = std::make_unique<Causal>(w, p, in, out, kt, ks, ct_);
    causals_.push_back(k.get());
    return k;
  };
  const auto resnet = [&](const std::string& p, int64_t in, int64_t out) {
    auto r = std::make_unique<Resnet>();
    r->g1 = nn::load_param(w, p + ".norm1.gamma", {in, 1, 1, 1}).reshape({in});
    r->c1 = causal(p + ".conv1", in, out, 3, 3);
    r->g2 = nn::load_param(w, p + ".norm2.gamma", {out, 1, 1, 1}).reshape({out});
    r->c2 = causal(p + ".conv2", out, out, 3, 3);
    if (in != out) r->shortcut = causal(p + ".conv_shortcut", in, out, 1, 1);
    return r;
  };
  const auto conv2d = [&](const std::string& p, int64_t in, int64_t out, int64_t k) {
    return kernels::Conv2d(w.get(p + ".weight", {out, in, k, k}), w.get(p + ".bias", {out}), k / 2,
                           ct_);
  };
  post_quant_ = kernels::Conv2d(w.get("post_quant_conv.weight", {cfg.z_dim, cfg.z_dim, 1, 1, 1})
                                    .reshape({cfg.z_dim, cfg.z_dim, 1, 1}),
                                w.get("post_quant_conv.bias", {cfg.z_dim}), 0, ct_);
  conv_in_ = causal("decoder.conv_in", cfg.z_dim, d[0], 3, 3);
  const std::string mid = "decoder.mid_block.";
  mid_.push_back(resnet(mid + "resnets.0", d[0], d[0]));
  attn_gamma_ = nn::load_param(w, mid + "attentions.0.norm.gamma", {d[0], 1, 1}).reshape({d[0]});
  attn_qkv_ = conv2d(mid + "attentions.0.to_qkv", d[0], 3 * d[0], 1);
  attn_proj_ = conv2d(mid + "attentions.0.proj", d[0], d[0], 1);
  mid_.push_back(resnet(mid + "resnets.1", d[0], d[0]));
  for (size_t i = 0; i + 1 < d.size(); ++i) {
    const std::string p = "decoder.up_blocks." + std::to_string(i);
    auto [in, mode] = cfg.up_block(i);
    const int64_t out = d[i + 1];
    auto u = std::make_unique<Up>();
    for (int64_t r = 0; r <= cfg.num_res_blocks; ++r, in = out)
      u->resnets.push_back(resnet(p + ".resnets." + std::to_string(r), in, out));
    u->mode = mode;
    u->shortcut = cfg.residual && mode != WanVaeConfig::UpMode::kNone;
    const std::string up = p + (cfg.residual ? ".upsampler" : ".upsamplers.0");
    if (mode != WanVaeConfig::UpMode::kNone)
      u->resample = conv2d(up + ".resample.1", out, cfg.residual ? out : out / 2, 3);
    if (mode == WanVaeConfig::UpMode::k3d)
      u->time_conv = causal(up + ".time_conv", out, 2 * out, 3, 1);
    up_.push_back(std::move(u));
  }
  norm_out_ = nn::load_param(w, "decoder.norm_out.gamma", {d.back(), 1, 1, 1}).reshape({d.back()});
  conv_out_ = causal("decoder.conv_out", d.back(), cfg.out_channels, 3, 3);
}

WanVaeDecoder::~WanVaeDecoder() = default;

void WanVaeDecoder::resnet(Resnet& r, Frames& x) {
  for (Tensor& f : x) {
    const Tensor h = r.shortcut ? r.shortcut->forward(f, *this) : f;
    Tensor a = r.c1->forward(rms(f, r.g1, true), *this);
    a = r.c2->forward(rms(a, r.g2, true), *this);
    kernels::gated_residual_add(a.data<float>(), h.data<float>(), 1, 1, a.numel(), nullptr, 0);
    f = a;
  }
}

void WanVaeDecoder::attention(Frames& x) {
  for (Tensor& f : x) {
    const int64_t B = f.dim(0), h = f.dim(1), w = f.dim(2), C = f.dim(3), N = h * w;
    const Tensor n = rms(f, attn_gamma_, false);
    Tensor qkv = Tensor::empty({B, h, w, 3 * C}, DType::kF32, current_device());
    attn_qkv_.forward(n.data<float>(), B, h, w, qkv.data<float>());
    Tensor o = Tensor::empty({B, h, w, C}, DType::kF32, current_device());
    kernels::AttentionArgs a;
    a.q = qkv.data<float>();
    a.k = a.q + C;
    a.v = a.q + 2 * C;
    a.q_stride = a.k_stride = a.v_stride = 3 * C;
    a.out = o.data<float>();
    a.out_stride = C;
    a.batch = B;
    a.heads = 1;
    a.q_len = a.kv_len = N;
    a.head_dim = C;
    a.scale = 1.0f / std::sqrt(static_cast<float>(C));
    if (bands_ != nullptr) {  // over every band's tokens of this frame
      nn::AttentionBackend& attn = bands_->attention();
      std::vector<int64_t> tokens;
      for (const int64_t r : bands_->rows()) tokens.push_back(r * w);
      attn.set_sequence_split(tokens);
      attn.attend(a, nn::AttentionSite{});
      attn.release_buffers();
    } else {
      kernels::attention(a);
    }
    Tensor y = Tensor::empty({B, h, w, C}, DType::kF32, current_device());
    attn_proj_.forward(o.data<float>(), B, h, w, y.data<float>());
    kernels::gated_residual_add(y.data<float>(), f.data<float>(), 1, 1, y.numel(), nullptr, 0);
    f = y;
  }
}

WanVaeDecoder::Frames WanVaeDecoder::up_block(Up& u, Frames x, bool first_chunk) {
  Frames input;
  if (u.shortcut)
    for (const Tensor& f : x) input.push_back(f.clone());
  for (auto& r : u.resnets) resnet(*r, x);
  if (u.mode == WanVaeConfig::UpMode::kNone) return x;
  if (u.mode == WanVaeConfig::UpMode::k3d && !first_chunk) {  // each frame → two (channel halves)
    Frames doubled;
    for (const Tensor& f : x) {
      const Tensor t = u.time_conv->forward(f, *this);
      const int64_t B = f.dim(0), h = f.dim(1), w = f.dim(2), C = f.dim(3);
      for (int half = 0; half < 2; ++half) {
        Tensor g = Tensor::empty({B, h, w, C}, DType::kF32, current_device());
        kernels::copy_rows(g.data<float>(), C, t.data<float>() + half * C, 2 * C, B * h * w, C);
        doubled.push_back(g);
      }
    }
    x = std::move(doubled);
  }
  for (Tensor& f : x) {
    const int64_t B = f.dim(0), h = f.dim(1), w = f.dim(2), C = f.dim(3);
    Tensor up = Tensor::empty({B, 2 * h, 2 * w, C}, DType::kF32, current_device());
    kernels::upsample_nearest2x_nhwc(f.data<float>(), up.data<float>(), B, h, w, C);
    if (bands_ != nullptr) {
      f = banded_conv(u.resample, {&up}, C);
      continue;
    }
    Tensor y =
        Tensor::empty({B, 2 * h, 2 * w, u.resample.out_channels()}, DType::kF32, current_device());
    u.resample.forward(up.data<float>(), B, 2 * h, 2 * w, y.data<float>());
    f = y;
  }
  if (u.shortcut) {
    // Each input frame's ft copies in order; the first chunk keeps only the
    // last (its time was not upsampled).
    const int64_t ft = u.mode == WanVaeConfig::UpMode::k3d ? 2 : 1, skip = first_chunk ? ft - 1 : 0;
    XDIT_CHECK(static_cast<int64_t>(input.size()) * ft - skip == static_cast<int64_t>(x.size()),
               "Wan VAE: an up block's shortcut gives ", input.size() * ft - skip,
               " frames for its ", x.size());
    int64_t k = 0;
    for (const Tensor& f : input)
      for (int64_t a = 0; a < ft; ++a, ++k)
        if (k >= skip) add_dup_up(f, a, ft, x[static_cast<size_t>(k - skip)]);
  }
  return x;
}

Tensor WanVaeDecoder::unpatchify(const Tensor& planar) const {
  const int64_t p = cfg_.patch;
  if (p == 1) return planar;
  // out[b, c, y·p + r, x·p + q] = in[b, c·p² + q·p + r, y, x] (diffusers'
  // unpatchify: the channel's patch offsets are (column, row)).
  const int64_t B = planar.dim(0), C = planar.dim(1) / (p * p), h = planar.dim(2),
                w = planar.dim(3);
  Tensor out = Tensor::empty({B, C, h * p, w * p});
  const float* src = planar.data<float>();
  float* dst = out.data<float>();
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < h * p; ++y)
        for (int64_t x = 0; x < w * p; ++x)
          dst[((b * C + c) * h * p + y) * w * p + x] =
              src[((b * C * p * p + c * p * p + (x % p) * p + y % p) * h + y / p) * w + x / p];
  return out;
}

Tensor WanVaeDecoder::banded_conv(const kernels::Conv2d& conv,
                                  const std::vector<const Tensor*>& parts, int64_t in) {
  const Tensor* any = nullptr;
  for (const Tensor* p : parts) any = any != nullptr ? any : p;
  const int64_t B = any->dim(0), h = any->dim(1), w = any->dim(2), halo = conv.halo();
  const int64_t C = static_cast<int64_t>(parts.size()) * in, item = (h + 2 * halo) * w * C;
  const int64_t n = B * item;
  if (halo_f32_.numel() < n) halo_f32_ = Tensor::empty({n}, DType::kF32, current_device());
  float* buf = halo_f32_.data<float>();
  bool gaps = false;
  for (const Tensor* p : parts) gaps = gaps || p == nullptr;
  if (gaps) kernels::zero_bytes(buf, static_cast<size_t>(n) * 4);  // frames before the video
  for (int64_t b = 0; b < B; ++b)
    for (size_t k = 0; k < parts.size(); ++k)
      if (parts[k] != nullptr)
        kernels::copy_rows(buf + b * item + halo * w * C + static_cast<int64_t>(k) * in, C,
                           parts[k]->data<float>() + b * h * w * in, in, h * w, in);
  void* x = buf;
  size_t row_bytes = static_cast<size_t>(w * C) * 4;
  if (conv.is_bf16()) {  // the halo rows travel in the layer's input type
    if (halo_bf16_.numel() * 2 < n) halo_bf16_ = Tensor::empty({(n + 1) / 2}, DType::kF32);
    auto* b16 = reinterpret_cast<uint16_t*>(halo_bf16_.data<float>());
    kernels::to_bf16_array(buf, b16, n);
    x = b16;
    row_bytes /= 2;
  }
  bands_->exchange_halos(x, B, h, halo, row_bytes);
  Tensor y = Tensor::empty({B, h, w, conv.out_channels()}, DType::kF32, current_device());
  conv.forward_halo(x, B, h, w, y.data<float>());
  return y;
}

Tensor WanVaeDecoder::decode(const Tensor& z_in, nn::RowBands* bands) {
  const WanVaeConfig& c = cfg_;
  XDIT_CHECK(z_in.ndim() == 5 && z_in.dim(1) == c.z_dim, "the Wan VAE decodes latents [B, ",
             c.z_dim, ", F, h, w], got ", shape_str(z_in.shape()));
  XDIT_CHECK(z_in.dim(0) >= 1 && z_in.dim(2) >= 1 && z_in.dim(3) >= 1 && z_in.dim(4) >= 1,
             "the Wan VAE decodes at least one latent frame of at least 1x1, got ",
             shape_str(z_in.shape()));
  const Tensor z = z_in.as(DType::kF32, current_device());
  // s: conv_out's pixels per latent pixel; each is patch × patch video pixels.
  const int64_t B = z.dim(0), F = z.dim(2), h = z.dim(3), w = z.dim(4),
                s = c.spatial_factor() / c.patch;
  const int64_t T = c.frames(F), H = h * c.spatial_factor(), W = w * c.spatial_factor(),
                oc = c.out_channels, vc = c.video_channels();
  // This rank's latent rows [r0, r1) of every frame (all of them without bands).
  int64_t r0 = 0, r1 = h;
  if (bands != nullptr) {
    XDIT_CHECK(bands->total_rows() == h, "Wan VAE bands cover ", bands->total_rows(),
               " latent rows, the latents have ", h);
    std::tie(r0, r1) = bands->my_rows();
  }
  const int64_t rows = r1 - r0;
  struct Unset {  // the bands belong to this call
    nn::RowBands*& b;
    ~Unset() { b = nullptr; }
  } unset{bands_};
  bands_ = bands;
  for (Causal* k : causals_) k->history.clear();  // a fresh cache: zeros before the video
  Tensor out = Tensor::empty({B, vc, T, H, W}, DType::kF32, current_device());
  int64_t t_out = 0;
  for (int64_t t = 0; t < F; ++t) {
    // Latent frame t's rows [r0, r1) as NHWC [B, rows, w, z_dim], through
    // post_quant_conv. ([B, C, F, h, w] viewed as [B, C, F·h, w].)
    Tensor frame = Tensor::empty({B, rows, w, c.z_dim}, DType::kF32, current_device());
    kernels::nchw_rows_to_nhwc(z.data<float>(), B, c.z_dim, F * h, w, t * h + r0, rows,
                               frame.data<float>());
    Tensor pq = Tensor::empty({B, rows, w, c.z_dim}, DType::kF32, current_device());
    post_quant_.forward(frame.data<float>(), B, rows, w, pq.data<float>());
    Frames x{conv_in_->forward(pq, *this)};
    resnet(*mid_[0], x);
    attention(x);
    resnet(*mid_[1], x);
    for (auto& u : up_) x = up_block(*u, std::move(x), t == 0);
    for (Tensor& f : x) {
      const Tensor y = conv_out_->forward(rms(f, norm_out_, true), *this);
      Tensor planar = Tensor::empty({B, oc, rows * s, w * s}, DType::kF32, current_device());
      kernels::nhwc_to_nchw(y.data<float>(), B, rows * s * w * s, oc, planar.data<float>());
      if (bands != nullptr)
        planar = bands->gather(planar.to_device(Device{}));  // [B, oc, h·s, w·s]
      planar = unpatchify(planar);                           // [B, vc, H, W]
      kernels::copy_rows(out.data<float>() + t_out * H * W, T * H * W, planar.data<float>(), H * W,
                         B * vc, H * W);
      ++t_out;
    }
  }
  XDIT_CHECK(t_out == T, "the Wan VAE decoded ", t_out, " frames, expected ", T);
  Tensor video = out.to_device(Device{});  // clamped to [−1, 1] on the host
  float* v = video.data<float>();
  const int64_t n = video.numel();
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) v[i] = std::clamp(v[i], -1.0f, 1.0f);
  return video;
}

Tensor WanVaeDecoder::decode_latents(const Tensor& latents, nn::RowBands* bands) {
  const WanVaeConfig& c = cfg_;
  XDIT_CHECK(latents.ndim() == 5 && latents.dim(1) == c.z_dim, "Wan latents must be [B, ", c.z_dim,
             ", F, h, w], got ", shape_str(latents.shape()));
  // WanPipeline: latents / (1 / latents_std) + latents_mean per channel, in f32.
  Tensor z = latents.as(DType::kF32, current_device()).clone();
  const int64_t B = z.dim(0), per = z.numel() / (B * c.z_dim);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t ch = 0; ch < c.z_dim; ++ch) {
      float* p = z.data<float>() + (b * c.z_dim + ch) * per;
      kernels::affine_div(p, p, per, 1.0f / static_cast<float>(c.latents_std[size_t(ch)]),
                          static_cast<float>(c.latents_mean[size_t(ch)]));
    }
  return decode(z, bands);
}

}  // namespace xdit::models
