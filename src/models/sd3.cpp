#include "models/sd3.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/kernels.h"
#include "nn/joint_attention.h"

namespace xdit::models {

namespace {
constexpr float kSd3Eps = 1e-6f;  // every LayerNorm and RMSNorm of the model
}  // namespace

struct SD3Transformer::Block {
  bool last = false, dual = false;
  kernels::Linear mod;          // norm1: silu(temb) → 6·D (9·D with dual attention)
  kernels::Linear mod_context;  // norm1_context: 6·D, or 2·D ([scale, shift]) on the last block
  nn::JointAttention attn;      // context_pre_only on the last block; qk RMSNorm (SD3.5)
  nn::JointAttention attn2;     // dual-attention blocks: image-only self-attention
  nn::FeedForwardGelu ff, ff_context;  // ff_context: not on the last block
};

SD3Transformer::SD3Transformer(const SD3Config& cfg, const io::WeightSource& w, DType compute,
                               DiTStage stage)
    : DiT(stage, cfg.num_layers), cfg_(cfg), ct_(kernels::resolve_compute_type(compute)) {
  const nn::LoadStaging staging;
  const int64_t D = cfg.hidden(), hd = cfg.attention_head_dim, p = cfg.patch_size;
  const nn::TensorParallel& tp = stage_.tp;
  tp.part(cfg.num_attention_heads, "attention heads of the SD3 transformer");  // checked first
  nn::JointAttentionConfig joint;
  joint.dim = D;
  joint.heads = cfg.num_attention_heads;
  joint.head_dim = hd;
  joint.qk_norm = cfg.qk_norm;
  nn::JointAttentionConfig image_only = joint;
  image_only.context = false;
  if (stage_.first) {
    // The patch convolution's weight [D, C, p, p] is a [D, C·p·p] matrix over im2col columns.
    Tensor cw = w.get("pos_embed.proj.weight", {D, cfg.in_channels, p, p});
    patch_proj_ = kernels::Linear(cw.reshape({D, cfg.in_channels * p * p}),
                                  w.get("pos_embed.proj.bias", {D}), ct_);
    pos_table_ = nn::load_param(w, "pos_embed.pos_embed",
                                {1, cfg.pos_embed_max_size * cfg.pos_embed_max_size, D});
    context_embedder_ =
        nn::load_linear(w, "context_embedder", cfg.joint_attention_dim, D, true, ct_);
  }
  const std::string te = "time_text_embed.";
  timestep_embedder_ = nn::MlpSilu(w, te + "timestep_embedder", SD3Config::kTimeProjDim, D, D, ct_);
  text_embedder_ = nn::MlpSilu(w, te + "text_embedder", cfg.pooled_projection_dim, D, D, ct_);
  for (int64_t i = stage_.block_begin; i < stage_.block_end; ++i) {
    const std::string pre = "transformer_blocks." + std::to_string(i) + ".";
    auto b = std::make_unique<Block>();
    b->last = i == cfg.num_layers - 1;
    b->dual = cfg.dual(i);
    b->mod = nn::load_linear(w, pre + "norm1.linear", D, (b->dual ? 9 : 6) * D, true, ct_);
    b->mod_context =
        nn::load_linear(w, pre + "norm1_context.linear", D, (b->last ? 2 : 6) * D, true, ct_);
    joint.context_pre_only = b->last;
    b->attn = nn::JointAttention(w, pre + "attn", joint, ct_, tp);
    if (b->dual) b->attn2 = nn::JointAttention(w, pre + "attn2", image_only, ct_, tp);
    b->ff = nn::FeedForwardGelu(w, pre + "ff", D, 4 * D, ct_, tp);
    if (!b->last) b->ff_context = nn::FeedForwardGelu(w, pre + "ff_context", D, 4 * D, ct_, tp);
    blocks_.push_back(std::move(b));
  }
  if (stage_.last) {
    norm_out_ = nn::AdaLayerNormContinuous(w, "norm_out", D, ct_);
    proj_out_ = nn::load_linear(w, "proj_out", D, p * p * cfg.out_channels, true, ct_);
  }
}

SD3Transformer::~SD3Transformer() = default;

Streams SD3Transformer::embed(const DiTInputs& in) {
  const SD3Config& c = cfg_;
  const Tensor *text = in.find(kText), *pooled = in.find(kPooled);
  XDIT_CHECK(in.latents && text && pooled, "SD3 forward: latents, text and pooled needed");
  const Tensor& lat = *in.latents;
  const int64_t p = c.patch_size;
  XDIT_CHECK(
      lat.ndim() == 4 && lat.dim(1) == c.in_channels && lat.dim(2) % p == 0 && lat.dim(3) % p == 0,
      "SD3 latents must be [B, ", c.in_channels, ", H, W] with H and W multiples of ", p, ", got ",
      shape_str(lat.shape()));
  const int64_t B = lat.dim(0), H = lat.dim(2), W = lat.dim(3), gh = H / p, gw = W / p;
  const int64_t D = c.hidden();
  XDIT_CHECK(gh <= c.pos_embed_max_size && gw <= c.pos_embed_max_size, "the latent grid ", gh, "x",
             gw, " patches exceeds pos_embed_max_size ", c.pos_embed_max_size);
  const auto [r0, r1] = in.rows(gh);
  const int64_t N = (r1 - r0) * gw;
  in.check_joint_text(B, c.joint_attention_dim, c.pooled_projection_dim, "SD3");
  const int64_t L = text->dim(1), S = L + N;
  set_geometry({B, L, r1 - r0, gw, W});

  // Conditioning: Timesteps(256, flip_sin_to_cos, shift 0) → MLP, plus the
  // pooled text's MLP; SiLU once for every AdaLN projection.
  float* proj = tproj_.get(static_cast<size_t>(B * SD3Config::kTimeProjDim));
  float* temb = temb_.get(static_cast<size_t>(B * D));
  float* part = part_.get(static_cast<size_t>(B * D));
  kernels::timestep_embedding(in.timesteps.data(), B, SD3Config::kTimeProjDim, true, 0.0f, proj);
  timestep_embedder_.forward(proj, B, temb);
  text_embedder_.forward(pooled->data<float>(), B, part);
  kernels::gated_residual_add(temb, part, 1, 1, B * D, nullptr, 0);
  kernels::silu(temb, st_.get(static_cast<size_t>(B * D)), B * D);

  if (!stage_.first) return {};  // the base takes the previous stage's
  Streams st;
  st.text = L;
  st.x = Tensor::empty({B, S, D}, DType::kF32, current_device());
  float* X = st.x.data<float>();
  // Patch rows [r0, r1): im2col, the projection, the cropped sin-cos table.
  const int64_t k = c.in_channels * p * p, rows = r1 - r0;
  float* slab = slab_.get(static_cast<size_t>(B * c.in_channels * rows * p * W));
  kernels::copy_rows(slab, rows * p * W, lat.data<float>() + r0 * p * W, H * W, B * c.in_channels,
                     rows * p * W);
  float* cols = cols_.get(static_cast<size_t>(B * N * std::max(k, D)));
  kernels::patchify(slab, B, c.in_channels, rows * p, W, p, cols);
  float* emb = tmp_.get(static_cast<size_t>(B * N * D));
  patch_proj_.forward(cols, B * N, emb);
  const int64_t top = (c.pos_embed_max_size - gh) / 2, left = (c.pos_embed_max_size - gw) / 2;
  const float* table = pos_table_.data<float>();
  for (int64_t b = 0; b < B; ++b) {
    context_embedder_.forward(text->data<float>() + b * L * c.joint_attention_dim, L,
                              X + b * S * D);
    for (int64_t row = r0; row < r1; ++row)  // a patch row: gw tokens, contiguous in the table
      kernels::add_rows(emb + (b * N + (row - r0) * gw) * D, 0,
                        table + ((top + row) * c.pos_embed_max_size + left) * D, 0,
                        X + (b * S + L + (row - r0) * gw) * D, 0, 1, gw * D);
  }
  return st;
}

void SD3Transformer::block(Block& blk, float* X, int64_t index) {
  const int64_t B = geometry().batch, L = geometry().text, N = geometry().tokens(), S = L + N,
                D = cfg_.hidden();
  const int64_t mi_n = (blk.dual ? 9 : 6) * D, mc_n = (blk.last ? 2 : 6) * D;
  float* mod = mod_.get(static_cast<size_t>(B * (mi_n + mc_n)));
  float* mi = mod;  // image: shift, scale, gate (attention), shift, scale, gate (MLP)[, attn2's]
  float* mc = mod + B * mi_n;  // text: the same, or [scale, shift] on the last block
  const float* st = st_.get(static_cast<size_t>(B * cfg_.hidden()));
  blk.mod.forward(st, B, mi);
  blk.mod_context.forward(st, B, mc);
  float* nh = n_.get(static_cast<size_t>(B * S * D));
  float* nh2 = blk.dual ? n2_.get(static_cast<size_t>(B * N * D)) : nullptr;
  // The attention's output (this rank's width), then the image MLP's: sized
  // for the MLP here, so the attention finds it large enough.
  float* att = attn_.out.get(static_cast<size_t>(B * S * D));
  float* tmp = tmp_.get(static_cast<size_t>(B * S * D));
  float* ffh = ff_.get(static_cast<size_t>(B * S * 4 * D / stage_.tp.size));
  // Per batch item: text rows [0, L), image rows [L, S).
  const auto text = [&](float* p, int64_t b, int64_t width) { return p + b * S * width; };
  const auto image = [&](float* p, int64_t b, int64_t width) { return p + (b * S + L) * width; };
  for (int64_t b = 0; b < B; ++b) {
    const float* m = mi + b * mi_n;
    const float* n = mc + b * mc_n;
    kernels::layer_norm_modulate(image(X, b, D), image(nh, b, D), 1, N, D, kSd3Eps, m, m + D, 0);
    if (blk.dual)
      kernels::layer_norm_modulate(image(X, b, D), nh2 + b * N * D, 1, N, D, kSd3Eps, m + 6 * D,
                                   m + 7 * D, 0);
    if (blk.last)  // AdaLN-continuous: [scale, shift]
      kernels::layer_norm_modulate(text(X, b, D), text(nh, b, D), 1, L, D, kSd3Eps, n + D, n, 0);
    else
      kernels::layer_norm_modulate(text(X, b, D), text(nh, b, D), 1, L, D, kSd3Eps, n, n + D, 0);
  }
  nn::JointCall call;
  call.batch = B;
  call.text = L;
  call.image = N;
  call.layer = static_cast<int>(index);
  // diffusers' transformer_blocks.i.attn (the last block: image rows only;
  // its text rows are zeroed so that a hook keeps no stale values).
  attention_output(static_cast<int64_t>(index), 0, tmp, B * (L + N) * D, [&] {
    if (blk.last)
      for (int64_t b = 0; b < B; ++b)
        kernels::zero_bytes(text(tmp, b, D), static_cast<size_t>(L * D) * sizeof(float));
    blk.attn.forward(nh, call, tmp, *backend_, attn_);
  });
  for (int64_t b = 0; b < B; ++b)
    kernels::gated_residual_add(image(X, b, D), image(tmp, b, D), 1, N, D, mi + b * mi_n + 2 * D,
                                0);
  if (blk.dual) {  // image-only attention on the second modulation of the input
    nn::JointCall image_only;
    image_only.batch = B;
    image_only.image = N;
    image_only.layer = static_cast<int>(cfg_.num_layers + index);
    blk.attn2.forward(nh2, image_only, nh2, *backend_, attn_);
    for (int64_t b = 0; b < B; ++b)
      kernels::gated_residual_add(image(X, b, D), nh2 + b * N * D, 1, N, D, mi + b * mi_n + 8 * D,
                                  0);
  }
  for (int64_t b = 0; b < B; ++b) {
    const float* m = mi + b * mi_n;
    kernels::layer_norm_modulate(image(X, b, D), image(nh, b, D), 1, N, D, kSd3Eps, m + 3 * D,
                                 m + 4 * D, 0);
    blk.ff.forward(image(nh, b, D), N, image(att, b, D), ffh);
    kernels::gated_residual_add(image(X, b, D), image(att, b, D), 1, N, D, m + 5 * D, 0);
    if (blk.last) continue;  // context_pre_only: the text stream ends here
    const float* n = mc + b * mc_n;
    kernels::gated_residual_add(text(X, b, D), text(tmp, b, D), 1, L, D, n + 2 * D, 0);
    kernels::layer_norm_modulate(text(X, b, D), text(nh, b, D), 1, L, D, kSd3Eps, n + 3 * D, n + 4 * D,
                                 0);
    blk.ff_context.forward(text(nh, b, D), L, text(tmp, b, D), ffh);
    kernels::gated_residual_add(text(X, b, D), text(tmp, b, D), 1, L, D, n + 5 * D, 0);
  }
}

Tensor SD3Transformer::block_modulated_input(int64_t b, const Streams& s) {
  const int64_t B = geometry().batch, L = geometry().text, N = geometry().tokens(), S = L + N,
                D = cfg_.hidden();
  Block& blk = *blocks_[static_cast<size_t>(b - stage_.block_begin)];
  // norm1's first output: shift_msa, scale_msa lead the image stream's 6 (9
  // for SD3.5's dual-attention blocks).
  const int64_t mi_n = (blk.dual ? 9 : 6) * D;
  float* mi = mod_.get(static_cast<size_t>(B * (mi_n + 6 * D)));
  blk.mod.forward(st_.get(static_cast<size_t>(B * D)), B, mi);
  Tensor m = Tensor::empty({B, N, D}, DType::kF32, current_device());
  for (int64_t i = 0; i < B; ++i)
    kernels::layer_norm_modulate(s.x.data<float>() + (i * S + L) * D, m.data<float>() + i * N * D,
                                 1, N, D, kSd3Eps, mi + i * mi_n, mi + i * mi_n + D, 0);
  return m;
}

void SD3Transformer::run_blocks(Streams& s, int64_t b0, int64_t b1) {
  for (int64_t bi = b0; bi < b1; ++bi)
    block(*blocks_[static_cast<size_t>(bi - stage_.block_begin)], s.x.data<float>(), bi);
}

Tensor SD3Transformer::finalize(const Streams& s) {
  XDIT_CHECK(stage_.last, "only the last pipeline stage has the output layer");
  const SD3Config& c = cfg_;
  const int64_t B = geometry().batch, L = geometry().text, N = geometry().tokens(), S = L + N,
                D = c.hidden(), p = c.patch_size;
  XDIT_CHECK(s.x.numel() == B * S * D, "SD3 streams must be [", B, ", ", S, ", ", D, "]");
  // norm_out on the image rows (AdaLN-continuous: [scale, shift]), proj_out.
  float* nh = n_.get(static_cast<size_t>(B * S * D));
  norm_out_.forward(st_.get(static_cast<size_t>(B * D)), B, s.x.data<float>(), S, L, N, nh,
                    mod_.get(static_cast<size_t>(B * 2 * D)));
  const int64_t po = p * p * c.out_channels;
  float* patches = ff_.get(static_cast<size_t>(B * N * std::max(po, 4 * D)));
  proj_out_.forward(nh, B * N, patches);
  Tensor out = Tensor::empty({B, c.out_channels, geometry().rows * p, geometry().width},
                             DType::kF32, current_device());
  kernels::unpatchify(patches, B, c.out_channels, geometry().rows, geometry().grid_width, p,
                      out.data<float>());
  return out;
}

}  // namespace xdit::models
