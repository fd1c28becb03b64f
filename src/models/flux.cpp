#include "models/flux.h"

#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/kernels.h"

namespace xdit::models {

namespace {

constexpr float kEps = 1e-6f;  // every LayerNorm and RMSNorm of the model

// FluxPipeline's 2×2 packing: latents [B, C, H, W] ↔ [B, (H/2)·(W/2), 4C],
// channel c·4 + dy·2 + dx of patch (row, col). `pack` picks the direction.
void repack(const float* src, float* dst, int64_t B, int64_t C, int64_t H, int64_t W, bool pack) {
  const int64_t gw = W / 2, N = (H / 2) * gw;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t y = 0; y < H; ++y)
        for (int64_t x = 0; x < W; ++x) {
          const int64_t plain = ((b * C + ch) * H + y) * W + x;
          const int64_t packed =
              (b * N + (y / 2) * gw + x / 2) * 4 * C + ch * 4 + (y % 2) * 2 + x % 2;
          dst[pack ? packed : plain] = src[pack ? plain : packed];
        }
}

}  // namespace

struct FluxTransformer::DoubleBlock {
  kernels::Linear mod, mod_context;       // norm1 / norm1_context: silu(temb) → 6·D
  kernels::Linear qkv, qkv_context;       // to_q|to_k|to_v, add_q|add_k|add_v
  kernels::Linear out, out_context;       // to_out.0, to_add_out
  Tensor nq, nk, nq_context, nk_context;  // per-head RMSNorm weights
  nn::FeedForwardGelu ff, ff_context;
};

struct FluxTransformer::SingleBlock {
  kernels::Linear mod;  // norm.linear: silu(temb) → 3·D
  kernels::Linear qkv, mlp;
  // proj_out on [attention | MLP] as two products over its column blocks, so
  // the two never need concatenating and the MLP half stays bf16.
  kernels::Linear out_attn, out_mlp;
  Tensor nq, nk;
};

namespace {

// Columns [c0, c0 + n) of a [rows, cols] f32 matrix.
Tensor columns(const Tensor& w, int64_t c0, int64_t n) {
  const int64_t rows = w.dim(0), cols = w.dim(1);
  Tensor out = Tensor::empty({rows, n});
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data<float>() + r * n, w.data<float>() + r * cols + c0,
                static_cast<size_t>(n) * 4);
  return out;
}

}  // namespace

FluxTransformer::FluxTransformer(const FluxConfig& cfg, const io::WeightSource& w, DType compute)
    : cfg_(cfg), ct_(kernels::resolve_compute_type(compute)), backend_(&nn::serial_attention()) {
  const int64_t D = cfg.hidden(), hd = cfg.attention_head_dim;
  x_embedder_ = nn::load_linear(w, "x_embedder", cfg.in_channels, D, true, ct_);
  context_embedder_ = nn::load_linear(w, "context_embedder", cfg.joint_attention_dim, D, true, ct_);
  const std::string te = "time_text_embed.";
  timestep_embedder_ =
      nn::MlpSilu(w, te + "timestep_embedder", FluxConfig::kTimeProjDim, D, D, ct_);
  if (cfg.guidance_embeds)
    guidance_embedder_ =
        nn::MlpSilu(w, te + "guidance_embedder", FluxConfig::kTimeProjDim, D, D, ct_);
  text_embedder_ = nn::MlpSilu(w, te + "text_embedder", cfg.pooled_projection_dim, D, D, ct_);
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    const std::string p = "transformer_blocks." + std::to_string(i) + ".";
    const std::string a = p + "attn.";
    auto b = std::make_unique<DoubleBlock>();
    b->mod = nn::load_linear(w, p + "norm1.linear", D, 6 * D, true, ct_);
    b->mod_context = nn::load_linear(w, p + "norm1_context.linear", D, 6 * D, true, ct_);
    b->qkv =
        nn::load_fused_linear(w, {a + "to_q", a + "to_k", a + "to_v"}, D, {D, D, D}, true, ct_);
    b->qkv_context = nn::load_fused_linear(
        w, {a + "add_q_proj", a + "add_k_proj", a + "add_v_proj"}, D, {D, D, D}, true, ct_);
    b->out = nn::load_linear(w, a + "to_out.0", D, D, true, ct_);
    b->out_context = nn::load_linear(w, a + "to_add_out", D, D, true, ct_);
    b->nq = nn::load_param(w, a + "norm_q.weight", {hd});
    b->nk = nn::load_param(w, a + "norm_k.weight", {hd});
    b->nq_context = nn::load_param(w, a + "norm_added_q.weight", {hd});
    b->nk_context = nn::load_param(w, a + "norm_added_k.weight", {hd});
    b->ff = nn::FeedForwardGelu(w, p + "ff", D, 4 * D, ct_);
    b->ff_context = nn::FeedForwardGelu(w, p + "ff_context", D, 4 * D, ct_);
    double_.push_back(std::move(b));
  }
  for (int64_t i = 0; i < cfg.num_single_layers; ++i) {
    const std::string p = "single_transformer_blocks." + std::to_string(i) + ".";
    const std::string a = p + "attn.";
    auto b = std::make_unique<SingleBlock>();
    b->mod = nn::load_linear(w, p + "norm.linear", D, 3 * D, true, ct_);
    b->qkv =
        nn::load_fused_linear(w, {a + "to_q", a + "to_k", a + "to_v"}, D, {D, D, D}, true, ct_);
    b->mlp =
        nn::load_linear(w, p + "proj_mlp", D, 4 * D, true, ct_, kernels::Activation::kGeluTanh);
    const Tensor proj = nn::load_param(w, p + "proj_out.weight", {D, 5 * D});
    b->out_attn =
        kernels::Linear(columns(proj, 0, D), nn::load_param(w, p + "proj_out.bias", {D}), ct_);
    b->out_mlp = kernels::Linear(columns(proj, D, 4 * D), Tensor(), ct_);
    b->nq = nn::load_param(w, a + "norm_q.weight", {hd});
    b->nk = nn::load_param(w, a + "norm_k.weight", {hd});
    single_.push_back(std::move(b));
  }
  norm_out_ = nn::load_linear(w, "norm_out.linear", D, 2 * D, true, ct_);
  proj_out_ = nn::load_linear(w, "proj_out", D, cfg.in_channels, true, ct_);
}

