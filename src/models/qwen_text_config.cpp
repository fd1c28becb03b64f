// QwenTextConfig: a Qwen2 / Qwen2.5-VL / Qwen3 config.json as transformers
// reads it, bounded and checked, and the weights it implies.
#include "core/error.h"
#include "models/qwen_text.h"
#include "nn/weight_specs.h"

namespace xdit::models {

QwenTextConfig QwenTextConfig::from_json(const io::Json& top, const std::string& w) {
  io::require_object(top, w);
  const std::string type = io::string_or(top, "model_type", "", w);
  XDIT_CHECK(type == "qwen2" || type == "qwen3" || type == "qwen2_5_vl", w, ": model_type \"", type,
             "\" is not a Qwen2, Qwen2.5-VL or Qwen3 language model");
  // Qwen2.5-VL keeps the language model's sizes in text_config (older
  // files: at the top level too).
  const io::Json& j =
      top.contains("text_config") && top["text_config"].is_object() ? top["text_config"] : top;
  constexpr int64_t kSize = 1 << 12, kWide = 1 << 17;
  QwenTextConfig c;
  c.model_type = type;
  c.vocab_size = io::int_in(j, "vocab_size", c.vocab_size, 1, int64_t{1} << 22, w);
  c.hidden_size = io::int_in(j, "hidden_size", c.hidden_size, 1, kWide, w);
  c.intermediate_size = io::int_in(j, "intermediate_size", c.intermediate_size, 1, kWide * 4, w);
  c.num_layers = io::int_in(j, "num_hidden_layers", c.num_layers, 1, kSize, w);
  c.num_heads = io::int_in(j, "num_attention_heads", c.num_heads, 1, kSize, w);
  c.num_kv_heads = io::int_in(j, "num_key_value_heads", c.num_heads, 1, c.num_heads, w);
  XDIT_CHECK(c.num_heads % c.num_kv_heads == 0, w, ": num_attention_heads ", c.num_heads,
             " is not a multiple of num_key_value_heads ", c.num_kv_heads);
  const bool explicit_dim = j.contains("head_dim") && !j["head_dim"].is_null();
  XDIT_CHECK(explicit_dim || c.hidden_size % c.num_heads == 0, w, ": hidden_size ", c.hidden_size,
             " does not divide into ", c.num_heads, " heads");
  c.head_dim =
      explicit_dim ? io::int_in(j, "head_dim", 128, 2, kSize, w) : c.hidden_size / c.num_heads;
  XDIT_CHECK(c.head_dim % 2 == 0, w, ": head_dim ", c.head_dim, " must be even (RoPE halves)");
  c.rms_norm_eps = io::number_or(j, "rms_norm_eps", 1e-6, w);
  XDIT_CHECK(c.rms_norm_eps >= 0, w, ": rms_norm_eps must be >= 0");
  // transformers 5 writes rope_parameters.rope_theta; earlier files rope_theta.
  const io::Json* rope = j.contains("rope_parameters") && j["rope_parameters"].is_object()
                             ? &j["rope_parameters"]
                             : nullptr;
  c.rope_theta = io::number_or(rope != nullptr ? *rope : j, "rope_theta",
                               io::number_or(j, "rope_theta", 1000000.0, w), w);
  XDIT_CHECK(c.rope_theta > 1, w, ": rope_theta must be > 1");
  // Qwen2.5-VL's multimodal RoPE: sections of the frequencies for the
  // (time, row, column) positions, which a text-only prompt makes equal —
  // the 1-D RoPE, provided the sections cover the head's frequencies.
  const io::Json* scaling = rope != nullptr ? rope
                            : j.contains("rope_scaling") && j["rope_scaling"].is_object()
                                ? &j["rope_scaling"]
                                : nullptr;
  if (scaling != nullptr && scaling->contains("mrope_section")) {
    int64_t sum = 0;
    for (const int64_t v : io::int_list_in(*scaling, "mrope_section", {}, 8, 0, kSize, w)) sum += v;
    XDIT_CHECK(sum == c.head_dim / 2, w, ": mrope_section covers ", sum, " frequencies, head_dim ",
               c.head_dim, " has ", c.head_dim / 2);
  }
  const std::string act = io::string_or(j, "hidden_act", "silu", w);
  XDIT_CHECK(act == "silu", w, ": hidden_act \"", act, "\" is not supported (silu)");
  c.qk_norm = type == "qwen3";
  c.qkv_bias = type == "qwen3" ? io::bool_or(j, "attention_bias", false, w) : true;
  return c;
}

QwenTextConfig QwenTextConfig::qwen2_5_vl_7b() {
  QwenTextConfig c;
  c.model_type = "qwen2_5_vl";
  c.vocab_size = 152064;
  return c;
}

QwenTextConfig QwenTextConfig::qwen3_4b() {
  QwenTextConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 151936;
  c.hidden_size = 2560;
  c.intermediate_size = 9728;
  c.num_layers = 36;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.qkv_bias = false;
  c.qk_norm = true;
  return c;
}

io::WeightSpecs QwenTextConfig::weight_specs(int64_t layers) const {
  const int64_t d = hidden_size, q = num_heads * head_dim, kv = num_kv_heads * head_dim;
  io::WeightSpecs s;
  s.emplace_back(prefix + "embed_tokens.weight", Shape{vocab_size, d});
  const int64_t n = layers < 0 ? num_layers : layers;
  for (int64_t i = 0; i < n; ++i) {
    const std::string p = prefix + "layers." + std::to_string(i) + ".";
    s.emplace_back(p + "input_layernorm.weight", Shape{d});
    s.emplace_back(p + "post_attention_layernorm.weight", Shape{d});
    nn::linear_specs(s, p + "self_attn.q_proj", d, q, qkv_bias);
    nn::linear_specs(s, p + "self_attn.k_proj", d, kv, qkv_bias);
    nn::linear_specs(s, p + "self_attn.v_proj", d, kv, qkv_bias);
    nn::linear_specs(s, p + "self_attn.o_proj", q, d, false);
    if (qk_norm) {
      s.emplace_back(p + "self_attn.q_norm.weight", Shape{head_dim});
      s.emplace_back(p + "self_attn.k_norm.weight", Shape{head_dim});
    }
    nn::linear_specs(s, p + "mlp.gate_proj", d, intermediate_size, false);
    nn::linear_specs(s, p + "mlp.up_proj", d, intermediate_size, false);
    nn::linear_specs(s, p + "mlp.down_proj", intermediate_size, d, false);
  }
  s.emplace_back(prefix + "norm.weight", Shape{d});
  return s;
}

int64_t QwenTextConfig::parameter_count() const {
  int64_t n = 0;
  for (const auto& [name, shape] : weight_specs()) n += shape_numel(shape);
  return n;
}

double QwenTextConfig::flops(int64_t batch, int64_t seq, int64_t layers) const {
  const double M = static_cast<double>(batch * seq), S = static_cast<double>(seq);
  const double d = static_cast<double>(hidden_size), q = static_cast<double>(num_heads * head_dim),
               kv = static_cast<double>(num_kv_heads * head_dim),
               f = static_cast<double>(intermediate_size);
  const double per_layer = 2.0 * M * d * (q + 2 * kv) + 4.0 * M * S * q + 2.0 * M * q * d +
                           2.0 * M * d * 2 * f + 2.0 * M * f * d;
  return per_layer * static_cast<double>(layers);
}

}  // namespace xdit::models
