#include "models/pixart.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/log.h"
#include "core/memory.h"
#include "kernels/kernels.h"
#include "models/ada_single.h"

namespace xdit::models {

using io::WeightSource;
using kernels::Linear;

struct PixArtTransformer::Block {
  Tensor table;  // scale_shift_table [6, hidden]
  nn::Attention attn1, attn2;
  nn::FeedForwardGelu ff;
};

PixArtTransformer::PixArtTransformer(const PixArtConfig& cfg, const WeightSource& w, DType compute,
                                     DiTStage stage)
    : DiT(stage, cfg.num_layers), cfg_(cfg), ct_(kernels::resolve_compute_type(compute)) {
  const nn::LoadStaging staging;
  const int64_t d = cfg.hidden(), p = cfg.patch_size;
  // The patch convolution's weight [d, C, p, p] is a [d, C·p·p] matrix over im2col columns.
  if (stage_.first) {
    Tensor cw = w.get("pos_embed.proj.weight", {d, cfg.in_channels, p, p});
    Tensor cb = w.get("pos_embed.proj.bias", {d});
    patch_proj_ = Linear(cw.reshape({d, cfg.in_channels * p * p}), cb, ct_);
  }
  t_embedder_ =
      nn::MlpSilu(w, "adaln_single.emb.timestep_embedder", PixArtConfig::kTimeProjDim, d, d, ct_);
  if (cfg.use_additional_conditions) {
    res_embedder_ = nn::MlpSilu(w, "adaln_single.emb.resolution_embedder",
                                PixArtConfig::kTimeProjDim, d / 3, d / 3, ct_);
    ar_embedder_ = nn::MlpSilu(w, "adaln_single.emb.aspect_ratio_embedder",
                               PixArtConfig::kTimeProjDim, d / 3, d / 3, ct_);
  }
  adaln_linear_ = nn::load_linear(w, "adaln_single.linear", d, 6 * d, true, ct_);
  caption_1_ = nn::load_linear(w, "caption_projection.linear_1", cfg.caption_channels, d, true, ct_,
                               kernels::Activation::kGeluTanh);
  caption_2_ = nn::load_linear(w, "caption_projection.linear_2", d, d, true, ct_);
  for (int64_t i = stage_.block_begin; i < stage_.block_end; ++i) {
    const std::string pre = "transformer_blocks." + std::to_string(i);
    auto b = std::make_unique<Block>();
    b->table = nn::load_param(w, pre + ".scale_shift_table", {6, d});
    b->attn1 = nn::Attention(w, pre + ".attn1", d, cfg.num_attention_heads, cfg.attention_head_dim,
                             0, cfg.attention_bias, ct_, stage_.tp);
    b->attn2 = nn::Attention(w, pre + ".attn2", d, cfg.num_attention_heads, cfg.attention_head_dim,
                             cfg.cross_attention_dim, cfg.attention_bias, ct_, stage_.tp);
    b->ff = nn::FeedForwardGelu(w, pre + ".ff", d, 4 * d, ct_, stage_.tp);
    blocks_.push_back(std::move(b));
  }
  if (stage_.last) {
    out_table_ = nn::load_param(w, "scale_shift_table", {2, d});
    proj_out_ = nn::load_linear(w, "proj_out", d, p * p * cfg.out_channels, true, ct_);
  }
  XDIT_DEBUG("PixArt transformer: ", cfg.num_layers, " blocks, hidden ", d, ", compute ",
             ct_ == nn::ComputeType::kBF16 ? "bf16" : "f32");
}

PixArtTransformer::~PixArtTransformer() = default;

Streams PixArtTransformer::embed(const DiTInputs& in) {
  const PixArtConfig& c = cfg_;
  const Tensor* text_mask = in.find(kTextMask);
  XDIT_CHECK(in.latents && in.find(kText), "PixArt forward needs latents and text embeddings");
  const Tensor& x = *in.latents;
  XDIT_CHECK(x.ndim() == 4 && x.dim(1) == c.in_channels, "PixArt expects latents [B, ",
             c.in_channels, ", H, W], got ", shape_str(x.shape()));
  const int64_t B = x.dim(0), H = x.dim(2), W = x.dim(3), p = c.patch_size, d = c.hidden();
  XDIT_CHECK(H % p == 0 && W % p == 0, "latent size ", H, "x", W,
             " is not divisible by the patch size ", p);
  const int64_t gh = H / p, gw = W / p;
  const auto [r0, r1] = in.rows(gh);
  const int64_t rows = r1 - r0, N = rows * gw;  // the tokens this call computes
  const Tensor* text_in = in.find(kText);
  XDIT_CHECK(text_in->ndim() == 3 && text_in->dim(0) == B && text_in->dim(2) == c.caption_channels,
             "text embeddings must be [", B, ", L, ", c.caption_channels, "], got ",
             shape_str(text_in->shape()));
  int64_t L = text_in->dim(1);
  XDIT_CHECK(static_cast<int64_t>(in.timesteps.size()) == B, "need one timestep per batch row");
  mask_.clear();
  Tensor trimmed;
  if (text_mask != nullptr) {
    XDIT_CHECK(text_mask->numel() == B * L, "text mask must be [", B, ", ", L, "], got ",
               shape_str(text_mask->shape()));
    auto mv = text_mask->to_vector();
    // The tokens after the last one any row keeps are masked out of every
    // row's cross-attention: their caption projection and keys/values would
    // never be read, so they are left out (a 20-token prompt among 120 or 300
    // padded positions). Kept whole when a row keeps nothing (the attention
    // then has no key to drop to).
    int64_t keep = 0;
    bool every_row = true;
    for (int64_t b = 0; b < B; ++b) {
      int64_t last = 0;
      for (int64_t j = L; j > 0 && last == 0; --j)
        if (mv[static_cast<size_t>(b * L + j - 1)] != 0.0f) last = j;
      every_row = every_row && last > 0;
      keep = std::max(keep, last);
    }
    if (!every_row || !text_in->on_host()) keep = L;
    const size_t row = static_cast<size_t>(c.caption_channels) * dtype_size(text_in->dtype());
    if (keep < L) trimmed = Tensor::empty({B, keep, c.caption_channels}, text_in->dtype());
    mask_.resize(static_cast<size_t>(B * keep));
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < keep; ++j)
        mask_[static_cast<size_t>(b * keep + j)] = mv[static_cast<size_t>(b * L + j)] != 0.0f;
      if (trimmed.defined())
        std::memcpy(static_cast<char*>(trimmed.raw()) + static_cast<size_t>(b * keep) * row,
                    static_cast<const char*>(text_in->raw()) + static_cast<size_t>(b * L) * row,
                    static_cast<size_t>(keep) * row);
    }
    if (trimmed.defined()) {
      text_in = &trimmed;
      L = keep;
    }
  }
  const Tensor& text = *text_in;
  mask_ptr_ = nn::on_current_device(mask_, mask_device_);
  set_geometry({B, L, rows, gw, W});

  // Patch embedding + position embedding (recomputed for the actual grid, as
  // PatchEmbed does when it differs from the config's sample size); a later
  // pipeline stage's streams come from the previous stage (the base's).
  Streams s;
  if (stage_.first) {
    s.x = Tensor::empty({B, N, d}, DType::kF32, current_device());
    float* h = s.x.data<float>();
    const int64_t k = c.in_channels * p * p;
    float* cols = cols_.get(static_cast<size_t>(B * N * k));
    const float* lat = x.data<float>();
    if (rows != gh) {  // the latent rows of this slice, [B, C, rows·p, W]
      float* slab = slab_.get(static_cast<size_t>(B * c.in_channels * rows * p * W));
      kernels::copy_rows(slab, rows * p * W, lat + r0 * p * W, H * W, B * c.in_channels,
                         rows * p * W);
      lat = slab;
    }
    kernels::patchify(lat, B, c.in_channels, rows * p, W, p, cols);
    patch_proj_.forward(cols, B * N, h);
    float* pos = pos_.get(static_cast<size_t>(gh * gw * d));
    kernels::sincos_pos_embed_2d(d, gh, gw, static_cast<float>(c.sample_size / p),
                                 static_cast<float>(c.interpolation_scale), pos);
    for (int64_t b = 0; b < B; ++b)
      kernels::gated_residual_add(h + b * N * d, pos + r0 * gw * d, 1, N, d, nullptr, 0);
  }

  // AdaLayerNormSingle: timestep (+ micro-conditions) → embedded_timestep [B, d] and t6 [B, 6d].
  float* emb = emb_.get(static_cast<size_t>(B * d));
  float* t6 = t6_.get(static_cast<size_t>(B * 6 * d));
  {
    const int64_t tp = PixArtConfig::kTimeProjDim;
    float* proj = tproj_.get(static_cast<size_t>(B * tp));
    kernels::timestep_embedding(in.timesteps.data(), B, tp, true, 0.0f, proj);
    t_embedder_.forward(proj, B, emb);
    if (c.use_additional_conditions) {
      const Tensor *resolution = in.find(kResolution), *aspect = in.find(kAspectRatio);
      XDIT_CHECK(
          resolution && aspect && resolution->numel() == 2 * B && aspect->numel() == B,
          "this PixArt model uses resolution/aspect-ratio micro-conditions: pass [B,2] and [B,1]");
      const int64_t e = d / 3;
      // Host values in (the tables are computed on the host), then, in one
      // buffer: rp [2B, tp] | ap [B, tp] | re [B, 2e] | ae [B, e].
      auto res = resolution->to_vector(), ar = aspect->to_vector();
      float* rp = act_.get(static_cast<size_t>(3 * B * tp + 3 * B * e));
      float* ap = rp + 2 * B * tp;
      float* re = ap + B * tp;
      float* ae = re + 2 * B * e;
      kernels::timestep_embedding(res.data(), 2 * B, tp, true, 0.0f, rp);
      kernels::timestep_embedding(ar.data(), B, tp, true, 0.0f, ap);
      res_embedder_.forward(rp, 2 * B, re);  // [B·2, e] = [B, 2e]
      ar_embedder_.forward(ap, B, ae);
      kernels::add_rows(emb, d, re, 2 * e, emb, d, B, 2 * e);
      kernels::add_rows(emb + 2 * e, d, ae, e, emb + 2 * e, d, B, d - 2 * e);
    }
    float* act = act_.get(static_cast<size_t>(B * d));
    kernels::silu(emb, act, B * d);
    adaln_linear_.forward(act, B, t6);
  }

  // Caption projection: linear_1 → GELU(tanh) → linear_2.
  float* txt = text_.get(static_cast<size_t>(B * L * d));
  {
    const Tensor tf = text.as(DType::kF32, current_device());
    float* t1 = text_tmp_.get(static_cast<size_t>(B * L * d));
    caption_1_.forward(tf.data<float>(), B * L, t1);  // GELU(tanh) fused
    caption_2_.forward(t1, B * L, txt);
  }
  return s;
}