FluxTransformer::~FluxTransformer() = default;

void FluxTransformer::norm_rope(float* qkv, int64_t batch, int64_t seq, int64_t row_begin,
                                int64_t rows, const Tensor& wq, const Tensor& wk) const {
  const int64_t D = cfg_.hidden(), H = cfg_.num_attention_heads, hd = cfg_.attention_head_dim;
#pragma omp parallel for collapse(2) if (batch * rows * D > (1 << 14))
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = row_begin; s < row_begin + rows; ++s) {
      float* row = qkv + (b * seq + s) * 3 * D;
      const float* cs = rope_cos_.data() + s * hd;
      const float* sn = rope_sin_.data() + s * hd;
      for (int part = 0; part < 2; ++part) {  // q, then k
        float* x = row + part * D;
        kernels::rms_norm(x, x, H, hd, kEps, (part == 0 ? wq : wk).data<float>());
        // (x0, x1) → (x0·cos − x1·sin, x1·cos + x0·sin) per interleaved pair,
        // each product rounded before the sum as torch computes it.
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < hd; i += 2) {
            float* p = x + h * hd + i;
            const float a = p[0] * cs[i], b0 = -p[1] * sn[i];
            const float c = p[1] * cs[i + 1], d = p[0] * sn[i + 1];
            p[0] = a + b0;
            p[1] = c + d;
          }
      }
    }
}

void FluxTransformer::attend(float* qkv, int64_t batch, int64_t seq, float* out, int64_t out_stride,
                             int layer) {
  const int64_t D = cfg_.hidden();
  kernels::AttentionArgs a;
  a.q = qkv;
  a.k = qkv + D;
  a.v = qkv + 2 * D;
  a.q_stride = a.k_stride = a.v_stride = 3 * D;
  a.out = out;
  a.out_stride = out_stride;
  a.batch = batch;
  a.heads = cfg_.num_attention_heads;
  a.q_len = a.kv_len = seq;
  a.head_dim = cfg_.attention_head_dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(cfg_.attention_head_dim));
  a.bf16 = ct_ == nn::ComputeType::kBF16;
  backend_->attend(a, {layer, false});
}

