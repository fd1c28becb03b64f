// SD3Config: transformer/config.json as diffusers reads it
// (SD3Transformer2DModel), bounded and checked, and the weights it implies.
#include <algorithm>

#include "core/error.h"
#include "models/sd3.h"
#include "nn/weight_specs.h"

namespace xdit::models {

bool SD3Config::dual(int64_t block) const {
  return std::find(dual_attention_layers.begin(), dual_attention_layers.end(), block) !=
         dual_attention_layers.end();
}

SD3Config SD3Config::from_json(const io::Json& j, const std::string& w) {
  io::require_object(j, w);
  // Bounds far beyond SD3.5-large (2432 wide, 38 heads × 64, 38 blocks).
  constexpr int64_t kSize = 1 << 12, kWide = 1 << 16;
  SD3Config c;
  const std::string cls = io::string_or(j, "_class_name", "SD3Transformer2DModel", w);
  XDIT_CHECK(cls == "SD3Transformer2DModel", w, ": transformer class ", cls,
             " is not SD3Transformer2DModel");
  c.sample_size = io::int_in(j, "sample_size", 128, 1, kSize, w);
  c.patch_size = io::int_in(j, "patch_size", 2, 1, 16, w);
  c.in_channels = io::int_in(j, "in_channels", 16, 1, kWide, w);
  c.out_channels = c.in_channels;
  if (j.contains("out_channels") && !j["out_channels"].is_null())
    c.out_channels = io::int_in(j, "out_channels", 16, 1, kWide, w);
  c.num_layers = io::int_in(j, "num_layers", 18, 1, kSize, w);
  c.attention_head_dim = io::int_in(j, "attention_head_dim", 64, 1, kSize, w);
  c.num_attention_heads = io::int_in(j, "num_attention_heads", 18, 1, kSize, w);
  XDIT_CHECK(c.hidden() <= kWide, w, ": num_attention_heads x attention_head_dim = ", c.hidden(),
             " is larger than ", kWide);
  c.joint_attention_dim = io::int_in(j, "joint_attention_dim", 4096, 1, kWide, w);
  c.caption_projection_dim = io::int_in(j, "caption_projection_dim", 1152, 1, kWide, w);
  XDIT_CHECK(c.caption_projection_dim == c.hidden(), w, ": caption_projection_dim ",
             c.caption_projection_dim, " differs from the attention width ", c.hidden(),
             " (the joint attention needs them equal)");
  c.pooled_projection_dim = io::int_in(j, "pooled_projection_dim", 2048, 1, kWide, w);
  c.pos_embed_max_size = io::int_in(j, "pos_embed_max_size", 96, 1, kSize, w);
  c.dual_attention_layers.clear();
  if (j.contains("dual_attention_layers") && !j["dual_attention_layers"].is_null()) {
    const io::Json& d = j["dual_attention_layers"];
    XDIT_CHECK(d.is_array() && d.size() <= static_cast<size_t>(c.num_layers), w,
               ": dual_attention_layers must be a list of at most num_layers block indices");
    for (const auto& v : d) {
      XDIT_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < c.num_layers,
                 w, ": dual_attention_layers holds ", v.dump(), ", not a block index below ",
                 c.num_layers);
      c.dual_attention_layers.push_back(v.get<int64_t>());
    }
  }
  if (j.contains("qk_norm") && !j["qk_norm"].is_null()) {
    const std::string n = io::string_or(j, "qk_norm", "", w);
    XDIT_CHECK(n == "rms_norm", w, ": qk_norm \"", n, "\" is not supported (null or rms_norm)");
    c.qk_norm = true;
  }
  return c;
}

io::WeightSpecs SD3Config::weight_specs(const DiTStage& stage) const {
  const int64_t D = hidden(), hd = attention_head_dim, p = patch_size;
  const int64_t b0 = stage.block_begin, b1 = stage.block_end < 0 ? num_layers : stage.block_end;
  io::WeightSpecs s;
  if (stage.first) {
    s.emplace_back("pos_embed.proj.weight", Shape{D, in_channels, p, p});
    s.emplace_back("pos_embed.proj.bias", Shape{D});
    s.emplace_back("pos_embed.pos_embed", Shape{1, pos_embed_max_size * pos_embed_max_size, D});
    nn::linear_specs(s, "context_embedder", joint_attention_dim, D, true);
  }
  const auto mlp = [&](const std::string& pre, int64_t in) {
    nn::linear_specs(s, pre + ".linear_1", in, D, true);
    nn::linear_specs(s, pre + ".linear_2", D, D, true);
  };
  mlp("time_text_embed.timestep_embedder", kTimeProjDim);
  mlp("time_text_embed.text_embedder", pooled_projection_dim);
  for (int64_t i = b0; i < b1; ++i) {
    const std::string pre = "transformer_blocks." + std::to_string(i);
    const bool last = i == num_layers - 1;
    nn::linear_specs(s, pre + ".norm1.linear", D, (dual(i) ? 9 : 6) * D, true);
    nn::linear_specs(s, pre + ".norm1_context.linear", D, (last ? 2 : 6) * D, true);
    for (const char* m :
         {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_out.0"})
      nn::linear_specs(s, pre + ".attn." + m, D, D, true);
    if (!last) nn::linear_specs(s, pre + ".attn.to_add_out", D, D, true);
    if (qk_norm)
      for (const char* n : {"norm_q", "norm_k", "norm_added_q", "norm_added_k"})
        s.emplace_back(pre + ".attn." + n + ".weight", Shape{hd});
    if (dual(i)) {
      for (const char* m : {"to_q", "to_k", "to_v", "to_out.0"})
        nn::linear_specs(s, pre + ".attn2." + m, D, D, true);
      if (qk_norm)
        for (const char* n : {"norm_q", "norm_k"})
          s.emplace_back(pre + ".attn2." + n + ".weight", Shape{hd});
    }
    for (const char* ff :
         last ? std::vector<const char*>{".ff"} : std::vector<const char*>{".ff", ".ff_context"}) {
      nn::linear_specs(s, pre + ff + ".net.0.proj", D, 4 * D, true);
      nn::linear_specs(s, pre + ff + ".net.2", 4 * D, D, true);
    }
  }
  if (stage.last) {
    nn::linear_specs(s, "norm_out.linear", D, 2 * D, true);
    nn::linear_specs(s, "proj_out", D, p * p * out_channels, true);
  }
  return s;
}

int64_t SD3Config::parameter_count() const {
  return nn::parameter_count(weight_specs());
}

DiTSpec SD3Config::spec() const {
  DiTSpec s;
  s.blocks = num_layers;
  s.heads = num_attention_heads;
  s.hidden = hidden();
  s.latent_channels = in_channels;
  s.out_channels = out_channels;
  s.patch = patch_size;
  s.text_stream = true;
  return s;
}

}  // namespace xdit::models
