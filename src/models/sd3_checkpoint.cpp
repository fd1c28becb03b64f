#include "models/sd3_checkpoint.h"

#include <map>
#include <regex>

namespace xdit::models {

namespace {

// A joint block's module → (original module under joint_blocks.N., part of
// a fused qkv or −1).
struct Sd3Part {
  std::string tail;
  int index = -1;
};

const std::map<std::string, std::string>& sd3_global_names() {
  static const std::map<std::string, std::string> m = {
      {"pos_embed.proj", "x_embedder.proj"},
      {"time_text_embed.timestep_embedder.linear_1", "t_embedder.mlp.0"},
      {"time_text_embed.timestep_embedder.linear_2", "t_embedder.mlp.2"},
      {"time_text_embed.text_embedder.linear_1", "y_embedder.mlp.0"},
      {"time_text_embed.text_embedder.linear_2", "y_embedder.mlp.2"},
      {"context_embedder", "context_embedder"},
      {"proj_out", "final_layer.linear"},
      {"norm_out.linear", "final_layer.adaLN_modulation.1"},
  };
  return m;
}

const std::map<std::string, Sd3Part>& block_parts() {
  static const std::map<std::string, Sd3Part> m = {
      {"norm1.linear", {"x_block.adaLN_modulation.1"}},
      {"norm1_context.linear", {"context_block.adaLN_modulation.1"}},
      {"attn.to_q", {"x_block.attn.qkv", 0}},
      {"attn.to_k", {"x_block.attn.qkv", 1}},
      {"attn.to_v", {"x_block.attn.qkv", 2}},
      {"attn.add_q_proj", {"context_block.attn.qkv", 0}},
      {"attn.add_k_proj", {"context_block.attn.qkv", 1}},
      {"attn.add_v_proj", {"context_block.attn.qkv", 2}},
      {"attn.to_out.0", {"x_block.attn.proj"}},
      {"attn.to_add_out", {"context_block.attn.proj"}},
      {"attn2.to_q", {"x_block.attn2.qkv", 0}},
      {"attn2.to_k", {"x_block.attn2.qkv", 1}},
      {"attn2.to_v", {"x_block.attn2.qkv", 2}},
      {"attn2.to_out.0", {"x_block.attn2.proj"}},
      {"ff.net.0.proj", {"x_block.mlp.fc1"}},
      {"ff.net.2", {"x_block.mlp.fc2"}},
      {"ff_context.net.0.proj", {"context_block.mlp.fc1"}},
      {"ff_context.net.2", {"context_block.mlp.fc2"}},
  };
  return m;
}

// The qk RMSNorms' scales (SD3.5; weights only).
const std::map<std::string, std::string>& sd3_norm_names() {
  static const std::map<std::string, std::string> m = {
      {"attn.norm_q", "x_block.attn.ln_q.weight"},
      {"attn.norm_k", "x_block.attn.ln_k.weight"},
      {"attn.norm_added_q", "context_block.attn.ln_q.weight"},
      {"attn.norm_added_k", "context_block.attn.ln_k.weight"},
      {"attn2.norm_q", "x_block.attn2.ln_q.weight"},
      {"attn2.norm_k", "x_block.attn2.ln_k.weight"},
  };
  return m;
}

}  // namespace

std::optional<OriginalRows> sd3_original_rows(const std::string& diffusers_name, int64_t inner_dim,
                                              int64_t last_block) {
  if (diffusers_name == "pos_embed.pos_embed") return OriginalRows{"pos_embed"};
  static const std::regex kName(R"(^(?:transformer_blocks\.(\d+)\.)?(.+)\.(weight|bias)$)");
  std::smatch m;
  if (!std::regex_match(diffusers_name, m, kName)) return std::nullopt;
  const std::string module = m[2], kind = m[3];
  if (!m[1].matched) {
    const auto it = sd3_global_names().find(module);
    if (it == sd3_global_names().end()) return std::nullopt;
    OriginalRows r{it->second + "." + kind};
    r.swap_halves = module == "norm_out.linear";
    return r;
  }
  const int64_t block = std::stoll(m[1].str());
  if (block > last_block) return std::nullopt;
  const std::string prefix = "joint_blocks." + m[1].str() + ".";
  if (const auto n = sd3_norm_names().find(module); n != sd3_norm_names().end())
    return kind == "weight" ? std::optional<OriginalRows>(OriginalRows{prefix + n->second})
                            : std::nullopt;
  const auto p = block_parts().find(module);
  if (p == block_parts().end()) return std::nullopt;
  OriginalRows r{prefix + p->second.tail + "." + kind};
  if (p->second.index >= 0) {
    r.begin = inner_dim * p->second.index;
    r.count = inner_dim;
  }
  // The last block's context stream only modulates (diffusers'
  // AdaLayerNormContinuous: scale | shift).
  r.swap_halves = module == "norm1_context.linear" && block == last_block;
  return r;
}

}  // namespace xdit::models
