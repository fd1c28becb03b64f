#include "models/vae.h"

#include <algorithm>
#include <cmath>

#include "core/aligned.h"
#include "core/buffer_pool.h"
#include "core/dtype.h"
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

namespace {
// An activation on this thread's device.
Tensor act(const Shape& shape) {
  return Tensor::empty(shape, DType::kF32, current_device());
}
}  // namespace

// A convolution input with halo rows: `batch` items of rows + 2·halo rows ×
// `width` × `channels`, in the convolution's input type (bf16 or f32). The
// storage is sized once for the most channels a caller will put in it
// (set_channels changes the layout within it).
struct VaeDecoder::Padded {
  Tensor storage;  // f32 words holding the bytes
  int64_t batch = 0, rows = 0, width = 0, channels = 0, halo = 0, elem = 4;
  Padded(int64_t b, int64_t r, int64_t w, int64_t c, int64_t hl, bool bf16)
      : batch(b), rows(r), width(w), channels(c), halo(hl), elem(bf16 ? 2 : 4) {
    storage = Tensor::empty({(bytes() + 3) / 4}, DType::kF32, current_device());
  }
  int64_t bytes() const { return batch * (rows + 2 * halo) * width * channels * elem; }
  void set_channels(int64_t c) {
    channels = c;
    XDIT_CHECK(bytes() <= storage.numel() * 4, "VAE: a convolution input outgrew its buffer");
  }
  size_t row_bytes() const { return static_cast<size_t>(width * channels * elem); }
  int64_t item_stride() const { return (rows + 2 * halo) * width * channels; }  // elements
  void* data() { return storage.data<float>(); }
  // The first inside row of item 0, as the element type.
  template <class T>
  T* inside() {
    return reinterpret_cast<T*>(data()) + halo * width * channels;
  }
};

std::vector<double> VaeDecoder::moments(const float* x, int64_t channels, Band& bd) {
  // Exact GroupNorm over the whole image: every band's Σx and Σx² (f64) added.
  const int64_t G = cfg_.norm_num_groups;
  std::vector<double> m(static_cast<size_t>(2 * bd.batch * G));
  kernels::group_norm_moments_nhwc(x, bd.batch, bd.rows * bd.width, channels, G, m.data());
  bd.bands.sum(m.data(), m.size());
  return m;
}

void VaeDecoder::norm(const float* x, int64_t channels, const Tensor& gamma, const Tensor& beta,
                      Band& bd, float* y) {
  const int64_t G = cfg_.norm_num_groups;
  const std::vector<double> m = moments(x, channels, bd);
  kernels::group_norm_apply_nhwc(x, y, bd.batch, bd.rows * bd.width, channels, G, 1e-6f,
                                 gamma.data<float>(), beta.data<float>(), false, m.data(),
                                 static_cast<double>(bd.total_rows * bd.width * (channels / G)));
}

void VaeDecoder::norm_silu_into(const float* x, int64_t channels, const Tensor& gamma,
                                const Tensor& beta, Band& bd, Padded& p) {
  const int64_t G = cfg_.norm_num_groups, hw = bd.rows * bd.width;
  const std::vector<double> m = moments(x, channels, bd);
  const double count = static_cast<double>(bd.total_rows * bd.width * (channels / G));
  p.set_channels(channels);
  // GroupNorm + SiLU write the convolution's input directly, in its type.
  if (p.elem == 2)
    kernels::group_norm_apply_nhwc_bf16(x, p.inside<uint16_t>(), bd.batch, hw, channels, G, 1e-6f,
                                        gamma.data<float>(), beta.data<float>(), true, m.data(),
                                        count, p.item_stride());
  else
    kernels::group_norm_apply_nhwc(x, p.inside<float>(), bd.batch, hw, channels, G, 1e-6f,
                                   gamma.data<float>(), beta.data<float>(), true, m.data(), count,
                                   p.item_stride());
  bd.bands.exchange_halos(p.data(), bd.batch, bd.rows, p.halo, p.row_bytes());
}

