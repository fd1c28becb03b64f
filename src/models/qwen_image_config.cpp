// QwenImageConfig: transformer/config.json as diffusers reads it
// (QwenImageTransformer2DModel), bounded and checked, and the weights it implies.
#include "core/error.h"
#include "models/qwen_image.h"
#include "models/rope_axes.h"
#include "nn/weight_specs.h"

namespace xdit::models {

QwenImageConfig QwenImageConfig::from_json(const io::Json& j, const std::string& w) {
  io::require_object(j, w);
  constexpr int64_t kSize = 1 << 12, kWide = 1 << 16;
  QwenImageConfig c;
  const std::string cls = io::string_or(j, "_class_name", "QwenImageTransformer2DModel", w);
  XDIT_CHECK(cls == "QwenImageTransformer2DModel", w, ": transformer class ", cls,
             " is not QwenImageTransformer2DModel");
  const int64_t patch = io::int_in(j, "patch_size", 2, 1, kSize, w);
  XDIT_CHECK(patch == 2, w, ": patch_size ", patch, " is not supported (Qwen-Image packs 2x2)");
  c.in_channels = io::int_in(j, "in_channels", 64, 4, kWide, w);
  // (diffusers: absent → 16; null → in_channels)
  if (j.contains("out_channels") && j["out_channels"].is_null())
    c.out_channels = c.in_channels;
  else
    c.out_channels = io::int_in(j, "out_channels", 16, 1, kWide, w);
  XDIT_CHECK(c.in_channels == 4 * c.out_channels, w, ": in_channels ", c.in_channels,
             " is not 4 x out_channels ", c.out_channels, " (2x2-packed latents)");
  c.num_layers = io::int_in(j, "num_layers", 60, 1, kSize, w);
  c.attention_head_dim = io::int_in(j, "attention_head_dim", 128, 2, kSize, w);
  c.num_attention_heads = io::int_in(j, "num_attention_heads", 24, 1, kSize, w);
  XDIT_CHECK(c.hidden() <= kWide, w, ": num_attention_heads x attention_head_dim = ", c.hidden(),
             " is larger than ", kWide);
  c.joint_attention_dim = io::int_in(j, "joint_attention_dim", 3584, 1, kWide, w);
  for (const char* key :
       {"guidance_embeds", "zero_cond_t", "use_additional_t_cond", "use_layer3d_rope"})
    XDIT_CHECK(!io::bool_or(j, key, false, w), w, ": ", key,
               " true is not supported (xdit runs Qwen-Image's text-to-image transformer)");
  c.axes_dims_rope = read_rope_axes(j, "axes_dims_rope", {16, 56, 56}, c.attention_head_dim, w);
  return c;
}

io::WeightSpecs QwenImageConfig::weight_specs(const DiTStage& stage) const {
  const int64_t D = hidden(), hd = attention_head_dim;
  const int64_t b0 = stage.block_begin, b1 = stage.block_end < 0 ? num_layers : stage.block_end;
  io::WeightSpecs s;
  if (stage.first) {
    nn::linear_specs(s, "img_in", in_channels, D, true);
    s.emplace_back("txt_norm.weight", Shape{joint_attention_dim});
    nn::linear_specs(s, "txt_in", joint_attention_dim, D, true);
  }
  nn::linear_specs(s, "time_text_embed.timestep_embedder.linear_1", kTimeProjDim, D, true);
  nn::linear_specs(s, "time_text_embed.timestep_embedder.linear_2", D, D, true);
  for (int64_t i = b0; i < b1; ++i) {
    const std::string p = "transformer_blocks." + std::to_string(i);
    nn::linear_specs(s, p + ".img_mod.1", D, 6 * D, true);
    nn::linear_specs(s, p + ".txt_mod.1", D, 6 * D, true);
    for (const char* m : {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj",
                          "to_out.0", "to_add_out"})
      nn::linear_specs(s, p + ".attn." + m, D, D, true);
    for (const char* n : {"norm_q", "norm_k", "norm_added_q", "norm_added_k"})
      s.emplace_back(p + ".attn." + n + ".weight", Shape{hd});
    for (const char* ff : {".img_mlp", ".txt_mlp"}) {
      nn::linear_specs(s, p + ff + ".net.0.proj", D, 4 * D, true);
      nn::linear_specs(s, p + ff + ".net.2", 4 * D, D, true);
    }
  }
  if (stage.last) {
    nn::linear_specs(s, "norm_out.linear", D, 2 * D, true);
    nn::linear_specs(s, "proj_out", D, 4 * out_channels, true);
  }
  return s;
}

int64_t QwenImageConfig::parameter_count() const {
  int64_t n = 0;
  for (const auto& [name, shape] : weight_specs()) n += shape_numel(shape);
  return n;
}

DiTSpec QwenImageConfig::spec() const {
  DiTSpec s;
  s.blocks = num_layers;
  s.heads = num_attention_heads;
  s.hidden = hidden();
  s.latent_channels = out_channels;
  s.out_channels = out_channels;
  s.patch = 2;
  s.timestep_divisor = 1000.0;  // QwenImagePipeline: t / 1000
  s.text_stream = true;
  return s;
}

}  // namespace xdit::models
