#include "models/qwen_text.h"

#include <cmath>

#include "core/error.h"
#include "core/log.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "nn/attention.h"

namespace xdit::models {

struct QwenTextEncoder::Layer {
  Tensor ln0, ln1, q_norm, k_norm;
  kernels::Linear qkv, gate_up;  // [q | k | v], [gate | up]: this rank's shares
  nn::RowParallelLinear o, down;
};

namespace {

// RMSNorm of each `width`-wide group of `x`'s rows ([rows, groups·width]
// within rows `stride` apart), in place, times w [width] (Qwen3's per-head
// q/k norm: in f32, as transformers' Qwen3RMSNorm).
void rms_groups(float* x, int64_t rows, int64_t stride, int64_t groups, int64_t width, float eps,
                const float* w) {
#pragma omp parallel for collapse(2)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      float* v = x + r * stride + g * width;
      float ss = 0;
      for (int64_t i = 0; i < width; ++i) ss += v[i] * v[i];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(width) + eps);
      for (int64_t i = 0; i < width; ++i) v[i] = w[i] * (v[i] * inv);
    }
}

// Rotary embedding of each head's two halves (transformers' rotate_half):
// x[i] → x[i]·cos − x[i + D/2]·sin, x[i + D/2] → x[i + D/2]·cos + x[i]·sin,
// at angle pos·θ^(−2i/D), pos the row's place in its sequence (row % seq).
void rope_halves(float* x, int64_t rows, int64_t stride, int64_t heads, int64_t D, int64_t seq,
                 const std::vector<float>& cos, const std::vector<float>& sin) {
  const int64_t half = D / 2;
#pragma omp parallel for collapse(2)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + r * stride + h * D;
      const float* c = cos.data() + (r % seq) * half;
      const float* s = sin.data() + (r % seq) * half;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        const float ac = a * c[i], bs = b * s[i], bc = b * c[i], as = a * s[i];
        v[i] = ac - bs;
        v[i + half] = bc + as;
      }
    }
}

}  // namespace

// (here, not in qwen_text_config.cpp: the config fuzzers link the configs alone)
void QwenTextConfig::locate(const io::WeightSource& w, const std::string& where) {
  for (const char* p : {"", "model.", "model.language_model."})
    if (w.has(std::string(p) + "embed_tokens.weight")) {
      prefix = p;
      return;
    }
  XDIT_FAIL(where,
            ": no embed_tokens.weight (nor model.embed_tokens.weight, "
            "model.language_model.embed_tokens.weight): not a Qwen language model's weights");
}

bool qwen_splits(const QwenTextConfig& c, int degree) {
  return degree > 0 && c.num_heads % degree == 0 && c.num_kv_heads % degree == 0 &&
         c.intermediate_size % degree == 0;
}

void check_qwen_tensor_parallel(const QwenTextConfig& c, int degree) {
  const std::string enc = " of the " + c.model_type + " text encoder";
  nn::check_divisible(c.num_heads, degree, "attention heads" + enc, "--tensor_parallel_degree");
  nn::check_divisible(c.num_kv_heads, degree,
                      "key/value heads (GQA groups of " +
                          std::to_string(c.num_heads / c.num_kv_heads) + " query heads)" + enc,
                      "--tensor_parallel_degree");
  nn::check_divisible(c.intermediate_size, degree, "feed-forward units" + enc,
                      "--tensor_parallel_degree");
}