void VaeDecoder::resnet(const Resnet& r, Tensor& x, Band& bd) {
  const int64_t px = bd.batch * bd.rows * bd.width;
  // One buffer holds each convolution's input in turn (with its halo rows,
  // in the convolution's type). The shortcut runs first (its bf16 input
  // converted into that buffer), so that x can go as soon as GroupNorm has
  // read it: at most x, the buffer and the shortcut's output are live, then
  // the buffer, the shortcut's output and u — not x, u, both convolution
  // inputs and a converted copy of x.
  Padded buf(bd.batch, bd.rows, bd.width, std::max(r.in, r.out), r.conv1.halo(),
             ct_ == nn::ComputeType::kBF16);
  Tensor s;
  if (r.has_shortcut) {
    s = act({bd.batch, bd.rows, bd.width, r.out});
    if (r.shortcut.is_bf16()) {
      auto* xb = reinterpret_cast<uint16_t*>(buf.data());
      kernels::to_bf16_array(x.data<float>(), xb, px * r.in);
      r.shortcut.forward_bf16(xb, bd.batch, bd.rows, bd.width, s.data<float>());
    } else {
      r.shortcut.forward(x.data<float>(), bd.batch, bd.rows, bd.width, s.data<float>());
    }
  }
  norm_silu_into(x.data<float>(), r.in, r.n1w, r.n1b, bd, buf);
  if (r.has_shortcut) x = s;  // the residual branch from here on
  Tensor u = act({bd.batch, bd.rows, bd.width, r.out});
  r.conv1.forward_halo(buf.data(), bd.batch, bd.rows, bd.width, u.data<float>());
  norm_silu_into(u.data<float>(), r.out, r.n2w, r.n2b, bd, buf);
  r.conv2.forward_halo(buf.data(), bd.batch, bd.rows, bd.width, u.data<float>());
  kernels::gated_residual_add(x.data<float>(), u.data<float>(), 1, 1, px * r.out, nullptr, 0);
}

Tensor VaeDecoder::decode_latents(const Tensor& latents, nn::RowBands* bands) {
  DeviceScope scope(device_);
  const Tensor in = latents.as(DType::kF32, current_device());
  Tensor z = act(in.shape());
  kernels::affine_div(in.data<float>(), z.data<float>(), z.numel(),
                      static_cast<float>(cfg_.scaling_factor),
                      static_cast<float>(cfg_.shift_factor));
  return decode(z, bands);
}

