#include "models/vae.h"

#include <cmath>
#include <cstring>

#include "core/aligned.h"
#include "core/block_cache.h"
#include "core/error.h"
#include "kernels/kernels.h"

namespace xdit::models {

struct VaeDecoder::Resnet {
  Tensor n1w, n1b, n2w, n2b;
  kernels::Conv2d conv1, conv2, shortcut;
  bool has_shortcut = false;
  int64_t in = 0, out = 0;
};

struct VaeDecoder::UpBlock {
  std::vector<std::unique_ptr<Resnet>> resnets;
  kernels::Conv2d upsample_conv;
  bool upsample = false;
};

namespace {
kernels::Conv2d load_conv(const io::WeightSource& w, const std::string& p, int64_t in, int64_t out,
                          int64_t k, nn::ComputeType ct) {
  return kernels::Conv2d(w.get(p + ".weight", {out, in, k, k}), w.get(p + ".bias", {out}), k / 2,
                         ct);
}
}  // namespace

VaeDecoder::VaeDecoder(const VaeConfig& cfg, const io::WeightSource& w, DType compute)
    : cfg_(cfg), ct_(kernels::resolve_compute_type(compute)) {
  const int64_t lc = cfg.latent_channels, top = cfg.block_out_channels.back();
  auto make_resnet = [&](const std::string& p, int64_t in, int64_t out) {
    auto r = std::make_unique<Resnet>();
    r->in = in;
    r->out = out;
    r->n1w = nn::load_param(w, p + ".norm1.weight", {in});
    r->n1b = nn::load_param(w, p + ".norm1.bias", {in});
    r->conv1 = load_conv(w, p + ".conv1", in, out, 3, ct_);
    r->n2w = nn::load_param(w, p + ".norm2.weight", {out});
    r->n2b = nn::load_param(w, p + ".norm2.bias", {out});
    r->conv2 = load_conv(w, p + ".conv2", out, out, 3, ct_);
    r->has_shortcut = in != out;
    if (r->has_shortcut) r->shortcut = load_conv(w, p + ".conv_shortcut", in, out, 1, ct_);
    return r;
  };
  if (cfg.use_post_quant_conv) post_quant_ = load_conv(w, "post_quant_conv", lc, lc, 1, ct_);
  conv_in_ = load_conv(w, "decoder.conv_in", lc, top, 3, ct_);
  mid_resnets_.push_back(make_resnet("decoder.mid_block.resnets.0", top, top));
  has_attn_ = cfg.mid_block_add_attention;
  if (has_attn_) {
    const std::string a = "decoder.mid_block.attentions.0";
    attn_norm_w_ = nn::load_param(w, a + ".group_norm.weight", {top});
    attn_norm_b_ = nn::load_param(w, a + ".group_norm.bias", {top});
    mid_attn_ = nn::Attention(w, a, top, 1, top, 0, true, ct_);  // one head of width `top`
  }
  mid_resnets_.push_back(make_resnet("decoder.mid_block.resnets.1", top, top));
  int64_t prev = top;
  const size_t n = cfg.block_out_channels.size();
  for (size_t i = 0; i < n; ++i) {
    const int64_t out = cfg.block_out_channels[n - 1 - i];
    auto ub = std::make_unique<UpBlock>();
    const std::string p = "decoder.up_blocks." + std::to_string(i);
    for (int64_t r = 0; r <= cfg.layers_per_block; ++r)
      ub->resnets.push_back(
          make_resnet(p + ".resnets." + std::to_string(r), r == 0 ? prev : out, out));
    ub->upsample = i + 1 < n;
    if (ub->upsample) ub->upsample_conv = load_conv(w, p + ".upsamplers.0.conv", out, out, 3, ct_);
    up_.push_back(std::move(ub));
    prev = out;
  }
  norm_out_w_ = nn::load_param(w, "decoder.conv_norm_out.weight", {prev});
  norm_out_b_ = nn::load_param(w, "decoder.conv_norm_out.bias", {prev});
  conv_out_ = load_conv(w, "decoder.conv_out", prev, cfg.out_channels, 3, ct_);
}

VaeDecoder::~VaeDecoder() = default;

void VaeDecoder::resnet(const Resnet& r, Tensor& x, int64_t b, int64_t h, int64_t w) {
  const int64_t hw = h * w, G = cfg_.norm_num_groups;
  const float eps = 1e-6f;
  Tensor u = Tensor::empty({b, h, w, r.out}), t;
  Tensor buf;  // the bf16 convolution inputs, then the shortcut's output
  if (r.conv1.is_bf16() && r.conv2.is_bf16()) {
    // GroupNorm + SiLU write each convolution's bf16 input directly (half the
    // bytes, no separate conversion pass), and conv2 reuses u, which GN2 has
    // consumed: x, u and a bf16 buffer are live instead of three f32 tensors.
    // The shortcut then writes into the bf16 buffer, dead by then: where the
    // channels halve its bytes are exactly the output's (the decoder's peak).
    const int64_t px = b * hw;
    buf = Tensor::empty(
        {std::max((px * std::max(r.in, r.out) + 1) / 2, r.has_shortcut ? px * r.out : int64_t{0})});
    auto* nb = reinterpret_cast<uint16_t*>(buf.data<float>());
    kernels::group_norm_nhwc_bf16(x.data<float>(), nb, b, hw, r.in, G, eps, r.n1w.data<float>(),
                                  r.n1b.data<float>(), true);
    r.conv1.forward_bf16(nb, b, h, w, u.data<float>());
    kernels::group_norm_nhwc_bf16(u.data<float>(), nb, b, hw, r.out, G, eps, r.n2w.data<float>(),
                                  r.n2b.data<float>(), true);
    r.conv2.forward_bf16(nb, b, h, w, u.data<float>());
    t = u;
  } else {
    t = Tensor::empty({b, h, w, r.in});
    kernels::group_norm_nhwc(x.data<float>(), t.data<float>(), b, hw, r.in, G, eps,
                             r.n1w.data<float>(), r.n1b.data<float>(), true);
    r.conv1.forward(t.data<float>(), b, h, w, u.data<float>());
    kernels::group_norm_nhwc(u.data<float>(), u.data<float>(), b, hw, r.out, G, eps,
                             r.n2w.data<float>(), r.n2b.data<float>(), true);
    if (r.out != r.in) t = Tensor::empty({b, h, w, r.out});
    r.conv2.forward(u.data<float>(), b, h, w, t.data<float>());
  }
  if (r.has_shortcut) {  // into the dead bf16 buffer, or u where conv2 left it free
    Tensor s = buf.defined() ? buf.leading({b, h, w, r.out}) : u;
    r.shortcut.forward(x.data<float>(), b, h, w, s.data<float>());
    x = s;
  }
  kernels::gated_residual_add(x.data<float>(), t.data<float>(), 1, 1, b * hw * r.out, nullptr, 0);
}

Tensor VaeDecoder::decode_latents(const Tensor& latents) {
  Tensor z = latents.clone();
  const auto scale = static_cast<float>(cfg_.scaling_factor);
  const auto shift = static_cast<float>(cfg_.shift_factor);
  float* v = z.data<float>();
  for (int64_t i = 0; i < z.numel(); ++i) v[i] = v[i] / scale + shift;
  return decode(z);
}

Tensor VaeDecoder::decode(const Tensor& z_nchw) {
  const VaeConfig& c = cfg_;
  XDIT_CHECK(z_nchw.ndim() == 4 && z_nchw.dim(1) == c.latent_channels, "VAE decode expects [B, ",
             c.latent_channels, ", h, w] latents, got ", shape_str(z_nchw.shape()));
  const int64_t B = z_nchw.dim(0), lc = c.latent_channels;
  int64_t h = z_nchw.dim(2), w = z_nchw.dim(3);
  Tensor z = Tensor::empty({B, h, w, lc});
  const float* src = z_nchw.data<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t ch = 0; ch < lc; ++ch)
      for (int64_t p = 0; p < h * w; ++p)
        z.data<float>()[(b * h * w + p) * lc + ch] = src[(b * lc + ch) * h * w + p];
  if (c.use_post_quant_conv) {
    Tensor t = Tensor::empty({B, h, w, lc});
    post_quant_.forward(z.data<float>(), B, h, w, t.data<float>());
    z = t;
  }
  const int64_t top = c.block_out_channels.back();
  Tensor x = Tensor::empty({B, h, w, top});
  conv_in_.forward(z.data<float>(), B, h, w, x.data<float>());