QwenTextEncoder::QwenTextEncoder(const QwenTextConfig& cfg, const io::WeightSource& w,
                                 DType compute, int64_t layers, const nn::TensorParallel& tp,
                                 bool resident)
    : cfg_(cfg),
      ct_(kernels::resolve_compute_type(compute)),
      tp_(tp),
      layers_(layers < 0 ? cfg.num_layers : layers),
      heads_(tp.part(cfg.num_heads, "attention heads of the " + cfg.model_type + " text encoder")),
      kv_heads_(tp.part(cfg.num_kv_heads, "key/value heads (GQA groups of " +
                                              std::to_string(cfg.num_heads / cfg.num_kv_heads) +
                                              " query heads) of the " + cfg.model_type +
                                              " text encoder")),
      ffn_(tp.part(cfg.intermediate_size,
                   "feed-forward units of the " + cfg.model_type + " text encoder")) {
  XDIT_CHECK(layers_ >= 0 && layers_ <= cfg.num_layers, "the ", cfg.model_type,
             " text encoder has ", cfg.num_layers, " layers, asked for ", layers_);
  const std::string& p = cfg.prefix;
  embedding_ = w.get(p + "embed_tokens.weight", {cfg.vocab_size, cfg.hidden_size});
  final_norm_ = nn::load_param(w, p + "norm.weight", {cfg.hidden_size});
  if (!resident) {
    streamed_ = &w;
    return;
  }
  const nn::LoadStaging staging;
  for (int64_t i = 0; i < layers_; ++i) built_.push_back(load_layer(w, i));
}

QwenTextEncoder::~QwenTextEncoder() = default;

std::unique_ptr<QwenTextEncoder::Layer> QwenTextEncoder::load_layer(const io::WeightSource& w,
                                                                    int64_t i) const {
  const QwenTextConfig& c = cfg_;
  const int64_t d = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const std::string p = c.prefix + "layers." + std::to_string(i) + ".";
  auto l = std::make_unique<Layer>();
  l->ln0 = nn::load_param(w, p + "input_layernorm.weight", {d});
  l->ln1 = nn::load_param(w, p + "post_attention_layernorm.weight", {d});
  const std::string a = p + "self_attn.";
  l->qkv = nn::load_fused_linear(w, {a + "q_proj", a + "k_proj", a + "v_proj"}, d, {q, kv, kv},
                                 c.qkv_bias, ct_, tp_);
  l->o = nn::RowParallelLinear(w, a + "o_proj", q, d, false, ct_, tp_);
  if (c.qk_norm) {
    l->q_norm = nn::load_param(w, a + "q_norm.weight", {c.head_dim});
    l->k_norm = nn::load_param(w, a + "k_norm.weight", {c.head_dim});
  }
  const std::string m = p + "mlp.";
  l->gate_up = nn::load_fused_linear(w, {m + "gate_proj", m + "up_proj"}, d,
                                     {c.intermediate_size, c.intermediate_size}, false, ct_, tp_);
  l->down = nn::RowParallelLinear(w, m + "down_proj", c.intermediate_size, d, false, ct_, tp_);
  return l;
}

