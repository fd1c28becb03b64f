#include "models/zimage.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/kernels.h"
#include "nn/rope.h"

namespace xdit::models {

namespace {

constexpr float kQkEps = 1e-5f;     // diffusers' Attention(qk_norm="rms_norm", eps=1e-5)
constexpr float kFinalEps = 1e-6f;  // the final layer's LayerNorm

}  // namespace

struct ZImageTransformer::Block {
  kernels::Linear mod;  // adaLN_modulation.0: c → [scale_msa | gate_msa | scale_mlp | gate_mlp]
  bool modulated = false;
  nn::JointAttention attn;  // one to_q | to_k | to_v over every token, q/k RMSNorm, RoPE
  Tensor norm1, norm2, ffn_norm1, ffn_norm2;  // attention_norm1/2, ffn_norm1/2
  nn::FeedForwardSwiGlu ff;                   // w2(silu(w1 x) · w3 x)
};

ZImageTransformer::ZImageTransformer(const ZImageConfig& cfg, const io::WeightSource& w,
                                     DType compute, DiTStage stage)
    : DiT(stage, cfg.blocks()), cfg_(cfg), ct_(kernels::resolve_compute_type(compute)) {
  const nn::LoadStaging staging;
  const int64_t D = cfg.dim, A = cfg.adaln_dim(), pix = cfg.patch * cfg.patch * cfg.in_channels;
  const nn::TensorParallel& tp = stage_.tp;
  tp.part(cfg.n_heads, "attention heads of the Z-Image transformer");  // checked first
  nn::JointAttentionConfig joint;
  joint.dim = D;
  joint.heads = cfg.n_heads;
  joint.head_dim = cfg.head_dim();
  joint.context = false;
  joint.qk_norm = true;
  joint.qk_eps = kQkEps;
  joint.bias = false;
  const auto load_block = [&](const std::string& p, bool modulated) {
    auto b = std::make_unique<Block>();
    b->modulated = modulated;
    if (modulated) b->mod = nn::load_linear(w, p + ".adaLN_modulation.0", A, 4 * D, true, ct_);
    b->attn = nn::JointAttention(w, p + ".attention", joint, ct_, tp);
    b->norm1 = nn::load_param(w, p + ".attention_norm1.weight", {D});
    b->norm2 = nn::load_param(w, p + ".attention_norm2.weight", {D});
    b->ffn_norm1 = nn::load_param(w, p + ".ffn_norm1.weight", {D});
    b->ffn_norm2 = nn::load_param(w, p + ".ffn_norm2.weight", {D});
    const std::string f = p + ".feed_forward.";
    b->ff = nn::FeedForwardSwiGlu(w, f + "w1", f + "w3", f + "w2", D, cfg.ffn_dim(), ct_, tp);
    return b;
  };
  const std::string ps = std::to_string(cfg.patch) + "-" + std::to_string(cfg.frame_patch);
  t_mlp0_ = nn::load_linear(w, "t_embedder.mlp.0", ZImageConfig::kAdaLnMax,
                            ZImageConfig::kTimeHidden, true, ct_);
  t_mlp2_ = nn::load_linear(w, "t_embedder.mlp.2", ZImageConfig::kTimeHidden, A, true, ct_);
  if (stage_.first) {
    x_embedder_ = nn::load_linear(w, "all_x_embedder." + ps, pix, D, true, ct_);
    cap_norm_ = nn::load_param(w, "cap_embedder.0.weight", {cfg.cap_feat_dim});
    cap_embedder_ = nn::load_linear(w, "cap_embedder.1", cfg.cap_feat_dim, D, true, ct_);
    x_pad_ = nn::load_param(w, "x_pad_token", {1, D});
    cap_pad_ = nn::load_param(w, "cap_pad_token", {1, D});
    for (int64_t i = 0; i < cfg.n_refiner_layers; ++i)
      context_refiner_.push_back(load_block("context_refiner." + std::to_string(i), false));
  }
  for (int64_t i = stage_.block_begin; i < stage_.block_end; ++i)
    blocks_.push_back(load_block(i < cfg.n_refiner_layers
                                     ? "noise_refiner." + std::to_string(i)
                                     : "layers." + std::to_string(i - cfg.n_refiner_layers),
                                 true));
  if (stage_.last) {
    const std::string f = "all_final_layer." + ps;
    final_mod_ = nn::load_linear(w, f + ".adaLN_modulation.1", A, D, true, ct_);
    final_linear_ = nn::load_linear(w, f + ".linear", D, pix, true, ct_);
  }
}

ZImageTransformer::~ZImageTransformer() = default;

const ZImageTransformer::Block& ZImageTransformer::block(int64_t b) const {
  return *blocks_[static_cast<size_t>(b - stage_.block_begin)];
}

std::vector<int64_t> ZImageTransformer::caption_lengths(const DiTInputs& in, int64_t B,
                                                        int64_t L) const {
  std::vector<int64_t> len(static_cast<size_t>(B), L);
  const Tensor* mask = in.find(kTextMask);
  if (mask == nullptr) return len;
  XDIT_CHECK(mask->numel() == B * L, "Z-Image text_mask must be [", B, ", ", L, "], got ",
             shape_str(mask->shape()));
  const std::vector<float> m = mask->to_vector();
  for (int64_t b = 0; b < B; ++b) {
    const float* row = m.data() + b * L;
    const int64_t n = std::find(row, row + L, 0.0f) - row;
    XDIT_CHECK(std::all_of(row + n, row + L, [](float v) { return v == 0.0f; }),
               "Z-Image text_mask: item ", b, "'s caption is not a prefix of its tokens");
    XDIT_CHECK(n > 0, "Z-Image text_mask: item ", b, " has no caption tokens");
    len[static_cast<size_t>(b)] = n;
  }
  return len;
}

int64_t ZImageTransformer::stream_text_tokens(const DiTInputs& in) const {
  const Tensor* text = in.find(kText);
  if (text == nullptr || in.latents == nullptr) return 0;
  const Tensor& lat = *in.latents;
  const int64_t H = lat.dim(lat.ndim() - 2), W = lat.dim(lat.ndim() - 1);
  const int64_t tokens = (H / cfg_.patch) * (W / cfg_.patch);
  int64_t caption = 0;
  for (const int64_t n : caption_lengths(in, text->dim(0), text->dim(1)))
    caption = std::max(caption, ZImageConfig::padded(n));
  return caption + ZImageConfig::padded(tokens) - tokens;
}

void ZImageTransformer::run_block(const Block& blk, float* x, const nn::JointCall& call,
                                  nn::AttentionBackend& backend) {
  const int64_t B = call.batch, S = call.seq(), M = B * S, D = cfg_.dim;
  const auto eps = static_cast<float>(cfg_.norm_eps);
  float* n = n_.get(static_cast<size_t>(M * D));
  float* tmp = tmp_.get(static_cast<size_t>(M * D));
  float* ffh = ff_.get(static_cast<size_t>(M * 3 * blk.ff.inner()));
  const float* mod = nullptr;
  const float* zeros = zeros_.get(static_cast<size_t>(B * 4 * D));
  if (blk.modulated) {
    float* m = mod_.get(static_cast<size_t>(B * 4 * D));
    blk.mod.forward(c_.get(static_cast<size_t>(B * cfg_.adaln_dim())), B, m);
    for (int64_t b = 0; b < B; ++b) {  // the gates through tanh; the scales are 1 + s
      kernels::tanh(m + b * 4 * D + D, m + b * 4 * D + D, D);
      kernels::tanh(m + b * 4 * D + 3 * D, m + b * 4 * D + 3 * D, D);
    }
    mod = m;
  }
  // x += gate_msa · norm2(attention(norm1(x) · scale_msa))
  kernels::rms_norm(x, n, M, D, eps, blk.norm1.data<float>());
  if (mod != nullptr) kernels::modulate(n, n, B, S, D, zeros, mod, 4 * D);
  const auto attend = [&] { blk.attn.forward(n, call, tmp, backend, attn_); };
  if (call.layer >= 0)
    attention_output(call.layer, 0, tmp, M * D, attend);
  else
    attend();
  kernels::rms_norm(tmp, tmp, M, D, eps, blk.norm2.data<float>());
  kernels::gated_residual_add(x, tmp, B, S, D, mod != nullptr ? mod + D : nullptr, 4 * D);
  // x += gate_mlp · ffn_norm2(FF(ffn_norm1(x) · scale_mlp))
  kernels::rms_norm(x, n, M, D, eps, blk.ffn_norm1.data<float>());
  if (mod != nullptr) kernels::modulate(n, n, B, S, D, zeros, mod + 2 * D, 4 * D);
  blk.ff.forward(n, M, tmp, ffh);
  kernels::rms_norm(tmp, tmp, M, D, eps, blk.ffn_norm2.data<float>());
  kernels::gated_residual_add(x, tmp, B, S, D, mod != nullptr ? mod + 3 * D : nullptr, 4 * D);
}

Streams ZImageTransformer::embed(const DiTInputs& in) {
  const ZImageConfig& c = cfg_;
  const Tensor* text = in.find(kText);
  XDIT_CHECK(in.latents != nullptr && text != nullptr, "Z-Image forward: latents and text needed");
  const Tensor& lat = *in.latents;
  const int64_t C = c.in_channels, p = c.patch;
  XDIT_CHECK(lat.ndim() == 4 && lat.dim(1) == C && lat.dim(2) % p == 0 && lat.dim(3) % p == 0,
             "Z-Image latents must be [B, ", C, ", H, W] with H and W multiples of ", p, ", got ",
             shape_str(lat.shape()));
  const int64_t B = lat.dim(0), H = lat.dim(2), W = lat.dim(3), gh = H / p, gw = W / p;
  XDIT_CHECK(text->ndim() == 3 && text->dim(0) == B && text->dim(2) == c.cap_feat_dim,
             "Z-Image text must be [", B, ", L, ", c.cap_feat_dim, "], got ",
             shape_str(text->shape()));
  XDIT_CHECK(static_cast<int64_t>(in.timesteps.size()) == B, "Z-Image forward: ", B,
             " timesteps needed");
  const auto [r0, r1] = in.rows(gh);
  const int64_t L = text->dim(1), N = (r1 - r0) * gw, D = c.dim, hd = c.head_dim();
  XDIT_CHECK(gh <= c.axes_lens[1] && gw <= c.axes_lens[2], "Z-Image: a ", gh, " x ", gw,
             " token grid exceeds the RoPE's ", c.axes_lens[1], " x ", c.axes_lens[2]);
  const std::vector<int64_t> lengths = caption_lengths(in, B, L);
  std::vector<int64_t> cap_len(lengths.size());
  for (size_t b = 0; b < lengths.size(); ++b) cap_len[b] = ZImageConfig::padded(lengths[b]);
  const int64_t Lc = *std::max_element(cap_len.begin(), cap_len.end());
  // (the image's frame id is Lc + 1: a table row of axes_lens[0])
  XDIT_CHECK(Lc + 1 < c.axes_lens[0], "Z-Image: ", Lc, " caption tokens (padded) exceed the ",
             c.axes_lens[0] - 2, " the RoPE's axes_lens[0] allows");
  const int64_t P = ZImageConfig::padded(gh * gw) - gh * gw, T = Lc + P, S = T + N;
  set_geometry({B, T, r1 - r0, gw, W});

  // c = t_embedder(t · t_scale) [B, adaln]: [cos | sin] of 256, MLP with SiLU.
  const int64_t A = c.adaln_dim();
  std::vector<float> tv(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b)
    tv[static_cast<size_t>(b)] =
        in.timesteps[static_cast<size_t>(b)] * static_cast<float>(c.t_scale);
  float* proj =
      tproj_.get(static_cast<size_t>(B * (ZImageConfig::kAdaLnMax + ZImageConfig::kTimeHidden)));
  float* hidden = proj + B * ZImageConfig::kAdaLnMax;
  kernels::timestep_embedding(tv.data(), B, ZImageConfig::kAdaLnMax, true, 0.0f, proj);
  t_mlp0_.forward(proj, B, hidden);
  kernels::silu(hidden, hidden, B * ZImageConfig::kTimeHidden);
  float* cvec = c_.get(static_cast<size_t>(B * A));
  t_mlp2_.forward(hidden, B, cvec);
  kernels::silu(cvec, c_silu_.get(static_cast<size_t>(B * A)), B * A);
  kernels::zero_bytes(zeros_.get(static_cast<size_t>(B * 4 * D)),
                      static_cast<size_t>(B * 4 * D) * sizeof(float));

  // RoPE tables per item [B, S, hd]: caption (1 + i, 0, 0) (its padding past
  // the item's length: masked), pads (0, 0, 0), image (cap_len + 1, row, col);
  // the noise refiner's [B, P + N, hd] are the rows after the caption.
  const std::vector<int64_t>& dims = c.axes_dims;
  cos_host_.assign(static_cast<size_t>(B * S * hd), 0.0f);
  sin_host_.assign(cos_host_.size(), 0.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      double pos[3] = {0.0, 0.0, 0.0};
      if (s < cap_len[static_cast<size_t>(b)]) {
        pos[0] = static_cast<double>(1 + s);
      } else if (s >= T) {
        const int64_t n = s - T + r0 * gw;
        pos[0] = static_cast<double>(cap_len[static_cast<size_t>(b)] + 1);
        pos[1] = static_cast<double>(n / gw);
        pos[2] = static_cast<double>(n % gw);
      }
      const size_t at = static_cast<size_t>((b * S + s) * hd);
      nn::rope_row(pos, dims, c.rope_theta, cos_host_.data() + at, sin_host_.data() + at,
                   nn::RopeMath::kF32Angles);
    }
  rcos_host_.resize(static_cast<size_t>(B * (P + N) * hd));
  rsin_host_.resize(rcos_host_.size());
  for (int64_t b = 0; b < B; ++b) {
    const auto from = static_cast<std::ptrdiff_t>((b * S + Lc) * hd);
    const auto to = static_cast<std::ptrdiff_t>(b * (P + N) * hd);
    std::copy_n(cos_host_.begin() + from, (P + N) * hd, rcos_host_.begin() + to);
    std::copy_n(sin_host_.begin() + from, (P + N) * hd, rsin_host_.begin() + to);
  }
  cos_ = nn::on_current_device(cos_host_, cos_keep_);
  sin_ = nn::on_current_device(sin_host_, sin_keep_);
  rcos_ = nn::on_current_device(rcos_host_, rcos_keep_);
  rsin_ = nn::on_current_device(rsin_host_, rsin_keep_);
  // The text keys: an item's caption past its own length is padding.
  text_mask_.clear();
  if (std::any_of(cap_len.begin(), cap_len.end(), [&](int64_t n) { return n < Lc; })) {
    text_mask_.assign(static_cast<size_t>(B * T), 1);
    for (int64_t b = 0; b < B; ++b)
      std::fill(text_mask_.begin() + b * T + cap_len[static_cast<size_t>(b)],
                text_mask_.begin() + b * T + Lc, uint8_t{0});
  }
  cap_part_ = Lc;
  image_pads_ = P;

  if (!stage_.first) return {};  // the base takes the previous stage's
  Streams st;
  st.text = T;
  st.x = Tensor::empty({B, S, D}, DType::kF32, current_device());
  float* X = st.x.data<float>();
  // The caption: RMSNorm → linear over the item's tokens, pad tokens up to
  // Lc, then the context refiner over the item's padded caption alone.
  const auto eps = static_cast<float>(c.norm_eps);
  const int64_t F = c.cap_feat_dim;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = lengths[static_cast<size_t>(b)];
    float* item = X + b * S * D;
    float* normed = tmp_.get(static_cast<size_t>(n * F));  // (the refiner below resizes tmp_)
    kernels::rms_norm(text->data<float>() + b * L * F, normed, n, F, eps, cap_norm_.data<float>());
    cap_embedder_.forward(normed, n, item);
    for (int64_t i = n; i < Lc; ++i)
      kernels::copy_rows(item + i * D, D, cap_pad_.data<float>(), D, 1, D);
    for (int64_t i = Lc; i < T; ++i)
      kernels::copy_rows(item + i * D, D, x_pad_.data<float>(), D, 1, D);
    nn::JointCall call;
    call.batch = 1;
    call.image = cap_len[static_cast<size_t>(b)];
    call.layer = -1;  // local: every rank holds the whole caption
    call.rope_cos = cos_ + b * S * hd;
    call.rope_sin = sin_ + b * S * hd;
    for (const auto& blk : context_refiner_) run_block(*blk, item, call, nn::serial_attention());
  }
  // The image tokens of patch rows [r0, r1): (row, col, c) patches, embedded.
  const int64_t k = C * p * p, rows = r1 - r0;
  float* slab = slab_.get(static_cast<size_t>(B * C * rows * p * W));
  kernels::copy_rows(slab, rows * p * W, lat.data<float>() + r0 * p * W, H * W, B * C,
                     rows * p * W);
  float* cols = cols_.get(static_cast<size_t>(2 * B * N * k));
  kernels::patchify(slab, B, C, rows * p, W, p, cols);             // (c, i, j) per token
  kernels::nhwc_to_nchw(cols, B * N, C, p * p, cols + B * N * k);  // → (i, j, c)
  float* emb = n_.get(static_cast<size_t>(B * N * D));
  x_embedder_.forward(cols + B * N * k, B * N, emb);
  kernels::copy_rows(X + T * D, S * D, emb, N * D, B, N * D);
  return st;
}

