// T5Config: text_encoder/config.json as transformers reads it, bounded and
// checked, and the weights it implies.
#include <cmath>

#include "core/error.h"
#include "models/t5.h"
#include "nn/weight_specs.h"

namespace xdit::models {

T5Config T5Config::from_json(const io::Json& j, const std::string& w) {
  io::require_object(j, w);
  // Bounds far beyond T5-XXL (d_model 4096, d_ff 10240, 24 layers, 64 heads).
  constexpr int64_t kSize = 1 << 12, kWide = 1 << 16;
  T5Config c;
  c.vocab_size = io::int_in(j, "vocab_size", c.vocab_size, 1, int64_t{1} << 22, w);
  c.d_model = io::int_in(j, "d_model", c.d_model, 1, kWide, w);
  c.d_kv = io::int_in(j, "d_kv", c.d_kv, 1, kSize, w);
  c.d_ff = io::int_in(j, "d_ff", c.d_ff, 1, kWide * 4, w);
  c.num_layers = io::int_in(j, "num_layers", c.num_layers, 1, kSize, w);
  c.num_heads = io::int_in(j, "num_heads", c.num_heads, 1, kSize, w);
  XDIT_CHECK(c.num_heads * c.d_kv <= kWide, w, ": num_heads x d_kv = ", c.num_heads * c.d_kv,
             " is larger than ", kWide);
  // The bucket formula (transformers T5Attention._relative_position_bucket)
  // halves the buckets, keeps half of those exact and divides by
  // log(max_distance / exact): it needs >= 4 buckets and a larger distance.
  c.relative_attention_num_buckets =
      io::int_in(j, "relative_attention_num_buckets", 32, 4, kSize, w);
  c.relative_attention_max_distance =
      io::int_in(j, "relative_attention_max_distance", 128,
                 c.relative_attention_num_buckets / 4 + 1, kWide, w);
  c.layer_norm_epsilon = io::number_or(j, "layer_norm_epsilon", 1e-6, w);
  XDIT_CHECK(c.layer_norm_epsilon >= 0, w, ": layer_norm_epsilon must be >= 0");
  const std::string ff = io::string_or(j, "feed_forward_proj", "relu", w);
  XDIT_CHECK(ff == "gated-gelu" || ff == "relu", w, ": feed_forward_proj \"", ff,
             "\" is not supported (gated-gelu or relu)");
  c.gated_gelu = ff == "gated-gelu";
  c.bias_per_block = io::string_or(j, "model_type", "t5", w) == "umt5";
  return c;
}

T5Config T5Config::xxl() {
  return T5Config{};
}

io::WeightSpecs T5Config::weight_specs(const std::string& embedding_name) const {
  const int64_t d = d_model, inner = num_heads * d_kv;
  io::WeightSpecs s;
  s.emplace_back(embedding_name, Shape{vocab_size, d});
  for (int64_t i = 0; i < num_layers; ++i) {
    const std::string p = "encoder.block." + std::to_string(i) + ".layer.";
    if (i == 0 || bias_per_block)
      s.emplace_back(p + "0.SelfAttention.relative_attention_bias.weight",
                     Shape{relative_attention_num_buckets, num_heads});
    s.emplace_back(p + "0.layer_norm.weight", Shape{d});
    s.emplace_back(p + "1.layer_norm.weight", Shape{d});
    const std::string sa = p + "0.SelfAttention.";
    for (const char* m : {"q", "k", "v"}) nn::linear_specs(s, sa + m, d, inner, false);
    nn::linear_specs(s, sa + "o", inner, d, false);
    const std::string ff = p + "1.DenseReluDense.";
    if (gated_gelu) {
      nn::linear_specs(s, ff + "wi_0", d, d_ff, false);
      nn::linear_specs(s, ff + "wi_1", d, d_ff, false);
    } else {
      nn::linear_specs(s, ff + "wi", d, d_ff, false);
    }
    nn::linear_specs(s, ff + "wo", d_ff, d, false);
  }
  s.emplace_back("encoder.final_layer_norm.weight", Shape{d});
  return s;
}

int64_t T5Config::parameter_count() const {
  return nn::parameter_count(weight_specs());
}

double T5Config::encoder_flops(int64_t batch, int64_t seq) const {
  const double m = static_cast<double>(batch * seq), inner = static_cast<double>(num_heads * d_kv);
  const double linear =
      2.0 * m * (4.0 * d_model * inner + (gated_gelu ? 3.0 : 2.0) * d_model * d_ff);
  const double attention = 4.0 * batch * static_cast<double>(seq) * seq * inner;
  return num_layers * (linear + attention);
}

int64_t t5_relative_bucket(int64_t rp, int64_t num_buckets, int64_t max_distance) {
  // transformers T5Attention._relative_position_bucket, bidirectional.
  num_buckets /= 2;
  int64_t bucket = rp > 0 ? num_buckets : 0;
  rp = rp < 0 ? -rp : rp;
  const int64_t max_exact = num_buckets / 2;
  if (rp < max_exact) return bucket + rp;
  // torch: log(float(rp) / max_exact) / log(max_distance / max_exact) * (nb − max_exact),
  // each step in f32 (the Python scalars become f32), truncated.
  const float a = std::log(static_cast<float>(rp) / static_cast<float>(max_exact));
  const float b = a / static_cast<float>(std::log(static_cast<double>(max_distance) /
                                                  static_cast<double>(max_exact)));
  const float c = b * static_cast<float>(num_buckets - max_exact);
  const int64_t large = std::min<int64_t>(max_exact + static_cast<int64_t>(c), num_buckets - 1);
  return bucket + large;
}

}  // namespace xdit::models
