#include "models/wan.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "kernels/kernels.h"
#include "models/ada_single.h"
#include "nn/rope.h"

namespace xdit::models {

using io::WeightSource;
using kernels::Linear;

struct WanTransformer::Block {
  Tensor table;  // scale_shift_table [6, hidden]
  nn::Attention attn1, attn2;
  Tensor norm2_w, norm2_b;  // cross_attn_norm's affine LayerNorm
  nn::FeedForwardGelu ffn;
};

WanTransformer::WanTransformer(const WanConfig& cfg, const WeightSource& w, DType compute,
                               DiTStage stage)
    : DiT(stage, cfg.num_layers), cfg_(cfg), ct_(kernels::resolve_compute_type(compute)) {
  const nn::LoadStaging staging;
  const int64_t d = cfg.hidden(), p = cfg.patch_h, C = cfg.in_channels;
  const auto eps = static_cast<float>(cfg.eps);
  // The (1, p, p) stride-(1, p, p) convolution is a [d, C·p·p] matrix over
  // im2col columns of each frame.
  if (stage_.first) {
    Tensor cw = w.get("patch_embedding.weight", {d, C, 1, p, p});
    patch_proj_ = Linear(cw.reshape({d, C * p * p}), w.get("patch_embedding.bias", {d}), ct_);
  }
  time_embedder_ = nn::MlpSilu(w, "condition_embedder.time_embedder", cfg.freq_dim, d, d, ct_);
  time_proj_ = nn::load_linear(w, "condition_embedder.time_proj", d, 6 * d, true, ct_);
  text_1_ = nn::load_linear(w, "condition_embedder.text_embedder.linear_1", cfg.text_dim, d, true,
                            ct_, kernels::Activation::kGeluTanh);
  text_2_ = nn::load_linear(w, "condition_embedder.text_embedder.linear_2", d, d, true, ct_);
  for (int64_t i = stage_.block_begin; i < stage_.block_end; ++i) {
    const std::string pre = "blocks." + std::to_string(i);
    auto b = std::make_unique<Block>();
    b->table = nn::load_param(w, pre + ".scale_shift_table", {1, 6, d});
    b->attn1 = nn::Attention(w, pre + ".attn1", d, cfg.num_attention_heads, cfg.attention_head_dim,
                             0, true, ct_, stage_.tp);
    b->attn1.set_qk_norm_across_heads(w, pre + ".attn1", eps);
    b->attn2 = nn::Attention(w, pre + ".attn2", d, cfg.num_attention_heads, cfg.attention_head_dim,
                             d, true, ct_, stage_.tp);
    b->attn2.set_qk_norm_across_heads(w, pre + ".attn2", eps);
    if (cfg.cross_attn_norm) {
      b->norm2_w = nn::load_param(w, pre + ".norm2.weight", {d});
      b->norm2_b = nn::load_param(w, pre + ".norm2.bias", {d});
    }
    b->ffn = nn::FeedForwardGelu(w, pre + ".ffn", d, cfg.ffn_dim, ct_, stage_.tp);
    blocks_.push_back(std::move(b));
  }
  if (stage_.last) {
    out_table_ = nn::load_param(w, "scale_shift_table", {1, 2, d});
    proj_out_ = nn::load_linear(w, "proj_out", d, p * p * cfg.out_channels, true, ct_);
  }
  XDIT_DEBUG("Wan transformer: ", cfg.num_layers, " blocks, hidden ", d, ", compute ",
             ct_ == nn::ComputeType::kBF16 ? "bf16" : "f32");
}

WanTransformer::~WanTransformer() = default;

Streams WanTransformer::embed(const DiTInputs& in) {
  const WanConfig& c = cfg_;
  XDIT_CHECK(in.latents && in.find(kText), "Wan forward needs latents and text embeddings");
  const Tensor& x = *in.latents;
  XDIT_CHECK(x.ndim() == 5 && x.dim(1) == c.in_channels, "Wan expects latents [B, ", c.in_channels,
             ", F, H, W], got ", shape_str(x.shape()));
  const int64_t B = x.dim(0), F = x.dim(2), H = x.dim(3), W = x.dim(4), p = c.patch_h,
                d = c.hidden(), hd = c.attention_head_dim;
  XDIT_CHECK(H % p == 0 && W % p == 0, "latent size ", H, "x", W,
             " is not divisible by the patch size ", p);
  const int64_t gh = H / p, gw = W / p;
  XDIT_CHECK(std::max({F, gh, gw}) <= c.rope_max_seq_len, "Wan's rotary table covers ",
             c.rope_max_seq_len, " positions per axis; the latents have ", F, " frames of ", gh,
             "x", gw, " patches");
  const auto [r0, r1] = in.rows(F * gh);  // token rows, frame-major
  const int64_t rows = r1 - r0, N = rows * gw;
  const Tensor& text = *in.find(kText);
  XDIT_CHECK(text.ndim() == 3 && text.dim(0) == B && text.dim(2) == c.text_dim,
             "text embeddings must be [", B, ", L, ", c.text_dim, "], got ",
             shape_str(text.shape()));
  const int64_t L = text.dim(1);
  XDIT_CHECK(static_cast<int64_t>(in.timesteps.size()) == B, "need one timestep per batch row");
  set_geometry({B, L, rows, gw, W});

  Streams s;
  if (stage_.first) {
    s.x = Tensor::empty({B, N, d}, DType::kF32, current_device());
    const int64_t k = c.in_channels * p * p, R = F * H;  // latent rows, frame-major
    float* cols = cols_.get(static_cast<size_t>(B * N * k));
    const float* lat = x.data<float>();
    if (rows != F * gh) {  // this call's latent rows, [B, C, rows·p, W]
      float* slab = slab_.get(static_cast<size_t>(B * c.in_channels * rows * p * W));
      kernels::copy_rows(slab, rows * p * W, lat + r0 * p * W, R * W, B * c.in_channels,
                         rows * p * W);
      lat = slab;
    }
    kernels::patchify(lat, B, c.in_channels, rows * p, W, p, cols);
    patch_proj_.forward(cols, B * N, s.x.data<float>());
  }

  // Rotary tables for the call's tokens: (frame, row, column) of the whole
  // video; the same for every step of a request, so made again only when
  // the grid or the rows change.
  const std::vector<int64_t> key{gh, gw, r0, r1};
  if (key != rope_key_) {
    const std::vector<int64_t> axes = c.rope_axes();
    rope_cos_host_.assign(static_cast<size_t>(N * hd), 0.0f);
    rope_sin_host_.assign(static_cast<size_t>(N * hd), 0.0f);
    for (int64_t t = 0; t < N; ++t) {
      const int64_t tr = r0 + t / gw;  // the token's row of the frame-major grid
      const double pos[3] = {static_cast<double>(tr / gh), static_cast<double>(tr % gh),
                             static_cast<double>(t % gw)};
      nn::rope_row(pos, axes, 10000.0, rope_cos_host_.data() + t * hd,
                   rope_sin_host_.data() + t * hd);
    }
    rope_.cos = nn::on_current_device(rope_cos_host_, rope_cos_keep_);
    rope_.sin = nn::on_current_device(rope_sin_host_, rope_sin_keep_);
    rope_key_ = key;
  }

  // Timestep: sinusoid (cos first) → MLP → temb [B, d]; SiLU → time_proj → t6 [B, 6d].
  float* temb = temb_.get(static_cast<size_t>(B * d));
  float* t6 = t6_.get(static_cast<size_t>(B * 6 * d));
  {
    float* proj = tproj_.get(static_cast<size_t>(B * c.freq_dim));
    kernels::timestep_embedding(in.timesteps.data(), B, c.freq_dim, true, 0.0f, proj);
    time_embedder_.forward(proj, B, temb);
    float* act = act_.get(static_cast<size_t>(B * d));
    kernels::silu(temb, act, B * d);
    time_proj_.forward(act, B, t6);
  }
  // Text: linear_1 → GELU(tanh) → linear_2, [B, L, d].
  {
    const Tensor tf = text.as(DType::kF32, current_device());
    float* t1 = text_tmp_.get(static_cast<size_t>(B * L * d));
    text_1_.forward(tf.data<float>(), B * L, t1);
    text_2_.forward(t1, B * L, text_.get(static_cast<size_t>(B * L * d)));
  }
  return s;
}

void WanTransformer::run_blocks(Streams& s, int64_t b0, int64_t b1) {
  const int64_t B = geometry().batch, L = geometry().text, d = cfg_.hidden(),
                N = geometry().tokens(), ms = 6 * d;
  float* h = s.x.data<float>();
  const float* txt = text_.get(static_cast<size_t>(B * L * d));
  float* nrm = norm_.get(static_cast<size_t>(B * N * d));
  float* tmp = tmp_.get(static_cast<size_t>(B * N * d));
  float* ffh = ffh_.get(static_cast<size_t>(B * N * cfg_.ffn_dim));
  float* m = mod_.get(static_cast<size_t>(B * ms));
  const float* t6 = t6_.get(static_cast<size_t>(B * ms));
  const auto eps = static_cast<float>(cfg_.eps);
  for (int64_t bi = b0; bi < b1; ++bi) {
    Block& blk = *blocks_[static_cast<size_t>(bi - stage_.block_begin)];
    const int layer = static_cast<int>(bi);
    // shift_msa, scale_msa, gate_msa, c_shift_msa, c_scale_msa, c_gate_msa = table + t6.
    kernels::add_rows(t6, ms, blk.table.data<float>(), 0, m, ms, B, ms);
    kernels::layer_norm_modulate(h, nrm, B, N, d, eps, m + 0 * d, m + 1 * d, ms);
    attention_output(bi, 0, tmp, B * N * d, [&] {
      blk.attn1.forward(nrm, B, N, nullptr, 0, nullptr, tmp, *backend_, {layer, false},
                        attn_scratch_, rope_);
    });
    kernels::gated_residual_add(h, tmp, B, N, d, m + 2 * d, ms);
    const float* x2 = h;
    if (cfg_.cross_attn_norm) {
      kernels::layer_norm(h, nrm, B * N, d, eps, blk.norm2_w.data<float>(),
                          blk.norm2_b.data<float>());
      x2 = nrm;
    }
    attention_output(bi, 1, tmp, B * N * d, [&] {
      blk.attn2.forward(x2, B, N, txt, L, nullptr, tmp, *backend_, {layer, true}, attn_scratch_);
    });
    kernels::residual_layer_norm_modulate(h, tmp, B, N, d, nullptr, eps, m + 3 * d, m + 4 * d, ms,
                                          nrm);
    blk.ffn.forward(nrm, B * N, tmp, ffh);
    kernels::gated_residual_add(h, tmp, B, N, d, m + 5 * d, ms);
  }
}

Tensor WanTransformer::block_modulated_input(int64_t b, const Streams& s) {
  const int64_t d = cfg_.hidden();
  return ada_single_modulated_input(
      s.x.data<float>(), blocks_[static_cast<size_t>(b - stage_.block_begin)]->table.data<float>(),
      t6_.get(static_cast<size_t>(geometry().batch * 6 * d)), geometry().batch, geometry().tokens(),
      d, static_cast<float>(cfg_.eps), mod_);
}

Tensor WanTransformer::finalize(const Streams& s) {
  XDIT_CHECK(stage_.last, "only the last pipeline stage has the output layer");
  const auto& c = cfg_;
  const int64_t B = geometry().batch, d = c.hidden(), N = geometry().tokens();
  XDIT_CHECK(s.x.numel() == B * N * d, "Wan streams must be [", B, ", ", N, ", ", d, "]");
  const FinalLayer f{out_table_.data<float>(),
                     temb_.get(static_cast<size_t>(B * d)),
                     &proj_out_,
                     c.out_channels,
                     c.patch_h,
                     static_cast<float>(cfg_.eps)};
  return ada_single_final(f, s.x.data<float>(), B, geometry().rows, geometry().grid_width,
                          geometry().width, d, fin_, norm_, slab_);
}

}  // namespace xdit::models