void ZImageTransformer::run_blocks(Streams& s, int64_t b0, int64_t b1) {
  const int64_t B = geometry().batch, T = geometry().text, N = geometry().tokens(), S = T + N;
  const int64_t D = cfg_.dim, Lc = cap_part_, P = image_pads_;
  float* X = s.x.data<float>();
  for (int64_t bi = b0; bi < b1; ++bi) {
    nn::JointCall call;
    call.batch = B;
    call.image = N;
    call.layer = static_cast<int>(bi);
    call.rope_per_item = true;
    if (bi < cfg_.n_refiner_layers) {
      // The noise refiner: the image and its pads (the pads as the joint
      // attention's text), gathered from behind the caption and put back.
      float* g = gather_.get(static_cast<size_t>(B * (P + N) * D));
      kernels::copy_rows(g, (P + N) * D, X + Lc * D, S * D, B, (P + N) * D);
      call.text = P;
      call.rope_cos = rcos_;
      call.rope_sin = rsin_;
      run_block(block(bi), g, call, *backend_);
      kernels::copy_rows(X + Lc * D, S * D, g, (P + N) * D, B, (P + N) * D);
    } else {
      call.text = T;
      call.rope_cos = cos_;
      call.rope_sin = sin_;
      call.text_mask = text_mask_.empty() ? nullptr : text_mask_.data();
      run_block(block(bi), X, call, *backend_);
    }
  }
}

