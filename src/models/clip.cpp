#include "models/clip.h"

#include <cmath>

#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "nn/attention.h"

namespace xdit::models {

struct ClipTextEncoder::Layer {
  Tensor ln1_w, ln1_b, ln2_w, ln2_b;
  kernels::Linear qkv, out, fc1, fc2;
};

ClipTextEncoder::ClipTextEncoder(const ClipTextConfig& cfg, const io::WeightSource& w,
                                 DType compute)
    : cfg_(cfg), ct_(kernels::resolve_compute_type(compute)) {
  const nn::LoadStaging staging;
  const int64_t d = cfg.hidden_size;
  // transformers saves CLIPTextModel with or without the "text_model." prefix.
  const std::string p = w.has("text_model.embeddings.token_embedding.weight") ? "text_model." : "";
  // The embedding tables stay on the host: rows are looked up there.
  token_embedding_ =
      w.get(p + "embeddings.token_embedding.weight", {cfg.vocab_size, d}).to(DType::kF32);
  position_embedding_ =
      w.get(p + "embeddings.position_embedding.weight", {cfg.max_position_embeddings, d})
          .to(DType::kF32);
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    const std::string l = p + "encoder.layers." + std::to_string(i) + ".";
    auto layer = std::make_unique<Layer>();
    layer->ln1_w = nn::load_param(w, l + "layer_norm1.weight", {d});
    layer->ln1_b = nn::load_param(w, l + "layer_norm1.bias", {d});
    layer->ln2_w = nn::load_param(w, l + "layer_norm2.weight", {d});
    layer->ln2_b = nn::load_param(w, l + "layer_norm2.bias", {d});
    const std::string a = l + "self_attn.";
    layer->qkv = nn::load_fused_linear(w, {a + "q_proj", a + "k_proj", a + "v_proj"}, d, {d, d, d},
                                       true, ct_);
    layer->out = nn::load_linear(w, a + "out_proj", d, d, true, ct_);
    layer->fc1 = nn::load_linear(w, l + "mlp.fc1", d, cfg.intermediate_size, true, ct_);
    layer->fc2 = nn::load_linear(w, l + "mlp.fc2", cfg.intermediate_size, d, true, ct_);
    layers_.push_back(std::move(layer));
  }
  final_ln_w_ = nn::load_param(w, p + "final_layer_norm.weight", {d});
  final_ln_b_ = nn::load_param(w, p + "final_layer_norm.bias", {d});
  if (cfg.projection_dim > 0)
    projection_ = nn::load_linear(w, "text_projection", d, cfg.projection_dim, false, ct_);
}

ClipTextEncoder::~ClipTextEncoder() = default;

