// ClipTextConfig: a CLIP text encoder's config.json as transformers reads it,
// bounded and checked, and the weights it implies.
#include "core/error.h"
#include "models/clip.h"
#include "nn/weight_specs.h"

namespace xdit::models {

ClipTextConfig ClipTextConfig::from_json(const io::Json& root, const std::string& w) {
  io::require_object(root, w);
  // A full CLIPConfig (vision + text) keeps the text model's keys in text_config.
  const io::Json& j =
      root.contains("text_config") && root["text_config"].is_object() ? root["text_config"] : root;
  // Bounds far beyond CLIP-G (hidden 1280, MLP 5120, 32 layers, 20 heads).
  constexpr int64_t kSize = 1 << 12, kWide = 1 << 16;
  ClipTextConfig c;
  c.vocab_size = io::int_in(j, "vocab_size", c.vocab_size, 1, int64_t{1} << 22, w);
  c.hidden_size = io::int_in(j, "hidden_size", 512, 1, kWide, w);
  c.intermediate_size = io::int_in(j, "intermediate_size", 2048, 1, kWide * 4, w);
  c.num_hidden_layers = io::int_in(j, "num_hidden_layers", 12, 1, kSize, w);
  c.num_attention_heads = io::int_in(j, "num_attention_heads", 8, 1, kSize, w);
  c.max_position_embeddings = io::int_in(j, "max_position_embeddings", 77, 1, kWide, w);
  c.eos_token_id = io::int_in(j, "eos_token_id", 2, 0, c.vocab_size - 1, w);
  c.layer_norm_eps = io::number_or(j, "layer_norm_eps", 1e-5, w);
  XDIT_CHECK(c.layer_norm_eps >= 0, w, ": layer_norm_eps must be >= 0");
  c.hidden_act = io::string_or(j, "hidden_act", "quick_gelu", w);
  XDIT_CHECK(c.hidden_act == "quick_gelu" || c.hidden_act == "gelu", w, ": hidden_act \"",
             c.hidden_act, "\" is not supported (quick_gelu or gelu)");
  XDIT_CHECK(c.hidden_size % c.num_attention_heads == 0, w, ": hidden_size ", c.hidden_size,
             " is not divisible by num_attention_heads ", c.num_attention_heads);
  bool projection = false;
  if (root.contains("architectures") && root["architectures"].is_array())
    for (const auto& a : root["architectures"])
      if (a.is_string() && a.get<std::string>() == "CLIPTextModelWithProjection") projection = true;
  if (projection) c.projection_dim = io::int_in(j, "projection_dim", 512, 1, kWide, w);
  return c;
}

io::WeightSpecs ClipTextConfig::weight_specs(const std::string& prefix) const {
  const int64_t d = hidden_size;
  io::WeightSpecs s;
  const std::string p = prefix;
  s.emplace_back(p + "embeddings.token_embedding.weight", Shape{vocab_size, d});
  s.emplace_back(p + "embeddings.position_embedding.weight", Shape{max_position_embeddings, d});
  for (int64_t i = 0; i < num_hidden_layers; ++i) {
    const std::string l = p + "encoder.layers." + std::to_string(i) + ".";
    for (const char* ln : {"layer_norm1", "layer_norm2"}) {
      s.emplace_back(l + ln + ".weight", Shape{d});
      s.emplace_back(l + ln + ".bias", Shape{d});
    }
    for (const char* m : {"q_proj", "k_proj", "v_proj", "out_proj"})
      nn::linear_specs(s, l + "self_attn." + m, d, d, true);
    nn::linear_specs(s, l + "mlp.fc1", d, intermediate_size, true);
    nn::linear_specs(s, l + "mlp.fc2", intermediate_size, d, true);
  }
  s.emplace_back(p + "final_layer_norm.weight", Shape{d});
  s.emplace_back(p + "final_layer_norm.bias", Shape{d});
  if (projection_dim > 0) nn::linear_specs(s, "text_projection", d, projection_dim, false);
  return s;
}

int64_t ClipTextConfig::parameter_count() const {
  return nn::parameter_count(weight_specs());
}

}  // namespace xdit::models