Tensor FluxTransformer::forward(const FluxInputs& in) {
  const FluxConfig& c = cfg_;
  XDIT_CHECK(in.latents && in.text && in.pooled, "FLUX forward: latents, text and pooled needed");
  const Tensor& lat = *in.latents;
  const int64_t C = c.latent_channels();
  XDIT_CHECK(lat.ndim() == 4 && lat.dim(1) == C && lat.dim(2) % 2 == 0 && lat.dim(3) % 2 == 0,
             "FLUX latents must be [B, ", C, ", H, W] with H and W even, got ",
             shape_str(lat.shape()));
  const int64_t B = lat.dim(0), Hl = lat.dim(2), Wl = lat.dim(3), gh = Hl / 2, gw = Wl / 2;
  const int64_t N = gh * gw, D = c.hidden(), hd = c.attention_head_dim;
  XDIT_CHECK(
      in.text->ndim() == 3 && in.text->dim(0) == B && in.text->dim(2) == c.joint_attention_dim,
      "FLUX text must be [", B, ", L, ", c.joint_attention_dim, "], got ",
      shape_str(in.text->shape()));
  XDIT_CHECK(in.pooled->ndim() == 2 && in.pooled->dim(0) == B &&
                 in.pooled->dim(1) == c.pooled_projection_dim,
             "FLUX pooled text must be [", B, ", ", c.pooled_projection_dim, "], got ",
             shape_str(in.pooled->shape()));
  XDIT_CHECK(static_cast<int64_t>(in.timesteps.size()) == B, "FLUX forward: ", B,
             " timesteps needed");
  XDIT_CHECK(
      c.guidance_embeds ? static_cast<int64_t>(in.guidance.size()) == B : in.guidance.empty(),
      c.guidance_embeds ? "this FLUX model embeds a guidance scale: one per batch item"
                        : "this FLUX model has no guidance embedding");
  const int64_t L = in.text->dim(1), S = L + N;

  // Packed latents [B, N, 4C].
  float* x = x_.get(static_cast<size_t>(B * N * 4 * C));
  repack(lat.data<float>(), x, B, C, Hl, Wl, true);

  // Conditioning vector: timestep (+ guidance) + pooled text, then SiLU once
  // for every AdaLN projection. The model multiplies the pipeline's t / 1000
  // by 1000 in the activations' dtype, which is f32 here in both compute
  // types (xdit's bf16 is the products' operand type, not the activations').
  const auto scaled = [](float v) { return v * 1000.0f; };
  std::vector<float> tv(static_cast<size_t>(B)),
      proj(static_cast<size_t>(B * FluxConfig::kTimeProjDim));
  std::vector<float> temb(static_cast<size_t>(B * D)), part(static_cast<size_t>(B * D));
  for (int64_t b = 0; b < B; ++b)
    tv[static_cast<size_t>(b)] = scaled(in.timesteps[static_cast<size_t>(b)]);
  kernels::timestep_embedding(tv.data(), B, FluxConfig::kTimeProjDim, true, 0.0f, proj.data());
  timestep_embedder_.forward(proj.data(), B, temb.data());
  if (c.guidance_embeds) {
    for (int64_t b = 0; b < B; ++b)
      tv[static_cast<size_t>(b)] = scaled(in.guidance[static_cast<size_t>(b)]);
    kernels::timestep_embedding(tv.data(), B, FluxConfig::kTimeProjDim, true, 0.0f, proj.data());
    guidance_embedder_.forward(proj.data(), B, part.data());
    for (size_t i = 0; i < temb.size(); ++i) temb[i] += part[i];
  }
  text_embedder_.forward(in.pooled->data<float>(), B, part.data());
  for (size_t i = 0; i < temb.size(); ++i) temb[i] += part[i];
  std::vector<float> st(temb.size());
  kernels::silu(temb.data(), st.data(), static_cast<int64_t>(st.size()));

  // Rotary tables [S, head_dim]: text positions 0, image (0, row, col); per
  // axis 1/θ^(2j/d) in f64, cos and sin in f64, rounded to f32, each value
  // repeated for its pair.
  rope_cos_.assign(static_cast<size_t>(S * hd), 0.0f);
  rope_sin_.assign(static_cast<size_t>(S * hd), 0.0f);
  for (int64_t s = 0; s < S; ++s) {
    const int64_t n = s - L;
    const double pos[3] = {0.0, n < 0 ? 0.0 : static_cast<double>(n / gw),
                           n < 0 ? 0.0 : static_cast<double>(n % gw)};
    int64_t off = 0;
    for (int ax = 0; ax < 3; ++ax) {
      const int64_t d = c.axes_dims_rope[static_cast<size_t>(ax)];
      for (int64_t jj = 0; jj < d / 2; ++jj) {
        const double freq =
            1.0 / std::pow(10000.0, static_cast<double>(2 * jj) / static_cast<double>(d));
        const double ang = pos[ax] * freq;
        const auto cv = static_cast<float>(std::cos(ang)), sv = static_cast<float>(std::sin(ang));
        for (int64_t r = 0; r < 2; ++r) {
          rope_cos_[static_cast<size_t>(s * hd + off + 2 * jj + r)] = cv;
          rope_sin_[static_cast<size_t>(s * hd + off + 2 * jj + r)] = sv;
        }
      }
      off += d;
    }
  }

  // Streams: image h [B, N, D], text cx [B, L, D].
  float* h = h_.get(static_cast<size_t>(B * N * D));
  float* cx = c_.get(static_cast<size_t>(B * L * D));
  x_embedder_.forward(x, B * N, h);
  context_embedder_.forward(in.text->data<float>(), B * L, cx);

  float* mod = mod_.get(static_cast<size_t>(B * 12 * D));
  float* nh = n_.get(static_cast<size_t>(B * S * D));
  float* qkv = qkv_.get(static_cast<size_t>(B * S * 3 * D));
  float* att = attn_.get(static_cast<size_t>(B * S * D));
  float* tmp = tmp_.get(static_cast<size_t>(B * S * D));
  float* ffh = ff_.get(static_cast<size_t>(B * S * 4 * D));
  int layer = 0;
  for (const auto& blk : double_) {
    float* mi = mod;              // image: shift, scale, gate (attention), shift, scale, gate (MLP)
    float* mc = mod + B * 6 * D;  // text, the same
    blk->mod.forward(st.data(), B, mi);
    blk->mod_context.forward(st.data(), B, mc);
    float* nc = nh + B * N * D;
    kernels::layer_norm_modulate(h, nh, B, N, D, kEps, mi, mi + D, 6 * D);
    kernels::layer_norm_modulate(cx, nc, B, L, D, kEps, mc, mc + D, 6 * D);
    // Joint q|k|v [B, S, 3D]: each batch item's text rows, then its image rows.
    for (int64_t b = 0; b < B; ++b) {
      blk->qkv_context.forward(nc + b * L * D, L, qkv + b * S * 3 * D);
      blk->qkv.forward(nh + b * N * D, N, qkv + (b * S + L) * 3 * D);
    }
    norm_rope(qkv, B, S, 0, L, blk->nq_context, blk->nk_context);
    norm_rope(qkv, B, S, L, N, blk->nq, blk->nk);
    attend(qkv, B, S, att, D, layer++);
    for (int64_t b = 0; b < B; ++b) {
      blk->out_context.forward(att + b * S * D, L, tmp + b * L * D);
      blk->out.forward(att + (b * S + L) * D, N, tmp + B * L * D + b * N * D);
    }
    kernels::gated_residual_add(cx, tmp, B, L, D, mc + 2 * D, 6 * D);
    kernels::gated_residual_add(h, tmp + B * L * D, B, N, D, mi + 2 * D, 6 * D);
    // MLPs: image, then text.
    kernels::layer_norm_modulate(h, nh, B, N, D, kEps, mi + 3 * D, mi + 4 * D, 6 * D);
    blk->ff.forward(nh, B * N, tmp, ffh);
    kernels::gated_residual_add(h, tmp, B, N, D, mi + 5 * D, 6 * D);
    kernels::layer_norm_modulate(cx, nc, B, L, D, kEps, mc + 3 * D, mc + 4 * D, 6 * D);
    blk->ff_context.forward(nc, B * L, tmp, ffh);
    kernels::gated_residual_add(cx, tmp, B, L, D, mc + 5 * D, 6 * D);
  }

  // Single stream: X [B, S, D], text rows first.
  float* X = cat_.get(static_cast<size_t>(B * S * D));
  for (int64_t b = 0; b < B; ++b) {
    std::memcpy(X + b * S * D, cx + b * L * D, static_cast<size_t>(L * D) * 4);
    std::memcpy(X + (b * S + L) * D, h + b * N * D, static_cast<size_t>(N * D) * 4);
  }
  for (const auto& blk : single_) {
    blk->mod.forward(st.data(), B, mod);  // shift, scale, gate
    kernels::layer_norm_modulate(X, nh, B, S, D, kEps, mod, mod + D, 3 * D);
    blk->qkv.forward(nh, B * S, qkv);
    norm_rope(qkv, B, S, 0, S, blk->nq, blk->nk);
    attend(qkv, B, S, att, D, layer++);
    // proj_out([attention | GELU(proj_mlp)]) = W_mlp·mlp + W_attn·attention + b.
    if (blk->mlp.is_bf16() && blk->out_mlp.is_bf16()) {
      auto* hb = reinterpret_cast<uint16_t*>(ffh);
      blk->mlp.forward_to_bf16(nh, B * S, hb);  // GELU(tanh) fused
      blk->out_mlp.forward_bf16(hb, B * S, tmp);
    } else {
      blk->mlp.forward(nh, B * S, ffh);
      blk->out_mlp.forward(ffh, B * S, tmp);
    }
    blk->out_attn.forward(att, B * S, tmp, /*accumulate=*/true);
    kernels::gated_residual_add(X, tmp, B, S, D, mod + 2 * D, 3 * D);
  }

  // norm_out on the image rows (AdaLN-continuous: [scale, shift]), proj_out.
  norm_out_.forward(st.data(), B, mod);
  for (int64_t b = 0; b < B; ++b)
    kernels::layer_norm_modulate(X + (b * S + L) * D, nh + b * N * D, 1, N, D, kEps,
                                 mod + b * 2 * D + D, mod + b * 2 * D, 0);
  float* packed = x;  // [B, N, 4C], where the packed input was
  proj_out_.forward(nh, B * N, packed);
  Tensor out = Tensor::empty({B, C, Hl, Wl});
  repack(packed, out.data<float>(), B, C, Hl, Wl, false);
  return out;
}

}  // namespace xdit::models