Tensor QwenTextEncoder::encode(const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask,
                               int64_t B, int64_t S, int64_t after, bool final_norm) {
  const QwenTextConfig& c = cfg_;
  const int64_t d = c.hidden_size, D = c.head_dim, H = heads_, KV = kv_heads_, M = B * S;
  const int64_t group = H / KV, width = (H + 2 * KV) * D;
  XDIT_CHECK(static_cast<int64_t>(ids.size()) == M && static_cast<int64_t>(mask.size()) == M,
             c.model_type, " encode: ids and mask must hold batch x seq values");
  XDIT_CHECK(after >= 0 && after <= layers_, c.model_type, " encode: the states after ", after,
             " layers, of the ", layers_, " built");
  float* h = h_.get(static_cast<size_t>(M * d));
  const size_t row_bytes = static_cast<size_t>(d) * dtype_size(embedding_.dtype());
  for (int64_t t = 0; t < M; ++t) {
    const int32_t id = ids[static_cast<size_t>(t)];
    XDIT_CHECK(id >= 0 && id < c.vocab_size, "token id ", id, " is outside the ", c.model_type,
               " vocabulary of ", c.vocab_size);
    convert_to_f32(static_cast<const char*>(embedding_.raw()) + static_cast<size_t>(id) * row_bytes,
                   embedding_.dtype(), h + t * d, static_cast<size_t>(d));
  }
  // RoPE tables [S, D/2] as transformers makes them in f32: inv_freq =
  // 1 / θ^(2i/D), angle = pos · inv_freq.
  std::vector<float> cos(static_cast<size_t>(S * D / 2)), sin(cos.size());
  for (int64_t i = 0; i < D / 2; ++i) {
    const float inv =
        1.0f /
        static_cast<float>(std::pow(
            c.rope_theta, static_cast<double>(static_cast<float>(2 * i) / static_cast<float>(D))));
    for (int64_t s = 0; s < S; ++s) {
      const float angle = static_cast<float>(s) * inv;
      cos[static_cast<size_t>(s * D / 2 + i)] = std::cos(angle);
      sin[static_cast<size_t>(s * D / 2 + i)] = std::sin(angle);
    }
  }
  // The causal mask as an additive bias [H, S, S] (the padding's through key_mask).
  std::vector<float> causal(static_cast<size_t>(H * S * S), 0.0f);
  for (int64_t hh = 0; hh < H; ++hh)
    for (int64_t q = 0; q < S; ++q)
      for (int64_t k = q + 1; k < S; ++k)
        causal[static_cast<size_t>((hh * S + q) * S + k)] = -1e30f;
  const float eps = static_cast<float>(c.rms_norm_eps);
  float* n = n_.get(static_cast<size_t>(M * d));
  float* qkv = qkv_.get(static_cast<size_t>(M * width));
  float* fused = fused_.get(static_cast<size_t>(M * 3 * H * D));
  float* attn = attn_.get(static_cast<size_t>(M * H * D));
  float* ff = ff_.get(static_cast<size_t>(M * 2 * ffn_));
  float* ff2 = ff2_.get(static_cast<size_t>(M * ffn_));
  for (int64_t i = 0; i < after; ++i) {
    std::unique_ptr<Layer> streamed;
    if (streamed_ != nullptr) {
      const nn::LoadStaging staging;
      streamed = load_layer(*streamed_, i);
    }
    const Layer& l = streamed ? *streamed : *built_[static_cast<size_t>(i)];
    kernels::rms_norm(h, n, M, d, eps, l.ln0.data<float>());
    l.qkv.forward(n, M, qkv);
    if (c.qk_norm) {
      rms_groups(qkv, M, width, H, D, eps, l.q_norm.data<float>());
      rms_groups(qkv + H * D, M, width, KV, D, eps, l.k_norm.data<float>());
    }
    rope_halves(qkv, M, width, H + KV, D, S, cos, sin);  // q and k heads
    // [q | k | v] per query head: each key/value head serves its group.
#pragma omp parallel for
    for (int64_t r = 0; r < M; ++r) {
      const float* src = qkv + r * width;
      float* dst = fused + r * 3 * H * D;
      std::copy_n(src, H * D, dst);
      for (int64_t hh = 0; hh < H; ++hh) {
        std::copy_n(src + (H + hh / group) * D, D, dst + (H + hh) * D);
        std::copy_n(src + (H + KV + hh / group) * D, D, dst + (2 * H + hh) * D);
      }
    }
    kernels::AttentionArgs a =
        nn::fused_qkv_args(fused, B, S, H, D, attn, H * D, ct_ == nn::ComputeType::kBF16);
    a.scale = 1.0f / std::sqrt(static_cast<float>(D));
    a.key_mask = mask.data();
    a.bias = causal.data();
    kernels::attention(a);
    l.o.forward_add(attn, M, h, tmp_);  // h += o(attn)
    kernels::rms_norm(h, n, M, d, eps, l.ln1.data<float>());
    l.gate_up.forward(n, M, ff);
    kernels::silu_gate(ff, ff2, M, ffn_);  // SwiGLU: silu(gate) · up
    l.down.forward_add(ff2, M, h, tmp_);   // h += down(ff)
  }
  Tensor out = Tensor::empty({B, S, d});
  if (final_norm)
    kernels::rms_norm(h, out.data<float>(), M, d, eps, final_norm_.data<float>());
  else
    std::copy_n(h, M * d, out.data<float>());
  return out;
}

}  // namespace xdit::models