Tensor VaeDecoder::decode(const Tensor& z_nchw, nn::RowBands* bands) {
  DeviceScope scope(device_);
  const VaeConfig& c = cfg_;
  XDIT_CHECK(z_nchw.ndim() == 4 && z_nchw.dim(1) == c.latent_channels, "VAE decode expects [B, ",
             c.latent_channels, ", h, w] latents, got ", shape_str(z_nchw.shape()));
  const int64_t B = z_nchw.dim(0), lc = c.latent_channels, H = z_nchw.dim(2);
  nn::LocalBand whole(H);
  Band bd{bands ? *bands : whole, B, 0, z_nchw.dim(3), H};
  XDIT_CHECK(bd.bands.total_rows() == H, "VAE decode: the row bands cover ", bd.bands.total_rows(),
             " latent rows, the latents have ", H);
  for (int64_t r : bd.bands.rows())
    XDIT_CHECK(r >= conv_in_.halo(), "VAE decode: a band of ", r,
               " latent rows is thinner than the 3x3 convolutions' halo of ", conv_in_.halo());
  const auto [r0, r1] = bd.bands.my_rows();
  bd.rows = r1 - r0;
  const int64_t w0 = bd.width;

  // This band's latent rows, channels last.
  const Tensor zin = z_nchw.as(DType::kF32, current_device());
  Tensor z = act({B, bd.rows, w0, lc});
  kernels::nchw_rows_to_nhwc(zin.data<float>(), B, lc, H, w0, r0, bd.rows, z.data<float>());
  if (c.use_post_quant_conv) {
    Tensor t = act({B, bd.rows, w0, lc});
    post_quant_.forward(z.data<float>(), B, bd.rows, w0, t.data<float>());
    z = t;
  }
  const int64_t top = c.block_out_channels.back();
  Tensor x = act({B, bd.rows, w0, top});
  {
    const bool bf16 = ct_ == nn::ComputeType::kBF16;
    Padded in(B, bd.rows, w0, lc, conv_in_.halo(), bf16);
    for (int64_t b = 0; b < B; ++b) {
      const float* zb = z.data<float>() + b * bd.rows * w0 * lc;
      const auto n = static_cast<size_t>(bd.rows * w0 * lc);
      if (bf16)
        kernels::to_bf16_array(zb, in.inside<uint16_t>() + b * in.item_stride(),
                               static_cast<int64_t>(n));
      else
        kernels::copy_rows(in.inside<float>() + b * in.item_stride(), 0, zb, 0, 1,
                           static_cast<int64_t>(n));
    }
    bd.bands.exchange_halos(in.data(), B, bd.rows, in.halo, in.row_bytes());
    conv_in_.forward_halo(in.data(), B, bd.rows, w0, x.data<float>());
  }

  resnet(*mid_resnets_[0], x, bd);
  if (has_attn_) {
    // Single-head self-attention over the whole latent: every band's tokens.
    const int64_t hw = bd.rows * bd.width;
    Tensor n = act({B, bd.rows, bd.width, top}), o = act(n.shape());
    norm(x.data<float>(), top, attn_norm_w_, attn_norm_b_, bd, n.data<float>());
    nn::AttentionBackend& attn = bd.bands.attention();
    std::vector<int64_t> tokens;
    for (int64_t r : bd.bands.rows()) tokens.push_back(r * bd.width);
    attn.set_sequence_split(tokens);
    mid_attn_.forward(n.data<float>(), B, hw, nullptr, 0, nullptr, o.data<float>(), attn,
                      {0, false}, attn_scratch_);
    kernels::gated_residual_add(x.data<float>(), o.data<float>(), 1, 1, B * hw * top, nullptr, 0);
    // The one attention of the decoder: its buffers go back to the system
    // rather than stay through the larger resolutions.
    attn_scratch_ = nn::AttentionScratch();
    attn.release_buffers();
  }
  resnet(*mid_resnets_[1], x, bd);

  for (const auto& ub : up_) {
    for (const auto& r : ub->resnets) resnet(*r, x, bd);
    if (ub->upsample) {
      const int64_t ch = ub->resnets.back()->out;
      const bool bf16 = ct_ == nn::ComputeType::kBF16;
      // Upsampled straight into the convolution's input (its type, halo rows).
      Padded up(B, 2 * bd.rows, 2 * bd.width, ch, ub->upsample_conv.halo(), bf16);
      if (bf16)
        kernels::upsample_nearest2x_nhwc_bf16(x.data<float>(), up.inside<uint16_t>(), B, bd.rows,
                                              bd.width, ch, up.item_stride());
      else
        kernels::upsample_nearest2x_nhwc(x.data<float>(), up.inside<float>(), B, bd.rows, bd.width,
                                         ch, up.item_stride());
      bd.rows *= 2;
      bd.width *= 2;
      bd.total_rows *= 2;
      bd.bands.exchange_halos(up.data(), B, bd.rows, up.halo, up.row_bytes());
      // No buffer of the smaller size is needed again: return them (and x)
      // to the system rather than keep them (core/buffer_pool.h) through the
      // decoder's peak, the upsampled input and output side by side.
      x = Tensor();
      release_pooled_buffers();
      x = act({B, bd.rows, bd.width, ch});
      ub->upsample_conv.forward_halo(up.data(), B, bd.rows, bd.width, x.data<float>());
    }
  }
  const int64_t ch = up_.back()->resnets.back()->out, hw = bd.rows * bd.width;
  Tensor y = act({B, bd.rows, bd.width, c.out_channels});
  {
    Padded in(B, bd.rows, bd.width, ch, conv_out_.halo(), ct_ == nn::ComputeType::kBF16);
    norm_silu_into(x.data<float>(), ch, norm_out_w_, norm_out_b_, bd, in);
    x = Tensor();
    conv_out_.forward_halo(in.data(), B, bd.rows, bd.width, y.data<float>());
  }
  Tensor band = act({B, c.out_channels, bd.rows, bd.width});
  kernels::nhwc_to_nchw(y.data<float>(), B, hw, c.out_channels, band.data<float>());
  y = Tensor();
  release_pooled_buffers();                          // the decoder's buffers go back to the system
  return bd.bands.gather(band.to_device(Device{}));  // the image, gathered on the host
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
