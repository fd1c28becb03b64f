// WanConfig: transformer/config.json as diffusers reads it, bounded and
// checked, and the weights it implies.
#include "core/error.h"
#include "models/wan.h"
#include "nn/weight_specs.h"

namespace xdit::models {

WanConfig WanConfig::from_json(const io::Json& j, const std::string& w) {
  io::require_object(j, w);
  // Bounds far beyond Wan2.1-14B (40 heads x 128, 40 layers, ffn 13824).
  constexpr int64_t kSize = 1 << 12, kWide = 1 << 16;
  WanConfig c;
  const std::string cls = io::string_or(j, "_class_name", "WanTransformer3DModel", w);
  XDIT_CHECK(cls == "WanTransformer3DModel", w, ": transformer class ", cls,
             " is not supported (WanTransformer3DModel)");
  const auto patch = io::int_list_in(j, "patch_size", {1, 2, 2}, 3, 1, 64, w);
  XDIT_CHECK(patch.size() == 3, w, ": patch_size must hold 3 values (t, h, w)");
  c.patch_t = patch[0];
  c.patch_h = patch[1];
  c.patch_w = patch[2];
  XDIT_CHECK(c.patch_t == 1 && c.patch_h == c.patch_w, w, ": patch_size [", c.patch_t, ", ",
             c.patch_h, ", ", c.patch_w,
             "] is not supported (a temporal patch of 1 and a square spatial one, as Wan ships)");
  c.num_attention_heads = io::int_in(j, "num_attention_heads", 40, 1, kSize, w);
  c.attention_head_dim = io::int_in(j, "attention_head_dim", 128, 2, kSize, w);
  XDIT_CHECK(c.hidden() <= kWide, w, ": num_attention_heads x attention_head_dim = ", c.hidden(),
             " is larger than ", kWide);
  XDIT_CHECK(c.attention_head_dim % 2 == 0 && c.attention_head_dim >= 6, w, ": attention_head_dim ",
             c.attention_head_dim,
             " must be even and at least 6 (the rotary pairs over frames, rows and columns)");
  c.in_channels = io::int_in(j, "in_channels", 16, 1, kSize, w);
  c.out_channels = io::int_in(j, "out_channels", c.in_channels, 1, kSize, w);
  c.text_dim = io::int_in(j, "text_dim", 4096, 1, kWide, w);
  c.freq_dim = io::int_in(j, "freq_dim", 256, 2, kWide, w);
  XDIT_CHECK(c.freq_dim % 2 == 0, w, ": freq_dim must be even");
  c.ffn_dim = io::int_in(j, "ffn_dim", 13824, 1, kWide * 4, w);
  c.num_layers = io::int_in(j, "num_layers", 40, 1, kSize, w);
  c.cross_attn_norm = io::bool_or(j, "cross_attn_norm", true, w);
  c.eps = io::number_or(j, "eps", 1e-6, w);
  XDIT_CHECK(c.eps >= 0, w, ": eps must be >= 0");
  c.rope_max_seq_len = io::int_in(j, "rope_max_seq_len", 1024, 1, 1 << 20, w);
  const std::string qk = io::string_or(j, "qk_norm", "rms_norm_across_heads", w);
  XDIT_CHECK(qk == "rms_norm_across_heads", w, ": qk_norm \"", qk,
             "\" is not supported (rms_norm_across_heads)");
  for (const char* key : {"image_dim", "added_kv_proj_dim", "pos_embed_seq_len"})
    XDIT_CHECK(!j.contains(key) || j[key].is_null(), w, ": ", key,
               " is set: image-conditioned Wan (I2V) is not supported yet");
  return c;
}

WanConfig WanConfig::t2v_1_3b() {
  WanConfig c;
  c.num_attention_heads = 12;
  c.ffn_dim = 8960;
  c.num_layers = 30;
  return c;
}

std::vector<int64_t> WanConfig::rope_axes() const {
  const int64_t hw = 2 * (attention_head_dim / 6);
  return {attention_head_dim - 2 * hw, hw, hw};
}

io::WeightSpecs WanConfig::weight_specs(const DiTStage& stage) const {
  const int64_t d = hidden(), p = patch_h, inner = d;
  const int64_t end = stage.block_end < 0 ? num_layers : stage.block_end;
  io::WeightSpecs s;
  if (stage.first) {
    s.emplace_back("patch_embedding.weight", Shape{d, in_channels, patch_t, p, p});
    s.emplace_back("patch_embedding.bias", Shape{d});
  }
  nn::mlp_silu_specs(s, "condition_embedder.time_embedder", freq_dim, d, d);
  nn::linear_specs(s, "condition_embedder.time_proj", d, 6 * d, true);
  nn::linear_specs(s, "condition_embedder.text_embedder.linear_1", text_dim, d, true);
  nn::linear_specs(s, "condition_embedder.text_embedder.linear_2", d, d, true);
  for (int64_t i = stage.block_begin; i < end; ++i) {
    const std::string pre = "blocks." + std::to_string(i);
    s.emplace_back(pre + ".scale_shift_table", Shape{1, 6, d});
    for (const char* a : {".attn1", ".attn2"}) {
      nn::attention_specs(s, pre + a, d, num_attention_heads, attention_head_dim,
                          a[5] == '2' ? d : 0, true);
      s.emplace_back(pre + a + ".norm_q.weight", Shape{inner});
      s.emplace_back(pre + a + ".norm_k.weight", Shape{inner});
    }
    if (cross_attn_norm) {
      s.emplace_back(pre + ".norm2.weight", Shape{d});
      s.emplace_back(pre + ".norm2.bias", Shape{d});
    }
    nn::feed_forward_gelu_specs(s, pre + ".ffn", d, ffn_dim);
  }
  if (stage.last) {
    s.emplace_back("scale_shift_table", Shape{1, 2, d});
    nn::linear_specs(s, "proj_out", d, patch_t * p * p * out_channels, true);
  }
  return s;
}

int64_t WanConfig::parameter_count() const {
  return nn::parameter_count(weight_specs());
}

DiTSpec WanConfig::spec() const {
  DiTSpec s;
  s.blocks = num_layers;
  s.heads = num_attention_heads;
  s.hidden = hidden();
  s.latent_channels = in_channels;
  s.out_channels = out_channels;
  s.patch = patch_h;
  s.video = true;
  s.max_frames = s.max_patch_rows = s.max_patch_cols = rope_max_seq_len;
  return s;
}

}  // namespace xdit::models