  resnet(*mid_resnets_[0], x, B, h, w);
  if (has_attn_) {
    const int64_t hw = h * w;
    Tensor n = Tensor::empty({B, h, w, top}), o = Tensor::empty({B, h, w, top});
    kernels::group_norm_nhwc(x.data<float>(), n.data<float>(), B, hw, top, c.norm_num_groups, 1e-6f,
                             attn_norm_w_.data<float>(), attn_norm_b_.data<float>(), false);
    mid_attn_.forward(n.data<float>(), B, hw, nullptr, 0, nullptr, o.data<float>(),
                      nn::serial_attention(), {0, false}, attn_scratch_);
    kernels::gated_residual_add(x.data<float>(), o.data<float>(), 1, 1, B * hw * top, nullptr, 0);
  }
  resnet(*mid_resnets_[1], x, B, h, w);

  for (const auto& ub : up_) {
    for (const auto& r : ub->resnets) resnet(*r, x, B, h, w);
    if (ub->upsample) {
      const int64_t ch = ub->resnets.back()->out;
      Tensor up = Tensor::empty({B, 2 * h, 2 * w, ch});
      kernels::upsample_nearest2x_nhwc(x.data<float>(), up.data<float>(), B, h, w, ch);
      h *= 2;
      w *= 2;
      // No buffer of the smaller size is needed again: return them (and x)
      // to the system rather than keep them (core/block_cache.h) through the
      // decoder's peak, the upsampled input and output side by side.
      x = Tensor();
      release_cached_blocks();
      x = Tensor::empty({B, h, w, ch});
      ub->upsample_conv.forward(up.data<float>(), B, h, w, x.data<float>());
    }
  }
  const int64_t ch = up_.back()->resnets.back()->out;
  kernels::group_norm_nhwc(x.data<float>(), x.data<float>(), B, h * w, ch, c.norm_num_groups, 1e-6f,
                           norm_out_w_.data<float>(), norm_out_b_.data<float>(), true);
  Tensor y = Tensor::empty({B, h, w, c.out_channels});
  conv_out_.forward(x.data<float>(), B, h, w, y.data<float>());
  Tensor out = Tensor::empty({B, c.out_channels, h, w});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < h * w; ++p)
      for (int64_t k = 0; k < c.out_channels; ++k)
        out.data<float>()[(b * c.out_channels + k) * h * w + p] =
            y.data<float>()[(b * h * w + p) * c.out_channels + k];
  x = Tensor();
  y = Tensor();
  release_cached_blocks();  // the decoder's buffers go back to the system
  return out;
}

std::vector<std::vector<uint8_t>> image_to_rgb8(const Tensor& image) {
  XDIT_CHECK(image.ndim() == 4 && image.dim(1) == 3, "expected an RGB image [B, 3, H, W], got ",
             shape_str(image.shape()));
  const int64_t B = image.dim(0), hw = image.dim(2) * image.dim(3);
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    auto& px = out[static_cast<size_t>(b)];
    px.resize(static_cast<size_t>(hw * 3));
    for (int64_t p = 0; p < hw; ++p)
      for (int64_t k = 0; k < 3; ++k) {
        float v = image.data<float>()[(b * 3 + k) * hw + p] / 2.0f + 0.5f;
        v = std::min(std::max(v, 0.0f), 1.0f);
        px[static_cast<size_t>(p * 3 + k)] = static_cast<uint8_t>(std::nearbyint(v * 255.0f));
      }
  }
  return out;
}

}  // namespace xdit::models