void PixArtTransformer::run_blocks(Streams& s, int64_t b0, int64_t b1) {
  if (b0 == b1) return;
  // With bf16 layers the layers' inputs (the modulated norms and the
  // residual stream the cross-attention reads) are written in bf16 by the
  // pass that makes them; the norm buffer has room for either type.
  const Block& first = *blocks_[static_cast<size_t>(b0 - stage_.block_begin)];
  if (first.attn1.bf16_input() && first.attn2.bf16_input() && first.ff.bf16_input())
    run_blocks_as<uint16_t>(s, b0, b1);
  else
    run_blocks_as<float>(s, b0, b1);
}

template <class T>
void PixArtTransformer::run_blocks_as(Streams& s, int64_t b0, int64_t b1) {
  const int64_t B = geometry().batch, L = geometry().text, d = cfg_.hidden(),
                N = geometry().tokens(), ms = 6 * d;
  float* h = s.x.data<float>();
  const float* txt = text_.get(static_cast<size_t>(B * L * d));
  T* nrm = reinterpret_cast<T*>(norm_.get(static_cast<size_t>(B * N * d)));
  float* tmp = tmp_.get(static_cast<size_t>(B * N * d));
  float* ffh = ffh_.get(static_cast<size_t>(B * N * 4 * d));
  float* mods = mod_.get(static_cast<size_t>(2 * B * ms));  // this block's and the next one's
  const float* t6 = t6_.get(static_cast<size_t>(B * ms));
  const float eps = static_cast<float>(cfg_.norm_eps);
  // Block bi's shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp,
  // gate_mlp = its table + t6, [B, 6d], in the slot of bi's parity.
  const auto modulation = [&](int64_t bi) {
    float* m = mods + (bi % 2) * B * ms;
    kernels::add_rows(t6, ms,
                      blocks_[static_cast<size_t>(bi - stage_.block_begin)]->table.data<float>(), 0,
                      m, ms, B, ms);
    return m;
  };
  const float* m = modulation(b0);
  kernels::layer_norm_modulate(h, nrm, B, N, d, eps, m + 0 * d, m + 1 * d, ms);
  for (int64_t bi = b0; bi < b1; ++bi) {
    Block& blk = *blocks_[static_cast<size_t>(bi - stage_.block_begin)];
    const int layer = static_cast<int>(bi);
    // nrm: norm1(h) · (1 + scale_msa) + shift_msa.
    attention_output(bi, 0, tmp, B * N * d, [&] {
      blk.attn1.forward(nrm, B, N, nullptr, 0, nullptr, tmp, *backend_, {layer, false},
                        attn_scratch_);
    });
    // ada_norm_single: the cross-attention reads the residual stream
    // unnormalised (in bf16, a copy written by the residual add into nrm).
    const T* x2 = nullptr;
    if constexpr (std::is_same_v<T, uint16_t>) {
      kernels::gated_residual_add(h, tmp, B, N, d, m + 2 * d, ms, nrm);
      x2 = nrm;
    } else {
      kernels::gated_residual_add(h, tmp, B, N, d, m + 2 * d, ms);
      x2 = h;
    }
    attention_output(bi, 1, tmp, B * N * d, [&] {
      blk.attn2.forward(x2, B, N, txt, L, mask_ptr_, tmp, *backend_, {layer, true}, attn_scratch_);
    });
    kernels::residual_layer_norm_modulate(h, tmp, B, N, d, nullptr, eps, m + 3 * d, m + 4 * d, ms,
                                          nrm);
    blk.ff.forward(nrm, B * N, tmp, ffh);
    if (bi + 1 < b1) {  // the residual add and the next block's first norm in one pass
      const float* next = modulation(bi + 1);
      kernels::residual_layer_norm_modulate(h, tmp, B, N, d, m + 5 * d, eps, next + 0 * d,
                                            next + 1 * d, ms, nrm);
      m = next;
    } else {
      kernels::gated_residual_add(h, tmp, B, N, d, m + 5 * d, ms);
    }
    XDIT_DEBUG("block ", bi, " done, rss ", current_rss_bytes() >> 20, " MiB");
  }
}

