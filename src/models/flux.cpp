#include "models/flux.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/kernels.h"
#include "nn/joint_attention.h"
#include "nn/rope.h"

namespace xdit::models {

namespace {

constexpr float kFluxEps = 1e-6f;  // every LayerNorm and RMSNorm of the model

}  // namespace

struct FluxTransformer::SingleBlock {
  kernels::Linear mod;      // norm.linear: silu(temb) → 3·D
  nn::JointAttention attn;  // pre_only: to_q|to_k|to_v over every token, no to_out
  nn::SingleStreamMlp mlp;  // proj_mlp and proj_out over [attention | MLP]
};

FluxTransformer::FluxTransformer(const FluxConfig& cfg, const io::WeightSource& w, DType compute,
                                 DiTStage stage)
    : DiT(stage, cfg.blocks()), cfg_(cfg), ct_(kernels::resolve_compute_type(compute)) {
  const nn::LoadStaging staging;
  const int64_t D = cfg.hidden(), hd = cfg.attention_head_dim;
  const nn::TensorParallel& tp = stage_.tp;
  tp.part(cfg.num_attention_heads, "attention heads of the FLUX transformer");  // checked first
  nn::JointAttentionConfig joint;
  joint.dim = D;
  joint.heads = cfg.num_attention_heads;
  joint.head_dim = hd;
  joint.qk_norm = true;
  nn::JointAttentionConfig single = joint;
  single.context = false;
  single.pre_only = true;
  if (stage_.first) {
    x_embedder_ = nn::load_linear(w, "x_embedder", cfg.in_channels, D, true, ct_);
    context_embedder_ =
        nn::load_linear(w, "context_embedder", cfg.joint_attention_dim, D, true, ct_);
  }
  const std::string te = "time_text_embed.";
  timestep_embedder_ =
      nn::MlpSilu(w, te + "timestep_embedder", FluxConfig::kTimeProjDim, D, D, ct_);
  if (cfg.guidance_embeds)
    guidance_embedder_ =
        nn::MlpSilu(w, te + "guidance_embedder", FluxConfig::kTimeProjDim, D, D, ct_);
  text_embedder_ = nn::MlpSilu(w, te + "text_embedder", cfg.pooled_projection_dim, D, D, ct_);
  for (int64_t i = stage_.block_begin; i < std::min(stage_.block_end, cfg.num_layers); ++i) {
    double_.push_back(std::make_unique<DoubleStreamBlock>(
        w, "transformer_blocks." + std::to_string(i),
        DoubleStreamNames{"norm1.linear", "norm1_context.linear", "attn", "ff", "ff_context"},
        joint, ct_, tp));
  }
  for (int64_t i = std::max(stage_.block_begin, cfg.num_layers) - cfg.num_layers;
       i < stage_.block_end - cfg.num_layers; ++i) {
    const std::string p = "single_transformer_blocks." + std::to_string(i);
    auto b = std::make_unique<SingleBlock>();
    b->mod = nn::load_linear(w, p + ".norm.linear", D, 3 * D, true, ct_);
    b->attn = nn::JointAttention(w, p + ".attn", single, ct_, tp);
    b->mlp = nn::SingleStreamMlp(w, p, D, D, 4 * D, ct_, tp);
    single_.push_back(std::move(b));
  }
  if (stage_.last) {
    norm_out_ = nn::AdaLayerNormContinuous(w, "norm_out", D, ct_);
    proj_out_ = nn::load_linear(w, "proj_out", D, cfg.in_channels, true, ct_);
  }
}

FluxTransformer::~FluxTransformer() = default;

nn::JointCall FluxTransformer::joint_call(int layer) const {
  nn::JointCall c;
  c.batch = geometry().batch;
  c.text = geometry().text;
  c.image = geometry().tokens();
  c.layer = layer;
  c.rope_cos = rope_cos_;
  c.rope_sin = rope_sin_;
  return c;
}

Streams FluxTransformer::embed(const DiTInputs& in) {
  const FluxConfig& c = cfg_;
  const Tensor *text = in.find(kText), *pooled = in.find(kPooled), *guidance = in.find(kGuidance);
  XDIT_CHECK(in.latents && text && pooled, "FLUX forward: latents, text and pooled needed");
  const Tensor& lat = *in.latents;
  const int64_t C = c.latent_channels();
  XDIT_CHECK(lat.ndim() == 4 && lat.dim(1) == C && lat.dim(2) % 2 == 0 && lat.dim(3) % 2 == 0,
             "FLUX latents must be [B, ", C, ", H, W] with H and W even, got ",
             shape_str(lat.shape()));
  const int64_t B = lat.dim(0), Hl = lat.dim(2), Wl = lat.dim(3), gh = Hl / 2, gw = Wl / 2;
  const int64_t D = c.hidden(), hd = c.attention_head_dim;
  const auto [r0, r1] = in.rows(gh);
  const int64_t N = (r1 - r0) * gw;  // the image tokens this call computes
  in.check_joint_text(B, c.joint_attention_dim, c.pooled_projection_dim, "FLUX");
  XDIT_CHECK(
      c.guidance_embeds ? guidance != nullptr && guidance->numel() == B : guidance == nullptr,
      c.guidance_embeds ? "this FLUX model embeds a guidance scale: one per batch item"
                        : "this FLUX model has no guidance embedding");
  const int64_t L = text->dim(1), S = L + N;
  set_geometry({B, L, r1 - r0, gw, Wl});

  // Conditioning vector: timestep (+ guidance) + pooled text, then SiLU once
  // for every AdaLN projection. The model multiplies the pipeline's t / 1000
  // by 1000 in the activations' dtype, which is f32 here in both compute
  // types (xdit's bf16 is the products' operand type, not the activations').
  const auto scaled = [](float v) { return v * 1000.0f; };
  std::vector<float> tv(static_cast<size_t>(B));  // host values: the table is made on the host
  float* proj = tproj_.get(static_cast<size_t>(B * FluxConfig::kTimeProjDim));
  float* temb = temb_.get(static_cast<size_t>(B * D));
  float* part = part_.get(static_cast<size_t>(B * D));
  for (int64_t b = 0; b < B; ++b)
    tv[static_cast<size_t>(b)] = scaled(in.timesteps[static_cast<size_t>(b)]);
  kernels::timestep_embedding(tv.data(), B, FluxConfig::kTimeProjDim, true, 0.0f, proj);
  timestep_embedder_.forward(proj, B, temb);
  if (c.guidance_embeds) {
    const std::vector<float> g = guidance->to_vector();
    for (int64_t b = 0; b < B; ++b) tv[static_cast<size_t>(b)] = scaled(g[static_cast<size_t>(b)]);
    kernels::timestep_embedding(tv.data(), B, FluxConfig::kTimeProjDim, true, 0.0f, proj);
    guidance_embedder_.forward(proj, B, part);
    kernels::gated_residual_add(temb, part, 1, 1, B * D, nullptr, 0);
  }
  text_embedder_.forward(pooled->data<float>(), B, part);
  kernels::gated_residual_add(temb, part, 1, 1, B * D, nullptr, 0);
  kernels::silu(temb, st_.get(static_cast<size_t>(B * D)), B * D);

  // Rotary tables [S, head_dim]: text positions 0, image (0, row, col) of the
  // global grid (nn/rope.h).
  rope_cos_host_.assign(static_cast<size_t>(S * hd), 0.0f);
  rope_sin_host_.assign(static_cast<size_t>(S * hd), 0.0f);
  for (int64_t s = 0; s < S; ++s) {
    const int64_t n = s - L + r0 * gw;  // the token's index in the whole grid
    const double pos[3] = {0.0, s < L ? 0.0 : static_cast<double>(n / gw),
                           s < L ? 0.0 : static_cast<double>(n % gw)};
    nn::rope_row(pos, c.axes_dims_rope, 10000.0, rope_cos_host_.data() + s * hd,
                 rope_sin_host_.data() + s * hd);
  }

  rope_cos_ = nn::on_current_device(rope_cos_host_, rope_cos_keep_);
  rope_sin_ = nn::on_current_device(rope_sin_host_, rope_sin_keep_);

  // Streams [B, L + N, D]: per batch item the embedded text, then the image tokens.
  if (!stage_.first) return {};  // the base takes the previous stage's
  Streams st;
  st.text = L;
  st.x = Tensor::empty({B, S, D}, DType::kF32, current_device());
  float* X = st.x.data<float>();
  float* packed = x_.get(static_cast<size_t>(B * N * 4 * C));  // [B, N, 4C]
  kernels::pack_2x2(lat.data<float>(), packed, B, C, Hl, Wl, r0, r1, true);
  float* emb = tmp_.get(static_cast<size_t>(B * N * D));
  x_embedder_.forward(packed, B * N, emb);
  for (int64_t b = 0; b < B; ++b)
    context_embedder_.forward(text->data<float>() + b * L * c.joint_attention_dim, L,
                              X + b * S * D);
  kernels::copy_rows(X + L * D, S * D, emb, N * D, B, N * D);
  return st;
}

void FluxTransformer::single_block(SingleBlock& blk, float* X, int layer) {
  const int64_t B = geometry().batch, S = geometry().text + geometry().tokens(), D = cfg_.hidden();
  float* mod = mod_.get(static_cast<size_t>(B * 12 * D));
  float* nh = n_.get(static_cast<size_t>(B * S * D));
  float* tmp = tmp_.get(static_cast<size_t>(B * S * D));
  float* ffh = ff_.get(static_cast<size_t>(B * S * 4 * D / stage_.tp.size));
  blk.mod.forward(st_.get(static_cast<size_t>(B * D)), B, mod);  // shift, scale, gate
  kernels::layer_norm_modulate(X, nh, B, S, D, kFluxEps, mod, mod + D, 3 * D);
  // Attention and MLP from the same input; proj_out over [attention | MLP].
  // diffusers' single_transformer_blocks.j.attn (pre_only): before proj_out.
  const float* att = nullptr;
  if (!attention_hooked()) {
    att = blk.attn.attend(nh, joint_call(layer), *backend_, attn_);
  } else {
    const int64_t n = B * S * blk.attn.width();
    float* kept = att_.get(static_cast<size_t>(n));
    attention_output(layer, 0, kept, n, [&] {
      kernels::copy_rows(kept, n, blk.attn.attend(nh, joint_call(layer), *backend_, attn_), n, 1,
                         n);
    });
    att = kept;
  }
  blk.mlp.forward(nh, att, B * S, tmp, ffh);
  kernels::gated_residual_add(X, tmp, B, S, D, mod + 2 * D, 3 * D);
}

void FluxTransformer::run_blocks(Streams& s, int64_t b0, int64_t b1) {
  const int64_t nl = cfg_.num_layers;
  for (int64_t bi = b0; bi < b1; ++bi) {
    if (bi < nl) {
      const int layer = static_cast<int>(bi);
      const DoubleStreamBlock& blk = *double_[static_cast<size_t>(bi - stage_.block_begin)];
      const int64_t n = geometry().batch * (geometry().text + geometry().tokens()) * cfg_.hidden();
      blk.forward(
          s.x.data<float>(), st_.get(static_cast<size_t>(geometry().batch * cfg_.hidden())),
          geometry().batch, geometry().text, geometry().tokens(),
          [&](const float* x, float* out) {
            // diffusers' transformer_blocks.i.attn: (image, text) after to_out / to_add_out.
            attention_output(layer, 0, out, n, [&] {
              blk.attention().forward(x, joint_call(layer), out, *backend_, attn_);
            });
          },
          mod_, n_, tmp_, ff_);
    } else
      single_block(*single_[static_cast<size_t>(bi - std::max(stage_.block_begin, nl))],
                   s.x.data<float>(), static_cast<int>(bi));
  }
}

Tensor FluxTransformer::block_modulated_input(int64_t b, const Streams& s) {
  const int64_t B = geometry().batch, L = geometry().text, N = geometry().tokens(), S = L + N,
                D = cfg_.hidden(), nl = cfg_.num_layers;
  // norm1 (a double block: shift, scale of the image stream's six) or norm
  // (a single block's three), over the image rows.
  const float* st = st_.get(static_cast<size_t>(B * D));
  Tensor m = Tensor::empty({B, N, D}, DType::kF32, current_device());
  if (b < nl) {
    double_[static_cast<size_t>(b - stage_.block_begin)]->modulated_image(
        s.x.data<float>(), st, B, L, N, m.data<float>(), mod_);
    return m;
  }
  float* mod = mod_.get(static_cast<size_t>(B * 12 * D));
  single_[static_cast<size_t>(b - std::max(stage_.block_begin, nl))]->mod.forward(st, B, mod);
  const int64_t stride = 3 * D;
  for (int64_t i = 0; i < B; ++i)
    kernels::layer_norm_modulate(s.x.data<float>() + (i * S + L) * D, m.data<float>() + i * N * D,
                                 1, N, D, kFluxEps, mod + i * stride, mod + i * stride + D, 0);
  return m;
}

Tensor FluxTransformer::finalize(const Streams& s) {
  XDIT_CHECK(stage_.last, "only the last pipeline stage has the output layer");
  const int64_t B = geometry().batch, L = geometry().text, N = geometry().tokens(), S = L + N,
                D = cfg_.hidden();
  const int64_t C = cfg_.latent_channels();
  XDIT_CHECK(s.x.numel() == B * S * D, "FLUX streams must be [", B, ", ", S, ", ", D, "]");
  // norm_out on the image rows (AdaLN-continuous: [scale, shift]), proj_out.
  return packed_output(norm_out_, proj_out_, st_.get(static_cast<size_t>(B * D)), s.x.data<float>(),
                       B, L, N, D, C, geometry().rows, geometry().width, n_, mod_, x_);
}

}  // namespace xdit::models