ClipTextOutput ClipTextEncoder::encode(const std::vector<int32_t>& ids, int64_t B, int64_t S,
                                       int64_t hidden_state) {
  DeviceScope scope(device_);
  const ClipTextConfig& c = cfg_;
  const int64_t d = c.hidden_size, H = c.num_attention_heads, M = B * S;
  const auto L = static_cast<int64_t>(layers_.size());
  XDIT_CHECK(B >= 1 && S >= 1 && static_cast<int64_t>(ids.size()) == M,
             "CLIP encode: ids must hold batch x seq values");
  XDIT_CHECK(S <= c.max_position_embeddings, "CLIP encode: ", S, " tokens exceed the encoder's ",
             c.max_position_embeddings, " positions");
  const int64_t want = hidden_state == kNoHiddenState ? -1
                       : hidden_state < 0             ? L + 1 + hidden_state
                                                      : hidden_state;
  XDIT_CHECK(hidden_state == kNoHiddenState || (want >= 0 && want <= L), "CLIP hidden state ",
             hidden_state, " does not exist (the encoder has ", L, " layers: 0 … ", L,
             ", or -1 … -", L + 1, ")");

  ClipTextOutput out;
  out.last_hidden = Tensor::empty({B, S, d}, DType::kF32, current_device());
  float* h = out.last_hidden.data<float>();
  const float* tok = token_embedding_.data<float>();
  const float* pos = position_embedding_.data<float>();
  nn::HostRows staged(h, static_cast<size_t>(M * d));
  float* rows = staged.data();  // looked up on the host
  for (int64_t t = 0; t < M; ++t) {
    const int32_t id = ids[static_cast<size_t>(t)];
    XDIT_CHECK(id >= 0 && id < c.vocab_size, "token id ", id, " is outside the CLIP vocabulary of ",
               c.vocab_size);
    for (int64_t k = 0; k < d; ++k) rows[t * d + k] = tok[id * d + k] + pos[(t % S) * d + k];
  }
  staged.upload();
  const auto keep = [&](int64_t index) {
    if (index == want) out.hidden = out.last_hidden.clone();
  };
  keep(0);

  // The causal mask as an additive bias [H, S, S]: key k > query q is −∞.
  std::vector<float> causal(static_cast<size_t>(H * S * S), 0.0f);
  for (int64_t hh = 0; hh < H; ++hh)
    for (int64_t q = 0; q < S; ++q)
      for (int64_t k = q + 1; k < S; ++k)
        causal[static_cast<size_t>((hh * S + q) * S + k)] = -INFINITY;
  const float* causal_here = nn::on_current_device(causal, causal_keep_);
  const auto eps = static_cast<float>(c.layer_norm_eps);
  float* n = n_.get(static_cast<size_t>(M * d));
  float* qkv = qkv_.get(static_cast<size_t>(M * 3 * d));
  float* attn = attn_.get(static_cast<size_t>(M * d));
  float* ff = ff_.get(static_cast<size_t>(M * c.intermediate_size));
  for (int64_t i = 0; i < L; ++i) {
    const Layer& l = *layers_[static_cast<size_t>(i)];
    kernels::layer_norm(h, n, M, d, eps, l.ln1_w.data<float>(), l.ln1_b.data<float>());
    l.qkv.forward(n, M, qkv);
    kernels::AttentionArgs a =
        nn::fused_qkv_args(qkv, B, S, H, d / H, attn, d, ct_ == nn::ComputeType::kBF16);
    a.bias = causal_here;
    kernels::attention(a);
    l.out.forward(attn, M, h, /*accumulate=*/true);  // h += out_proj(attn)
    kernels::layer_norm(h, n, M, d, eps, l.ln2_w.data<float>(), l.ln2_b.data<float>());
    l.fc1.forward(n, M, ff);
    if (c.hidden_act == "gelu")
      kernels::gelu_erf(ff, ff, M * c.intermediate_size);
    else
      kernels::quick_gelu(ff, ff, M * c.intermediate_size);
    l.fc2.forward(ff, M, h, /*accumulate=*/true);  // h += fc2(act(fc1(ln2(h))))
    keep(i + 1);
  }
  kernels::layer_norm(h, h, M, d, eps, final_ln_w_.data<float>(), final_ln_b_.data<float>());

  // Pooled: the first EOS of each row (legacy configs: the largest id).
  Tensor pooled = Tensor::empty({B, d}, DType::kF32, current_device());
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* row = ids.data() + b * S;
    int64_t at = 0;
    for (int64_t t = 0; t < S; ++t) {
      if (c.eos_token_id == 2 ? row[t] > row[at] : row[t] == c.eos_token_id) {
        at = t;
        if (c.eos_token_id != 2) break;
      }
    }
    kernels::copy_rows(pooled.data<float>() + b * d, d, h + (b * S + at) * d, d, 1, d);
  }
  if (c.projection_dim > 0) {
    out.pooled = Tensor::empty({B, c.projection_dim}, DType::kF32, current_device());
    projection_.forward(pooled.data<float>(), B, out.pooled.data<float>());
  } else {
    out.pooled = std::move(pooled);
  }
  // The outputs on the host.
  out.last_hidden = out.last_hidden.to_device(Device{});
  out.pooled = out.pooled.to_device(Device{});
  if (out.hidden.defined()) out.hidden = out.hidden.to_device(Device{});
  return out;
}

}  // namespace xdit::models