Tensor PixArtTransformer::block_modulated_input(int64_t b, const Streams& s) {
  const int64_t d = cfg_.hidden();
  return ada_single_modulated_input(
      s.x.data<float>(), blocks_[static_cast<size_t>(b - stage_.block_begin)]->table.data<float>(),
      t6_.get(static_cast<size_t>(geometry().batch * 6 * d)), geometry().batch, geometry().tokens(),
      d, static_cast<float>(cfg_.norm_eps), mod_);
}

Tensor PixArtTransformer::finalize(const Streams& s) {
  XDIT_CHECK(stage_.last, "only the last pipeline stage has the output layer");
  const auto& c = cfg_;
  const int64_t B = geometry().batch, d = c.hidden(), N = geometry().tokens();
  XDIT_CHECK(s.x.numel() == B * N * d, "PixArt streams must be [", B, ", ", N, ", ", d, "]");
  const FinalLayer f{out_table_.data<float>(),
                     emb_.get(static_cast<size_t>(B * d)),
                     &proj_out_,
                     c.out_channels,
                     c.patch_size,
                     static_cast<float>(cfg_.norm_eps)};
  return ada_single_final(f, s.x.data<float>(), B, geometry().rows, geometry().grid_width,
                          geometry().width, d, fin_, norm_, slab_);
}

}  // namespace xdit::models
