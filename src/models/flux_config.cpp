// FluxConfig: transformer/config.json as diffusers reads it
// (FluxTransformer2DModel), bounded and checked, and the weights it implies.
#include <algorithm>

#include "core/error.h"
#include "models/flux.h"
#include "models/rope_axes.h"
#include "nn/weight_specs.h"

namespace xdit::models {

FluxConfig FluxConfig::from_json(const io::Json& j, const std::string& w) {
  io::require_object(j, w);
  // Bounds far beyond FLUX.1 (3072 wide, 24 heads × 128, 19 + 38 blocks).
  constexpr int64_t kSize = 1 << 12, kWide = 1 << 16;
  FluxConfig c;
  const std::string cls = io::string_or(j, "_class_name", "FluxTransformer2DModel", w);
  XDIT_CHECK(cls == "FluxTransformer2DModel", w, ": transformer class ", cls,
             " is not FluxTransformer2DModel");
  const int64_t patch = io::int_in(j, "patch_size", 1, 1, kSize, w);
  XDIT_CHECK(patch == 1, w, ": patch_size ", patch,
             " is not supported (1: FLUX packs 2x2 latent patches itself)");
  c.in_channels = io::int_in(j, "in_channels", 64, 4, kWide, w);
  XDIT_CHECK(c.in_channels % 4 == 0, w, ": in_channels ", c.in_channels,
             " is not 4 x the latent channels");
  if (j.contains("out_channels") && !j["out_channels"].is_null()) {
    const int64_t out = io::int_in(j, "out_channels", c.in_channels, 1, kWide, w);
    XDIT_CHECK(out == c.in_channels, w, ": out_channels ", out, " differs from in_channels ",
               c.in_channels, " (not supported)");
  }
  c.num_layers = io::int_in(j, "num_layers", 19, 0, kSize, w);
  c.num_single_layers = io::int_in(j, "num_single_layers", 38, 0, kSize, w);
  XDIT_CHECK(c.blocks() >= 1, w, ": the model has no blocks");
  c.attention_head_dim = io::int_in(j, "attention_head_dim", 128, 2, kSize, w);
  c.num_attention_heads = io::int_in(j, "num_attention_heads", 24, 1, kSize, w);
  XDIT_CHECK(c.hidden() <= kWide, w, ": num_attention_heads x attention_head_dim = ", c.hidden(),
             " is larger than ", kWide);
  c.joint_attention_dim = io::int_in(j, "joint_attention_dim", 4096, 1, kWide, w);
  c.pooled_projection_dim = io::int_in(j, "pooled_projection_dim", 768, 1, kWide, w);
  c.guidance_embeds = io::bool_or(j, "guidance_embeds", false, w);
  c.axes_dims_rope = read_rope_axes(j, "axes_dims_rope", {16, 56, 56}, c.attention_head_dim, w);
  return c;
}

io::WeightSpecs FluxConfig::weight_specs(const DiTStage& stage) const {
  const int64_t D = hidden();
  const int64_t b0 = stage.block_begin, b1 = stage.block_end < 0 ? blocks() : stage.block_end;
  io::WeightSpecs s;
  if (stage.first) {
    nn::linear_specs(s, "x_embedder", in_channels, D, true);
    nn::linear_specs(s, "context_embedder", joint_attention_dim, D, true);
  }
  const auto mlp = [&](const std::string& p, int64_t in) {
    nn::linear_specs(s, p + ".linear_1", in, D, true);
    nn::linear_specs(s, p + ".linear_2", D, D, true);
  };
  mlp("time_text_embed.timestep_embedder", kTimeProjDim);
  if (guidance_embeds) mlp("time_text_embed.guidance_embedder", kTimeProjDim);
  mlp("time_text_embed.text_embedder", pooled_projection_dim);
  const auto head_norm = [&](const std::string& p) {
    s.emplace_back(p + ".weight", Shape{attention_head_dim});
  };
  for (int64_t i = b0; i < std::min(b1, num_layers); ++i) {
    const std::string p = "transformer_blocks." + std::to_string(i);
    nn::linear_specs(s, p + ".norm1.linear", D, 6 * D, true);
    nn::linear_specs(s, p + ".norm1_context.linear", D, 6 * D, true);
    for (const char* m : {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj",
                          "to_out.0", "to_add_out"})
      nn::linear_specs(s, p + ".attn." + m, D, D, true);
    for (const char* n : {"norm_q", "norm_k", "norm_added_q", "norm_added_k"})
      head_norm(p + ".attn." + n);
    for (const char* ff : {".ff", ".ff_context"}) {
      nn::linear_specs(s, p + ff + ".net.0.proj", D, 4 * D, true);
      nn::linear_specs(s, p + ff + ".net.2", 4 * D, D, true);
    }
  }
  for (int64_t i = std::max(b0, num_layers) - num_layers; i < b1 - num_layers; ++i) {
    const std::string p = "single_transformer_blocks." + std::to_string(i);
    nn::linear_specs(s, p + ".norm.linear", D, 3 * D, true);
    for (const char* m : {"to_q", "to_k", "to_v"})
      nn::linear_specs(s, p + ".attn." + m, D, D, true);
    head_norm(p + ".attn.norm_q");
    head_norm(p + ".attn.norm_k");
    nn::linear_specs(s, p + ".proj_mlp", D, 4 * D, true);
    nn::linear_specs(s, p + ".proj_out", 5 * D, D, true);
  }
  if (stage.last) {
    nn::linear_specs(s, "norm_out.linear", D, 2 * D, true);
    nn::linear_specs(s, "proj_out", D, in_channels, true);
  }
  return s;
}

int64_t FluxConfig::parameter_count() const {
  return nn::parameter_count(weight_specs());
}

DiTSpec FluxConfig::spec() const {
  DiTSpec s;
  s.blocks = blocks();
  s.heads = num_attention_heads;
  s.hidden = hidden();
  s.latent_channels = s.out_channels = latent_channels();
  s.patch = 2;
  s.timestep_divisor = 1000.0;
  s.text_stream = true;
  return s;
}

}  // namespace xdit::models
