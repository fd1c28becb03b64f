#include "models/qwen_image.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/kernels.h"
#include "nn/joint_attention.h"
#include "nn/rope.h"

namespace xdit::models {

namespace {
constexpr float kTxtNormEps = 1e-6f;  // txt_norm: RMSNorm(joint_attention_dim, eps=1e-6)
}  // namespace

QwenImageTransformer::QwenImageTransformer(const QwenImageConfig& cfg, const io::WeightSource& w,
                                           DType compute, DiTStage stage)
    : DiT(stage, cfg.num_layers), cfg_(cfg), ct_(kernels::resolve_compute_type(compute)) {
  const nn::LoadStaging staging;
  const int64_t D = cfg.hidden();
  const nn::TensorParallel& tp = stage_.tp;
  tp.part(cfg.num_attention_heads, "attention heads of the Qwen-Image transformer");
  nn::JointAttentionConfig joint;
  joint.dim = D;
  joint.heads = cfg.num_attention_heads;
  joint.head_dim = cfg.attention_head_dim;
  joint.qk_norm = true;  // eps 1e-6, biases: FLUX's
  if (stage_.first) {
    img_in_ = nn::load_linear(w, "img_in", cfg.in_channels, D, true, ct_);
    txt_norm_ = nn::load_param(w, "txt_norm.weight", {cfg.joint_attention_dim});
    txt_in_ = nn::load_linear(w, "txt_in", cfg.joint_attention_dim, D, true, ct_);
  }
  timestep_embedder_ =
      nn::MlpSilu(w, "time_text_embed.timestep_embedder", QwenImageConfig::kTimeProjDim, D, D, ct_);
  for (int64_t i = stage_.block_begin; i < stage_.block_end; ++i)
    blocks_.push_back(std::make_unique<DoubleStreamBlock>(
        w, "transformer_blocks." + std::to_string(i),
        DoubleStreamNames{"img_mod.1", "txt_mod.1", "attn", "img_mlp", "txt_mlp"}, joint, ct_, tp));
  if (stage_.last) {
    norm_out_ = nn::AdaLayerNormContinuous(w, "norm_out", D, ct_);
    proj_out_ = nn::load_linear(w, "proj_out", D, 4 * cfg.out_channels, true, ct_);
  }
}

QwenImageTransformer::~QwenImageTransformer() = default;

Streams QwenImageTransformer::embed(const DiTInputs& in) {
  const QwenImageConfig& c = cfg_;
  const Tensor *text = in.find(kText), *mask = in.find(kTextMask);
  XDIT_CHECK(in.latents && text, "Qwen-Image forward: latents and text needed");
  const Tensor& lat = *in.latents;
  const int64_t C = c.out_channels;
  XDIT_CHECK(lat.ndim() == 4 && lat.dim(1) == C && lat.dim(2) % 2 == 0 && lat.dim(3) % 2 == 0,
             "Qwen-Image latents must be [B, ", C, ", H, W] with H and W even, got ",
             shape_str(lat.shape()));
  const int64_t B = lat.dim(0), Hl = lat.dim(2), Wl = lat.dim(3), gh = Hl / 2, gw = Wl / 2;
  XDIT_CHECK(text->ndim() == 3 && text->dim(0) == B && text->dim(2) == c.joint_attention_dim,
             "Qwen-Image text must be [", B, ", L, ", c.joint_attention_dim, "], got ",
             shape_str(text->shape()));
  XDIT_CHECK(static_cast<int64_t>(in.timesteps.size()) == B, "Qwen-Image forward: ", B,
             " timesteps needed");
  const int64_t D = c.hidden(), hd = c.attention_head_dim, L = text->dim(1);
  const auto [r0, r1] = in.rows(gh);
  const int64_t N = (r1 - r0) * gw, S = L + N;
  XDIT_CHECK(gh <= 8192 && gw <= 8192 && std::max(gh / 2, gw / 2) + L <= 4096, "Qwen-Image: a ", gh,
             " x ", gw, " token grid with ", L, " text tokens exceeds the RoPE's 4096 positions");
  set_geometry({B, L, r1 - r0, gw, Wl});

  // The text tokens that are keys; none masked: no mask at all.
  text_mask_.clear();
  if (mask != nullptr) {
    XDIT_CHECK(mask->numel() == B * L, "Qwen-Image text_mask must be [", B, ", ", L, "], got ",
               shape_str(mask->shape()));
    const std::vector<float> m = mask->to_vector();
    if (std::any_of(m.begin(), m.end(), [](float v) { return v == 0.0f; })) {
      text_mask_.resize(m.size());
      for (size_t i = 0; i < m.size(); ++i) text_mask_[i] = m[i] != 0.0f ? 1 : 0;
    }
  }

  // temb = TimestepEmbedding(sinusoid(1000 · t · freq)); SiLU once for every AdaLN.
  float* proj = tproj_.get(static_cast<size_t>(B * QwenImageConfig::kTimeProjDim));
  float* temb = temb_.get(static_cast<size_t>(B * D));
  kernels::timestep_embedding(in.timesteps.data(), B, QwenImageConfig::kTimeProjDim, true, 0.0f,
                              proj, 1000.0f);
  timestep_embedder_.forward(proj, B, temb);
  kernels::silu(temb, st_.get(static_cast<size_t>(B * D)), B * D);

  // MSRoPE [S, hd]: text i at (m + i) on all axes, m = max(gh/2, gw/2); image
  // (0, row − ⌈gh/2⌉, col − ⌈gw/2⌉) of the global grid.
  cos_host_.assign(static_cast<size_t>(S * hd), 0.0f);
  sin_host_.assign(cos_host_.size(), 0.0f);
  const int64_t m = std::max(gh / 2, gw / 2);
  for (int64_t s = 0; s < S; ++s) {
    double pos[3];
    if (s < L) {
      pos[0] = pos[1] = pos[2] = static_cast<double>(m + s);
    } else {
      const int64_t n = s - L + r0 * gw;
      pos[0] = 0.0;
      pos[1] = static_cast<double>(n / gw - (gh - gh / 2));
      pos[2] = static_cast<double>(n % gw - (gw - gw / 2));
    }
    nn::rope_row(pos, c.axes_dims_rope, 10000.0, cos_host_.data() + s * hd,
                 sin_host_.data() + s * hd, nn::RopeMath::kF32);
  }
  cos_ = nn::on_current_device(cos_host_, cos_keep_);
  sin_ = nn::on_current_device(sin_host_, sin_keep_);

  if (!stage_.first) return {};  // the base takes the previous stage's
  Streams st;
  st.text = L;
  st.x = Tensor::empty({B, S, D}, DType::kF32, current_device());
  float* X = st.x.data<float>();
  // The text: txt_norm, txt_in, per item into its rows.
  float* normed = tmp_.get(static_cast<size_t>(B * L * c.joint_attention_dim));
  kernels::rms_norm(text->data<float>(), normed, B * L, c.joint_attention_dim, kTxtNormEps,
                    txt_norm_.data<float>());
  for (int64_t b = 0; b < B; ++b)
    txt_in_.forward(normed + b * L * c.joint_attention_dim, L, X + b * S * D);
  // The image tokens of patch rows [r0, r1): the 2x2 packing, img_in.
  float* packed = x_.get(static_cast<size_t>(B * N * 4 * C));
  kernels::pack_2x2(lat.data<float>(), packed, B, C, Hl, Wl, r0, r1, true);
  float* emb = n_.get(static_cast<size_t>(B * N * D));
  img_in_.forward(packed, B * N, emb);
  kernels::copy_rows(X + L * D, S * D, emb, N * D, B, N * D);
  return st;
}

void QwenImageTransformer::run_blocks(Streams& s, int64_t b0, int64_t b1) {
  const int64_t B = geometry().batch, L = geometry().text, N = geometry().tokens(),
                D = cfg_.hidden();
  for (int64_t bi = b0; bi < b1; ++bi) {
    const int layer = static_cast<int>(bi);
    const DoubleStreamBlock& blk = *blocks_[static_cast<size_t>(bi - stage_.block_begin)];
    nn::JointCall call;
    call.batch = B;
    call.text = L;
    call.image = N;
    call.layer = layer;
    call.rope_cos = cos_;
    call.rope_sin = sin_;
    call.text_mask = text_mask_.empty() ? nullptr : text_mask_.data();
    blk.forward(
        s.x.data<float>(), st_.get(static_cast<size_t>(B * D)), B, L, N,
        [&](const float* x, float* out) {
          attention_output(layer, 0, out, B * (L + N) * D,
                           [&] { blk.attention().forward(x, call, out, *backend_, attn_); });
        },
        mod_, n_, tmp_, ff_);
  }
}

Tensor QwenImageTransformer::block_modulated_input(int64_t b, const Streams& s) {
  const int64_t B = geometry().batch, L = geometry().text, N = geometry().tokens(),
                D = cfg_.hidden();
  Tensor m = Tensor::empty({B, N, D}, DType::kF32, current_device());
  blocks_[static_cast<size_t>(b - stage_.block_begin)]->modulated_image(
      s.x.data<float>(), st_.get(static_cast<size_t>(B * D)), B, L, N, m.data<float>(), mod_);
  return m;
}

Tensor QwenImageTransformer::finalize(const Streams& s) {
  XDIT_CHECK(stage_.last, "only the last pipeline stage has the output layer");
  const int64_t B = geometry().batch, L = geometry().text, N = geometry().tokens(), S = L + N,
                D = cfg_.hidden(), C = cfg_.out_channels;
  XDIT_CHECK(s.x.numel() == B * S * D, "Qwen-Image streams must be [", B, ", ", S, ", ", D, "]");
  return packed_output(norm_out_, proj_out_, st_.get(static_cast<size_t>(B * D)), s.x.data<float>(),
                       B, L, N, D, C, geometry().rows, geometry().width, n_, mod_, x_);
}

}  // namespace xdit::models
