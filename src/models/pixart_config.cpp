// PixArtConfig: transformer/config.json as diffusers reads it, bounded and
// checked, and the weights it implies.
#include <algorithm>

#include "core/error.h"
#include "models/pixart.h"
#include "nn/weight_specs.h"

namespace xdit::models {

PixArtConfig PixArtConfig::from_json(const io::Json& j, const std::string& where) {
  io::require_object(j, where);
  // Bounds: far beyond any PixArt (hidden 1152, 28 blocks), small enough that
  // products of a few sizes stay far from overflowing 64 bits.
  constexpr int64_t kSize = 1 << 12, kWide = 1 << 16;
  PixArtConfig c;
  // diffusers registers PixArt-α's checkpoints as Transformer2DModel and maps
  // them onto PixArtTransformer2DModel.
  const std::string cls = io::string_or(j, "_class_name", "PixArtTransformer2DModel", where);
  XDIT_CHECK(cls == "PixArtTransformer2DModel" || cls == "Transformer2DModel", where,
             ": transformer class ", cls, " is not supported (PixArtTransformer2DModel)");
  c.sample_size = io::int_in(j, "sample_size", 64, 1, kSize, where);
  c.in_channels = io::int_in(j, "in_channels", 4, 1, kSize, where);
  c.out_channels = io::int_in(j, "out_channels", c.in_channels, 1, kSize, where);
  c.num_layers = io::int_in(j, "num_layers", 28, 1, kSize, where);
  c.num_attention_heads = io::int_in(j, "num_attention_heads", 16, 1, kSize, where);
  c.attention_head_dim = io::int_in(j, "attention_head_dim", 72, 1, kSize, where);
  XDIT_CHECK(c.hidden() <= kWide, where,
             ": num_attention_heads x attention_head_dim = ", c.hidden(), " is larger than ",
             kWide);
  c.cross_attention_dim = io::int_in(j, "cross_attention_dim", c.hidden(), 1, kWide, where);
  c.caption_channels = io::int_in(j, "caption_channels", 4096, 1, kWide, where);
  c.patch_size = io::int_in(j, "patch_size", 2, 1, 64, where);
  XDIT_CHECK(c.in_channels * c.patch_size * c.patch_size <= kWide &&
                 c.out_channels * c.patch_size * c.patch_size <= kWide,
             where, ": channels x patch_size^2 is larger than ", kWide);
  c.norm_eps = io::number_or(j, "norm_eps", 1e-6, where);
  XDIT_CHECK(c.norm_eps >= 0, where, ": norm_eps must be >= 0");
  c.norm_elementwise_affine = io::bool_or(j, "norm_elementwise_affine", false, where);
  c.attention_bias = io::bool_or(j, "attention_bias", true, where);
  // diffusers: use_additional_conditions defaults to (sample_size == 128) and
  // interpolation_scale to max(sample_size // 64, 1).
  c.use_additional_conditions =
      io::bool_or(j, "use_additional_conditions", c.sample_size == 128, where);
  c.interpolation_scale =
      io::number_or(j, "interpolation_scale",
                    static_cast<double>(std::max<int64_t>(c.sample_size / 64, 1)), where);
  XDIT_CHECK(c.interpolation_scale > 0, where, ": interpolation_scale must be positive");

  const std::string norm_type = io::string_or(j, "norm_type", "ada_norm_single", where);
  XDIT_CHECK(norm_type == "ada_norm_single", where, ": norm_type '", norm_type,
             "' is not supported (PixArt uses ada_norm_single)");
  const std::string act = io::string_or(j, "activation_fn", "gelu-approximate", where);
  XDIT_CHECK(act == "gelu-approximate", where, ": activation_fn '", act,
             "' is not supported (PixArt uses gelu-approximate)");
  XDIT_CHECK(io::string_or(j, "attention_type", "default", where) == "default", where,
             ": only attention_type \"default\" is supported");
  XDIT_CHECK(!c.norm_elementwise_affine, where,
             ": norm_elementwise_affine=true is not supported (PixArt uses false)");
  XDIT_CHECK(c.cross_attention_dim == c.hidden(), where, ": cross_attention_dim ",
             c.cross_attention_dim,
             " must equal num_attention_heads x attention_head_dim = ", c.hidden(),
             " (the caption projection outputs that width)");
  XDIT_CHECK(!c.use_additional_conditions || c.hidden() % 3 == 0, where,
             ": micro-conditions need a hidden size divisible by 3, found ", c.hidden());
  XDIT_CHECK(c.hidden() % 4 == 0, where,
             ": the 2-D position embedding needs a hidden size divisible by 4");
  return c;
}

PixArtConfig PixArtConfig::alpha_xl_1024() {
  return PixArtConfig{};
}

io::WeightSpecs PixArtConfig::weight_specs(const DiTStage& stage) const {
  const int64_t d = hidden(), p = patch_size;
  const int64_t end = stage.block_end < 0 ? num_layers : stage.block_end;
  io::WeightSpecs s;
  if (stage.first) {
    s.emplace_back("pos_embed.proj.weight", Shape{d, in_channels, p, p});
    s.emplace_back("pos_embed.proj.bias", Shape{d});
  }
  nn::mlp_silu_specs(s, "adaln_single.emb.timestep_embedder", kTimeProjDim, d, d);
  if (use_additional_conditions) {
    nn::mlp_silu_specs(s, "adaln_single.emb.resolution_embedder", kTimeProjDim, d / 3, d / 3);
    nn::mlp_silu_specs(s, "adaln_single.emb.aspect_ratio_embedder", kTimeProjDim, d / 3, d / 3);
  }
  nn::linear_specs(s, "adaln_single.linear", d, 6 * d, true);
  nn::linear_specs(s, "caption_projection.linear_1", caption_channels, d, true);
  nn::linear_specs(s, "caption_projection.linear_2", d, d, true);
  for (int64_t i = stage.block_begin; i < end; ++i) {
    const std::string pre = "transformer_blocks." + std::to_string(i);
    s.emplace_back(pre + ".scale_shift_table", Shape{6, d});
    nn::attention_specs(s, pre + ".attn1", d, num_attention_heads, attention_head_dim, 0,
                        attention_bias);
    nn::attention_specs(s, pre + ".attn2", d, num_attention_heads, attention_head_dim,
                        cross_attention_dim, attention_bias);
    nn::feed_forward_gelu_specs(s, pre + ".ff", d, 4 * d);
  }
  if (stage.last) {
    s.emplace_back("scale_shift_table", Shape{2, d});
    nn::linear_specs(s, "proj_out", d, p * p * out_channels, true);
  }
  return s;
}

int64_t PixArtConfig::parameter_count() const {
  return nn::parameter_count(weight_specs());
}

DiTSpec PixArtConfig::spec() const {
  DiTSpec s;
  s.blocks = num_layers;
  s.heads = num_attention_heads;
  s.hidden = hidden();
  s.latent_channels = in_channels;
  s.out_channels = out_channels;
  s.patch = patch_size;
  return s;
}

}  // namespace xdit::models