Tensor ZImageTransformer::block_modulated_input(int64_t b, const Streams& s) {
  const int64_t B = geometry().batch, T = geometry().text, N = geometry().tokens(), S = T + N,
                D = cfg_.dim;
  const Block& blk = block(b);
  float* mod = mod_.get(static_cast<size_t>(B * 4 * D));
  blk.mod.forward(c_.get(static_cast<size_t>(B * cfg_.adaln_dim())), B, mod);
  Tensor m = Tensor::empty({B, N, D}, DType::kF32, current_device());
  float* out = m.data<float>();
  for (int64_t i = 0; i < B; ++i)  // norm1(x) · (1 + scale_msa) of the image rows
    kernels::rms_norm(s.x.data<float>() + (i * S + T) * D, out + i * N * D, N, D,
                      static_cast<float>(cfg_.norm_eps), blk.norm1.data<float>());
  kernels::modulate(out, out, B, N, D, zeros_.get(static_cast<size_t>(B * 4 * D)), mod, 4 * D);
  return m;
}

Tensor ZImageTransformer::finalize(const Streams& s) {
  XDIT_CHECK(stage_.last, "only the last pipeline stage has the output layer");
  const int64_t B = geometry().batch, T = geometry().text, N = geometry().tokens(), S = T + N,
                D = cfg_.dim, C = cfg_.in_channels, p = cfg_.patch;
  XDIT_CHECK(s.x.numel() == B * S * D, "Z-Image streams must be [", B, ", ", S, ", ", D, "]");
  // LayerNorm (no affine) · (1 + linear(SiLU(c))) over the image rows, linear.
  float* scale = mod_.get(static_cast<size_t>(B * 4 * D));
  final_mod_.forward(c_silu_.get(static_cast<size_t>(B * cfg_.adaln_dim())), B, scale);
  float* n = n_.get(static_cast<size_t>(B * N * D));
  const float* zeros = zeros_.get(static_cast<size_t>(B * 4 * D));
  for (int64_t b = 0; b < B; ++b)
    kernels::layer_norm_modulate(s.x.data<float>() + (b * S + T) * D, n + b * N * D, 1, N, D,
                                 kFinalEps, zeros, scale + b * D, 0);
  float* patches = tmp_.get(static_cast<size_t>(B * N * p * p * C));
  final_linear_.forward(n, B * N, patches);
  Tensor out =
      Tensor::empty({B, C, geometry().rows * p, geometry().width}, DType::kF32, current_device());
  kernels::unpatchify(patches, B, C, geometry().rows, geometry().grid_width, p, out.data<float>());
  // ZImagePipeline steps with the output negated: negated here (exactly),
  // so that the loop and every parallel method take it as they take any.
  kernels::affine_div(out.data<float>(), out.data<float>(), out.numel(), -1.0f, 0.0f);
  return out;
}

}  // namespace xdit::models
