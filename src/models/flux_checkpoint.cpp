#include "models/flux_checkpoint.h"

#include <map>
#include <regex>

namespace xdit::models {

namespace {

// A fused tensor's part: the original name's tail and the part's rows.
struct Part {
  std::string tail;
  int index = -1;  // −1: the whole tensor; else q, k, v (, MLP) of a fused one
};

const std::map<std::string, std::string>& global_names() {
  static const std::map<std::string, std::string> m = {
      {"time_text_embed.timestep_embedder.linear_1", "time_in.in_layer"},
      {"time_text_embed.timestep_embedder.linear_2", "time_in.out_layer"},
      {"time_text_embed.text_embedder.linear_1", "vector_in.in_layer"},
      {"time_text_embed.text_embedder.linear_2", "vector_in.out_layer"},
      {"time_text_embed.guidance_embedder.linear_1", "guidance_in.in_layer"},
      {"time_text_embed.guidance_embedder.linear_2", "guidance_in.out_layer"},
      {"context_embedder", "txt_in"},
      {"x_embedder", "img_in"},
      {"proj_out", "final_layer.linear"},
      {"norm_out.linear", "final_layer.adaLN_modulation.1"},
  };
  return m;
}

// A double block's module → (original module, part of a fused qkv).
const std::map<std::string, Part>& double_parts() {
  static const std::map<std::string, Part> m = {
      {"norm1.linear", {"img_mod.lin"}},        {"norm1_context.linear", {"txt_mod.lin"}},
      {"attn.to_q", {"img_attn.qkv", 0}},       {"attn.to_k", {"img_attn.qkv", 1}},
      {"attn.to_v", {"img_attn.qkv", 2}},       {"attn.add_q_proj", {"txt_attn.qkv", 0}},
      {"attn.add_k_proj", {"txt_attn.qkv", 1}}, {"attn.add_v_proj", {"txt_attn.qkv", 2}},
      {"attn.to_out.0", {"img_attn.proj"}},     {"attn.to_add_out", {"txt_attn.proj"}},
      {"ff.net.0.proj", {"img_mlp.0"}},         {"ff.net.2", {"img_mlp.2"}},
      {"ff_context.net.0.proj", {"txt_mlp.0"}}, {"ff_context.net.2", {"txt_mlp.2"}},
  };
  return m;
}

const std::map<std::string, Part>& single_parts() {
  static const std::map<std::string, Part> m = {
      {"norm.linear", {"modulation.lin"}}, {"attn.to_q", {"linear1", 0}},
      {"attn.to_k", {"linear1", 1}},       {"attn.to_v", {"linear1", 2}},
      {"proj_mlp", {"linear1", 3}},        {"proj_out", {"linear2"}},
  };
  return m;
}

// The qk RMSNorms' scales (weights only).
const std::map<std::string, std::string>& norm_names(bool single) {
  static const std::map<std::string, std::string> dbl = {
      {"attn.norm_q", "img_attn.norm.query_norm.scale"},
      {"attn.norm_k", "img_attn.norm.key_norm.scale"},
      {"attn.norm_added_q", "txt_attn.norm.query_norm.scale"},
      {"attn.norm_added_k", "txt_attn.norm.key_norm.scale"},
  };
  static const std::map<std::string, std::string> sgl = {
      {"attn.norm_q", "norm.query_norm.scale"},
      {"attn.norm_k", "norm.key_norm.scale"},
  };
  return single ? sgl : dbl;
}

}  // namespace

std::optional<OriginalRows> flux_original_rows(const std::string& diffusers_name, int64_t inner_dim,
                                               int64_t mlp_hidden) {
  static const std::regex kName(
      R"(^(?:(transformer_blocks|single_transformer_blocks)\.(\d+)\.)?(.+)\.(weight|bias)$)");
  std::smatch m;
  if (!std::regex_match(diffusers_name, m, kName)) return std::nullopt;
  const std::string module = m[3], kind = m[4];
  if (!m[1].matched) {
    const auto it = global_names().find(module);
    if (it == global_names().end()) return std::nullopt;
    OriginalRows r{it->second + "." + kind};
    r.swap_halves = module == "norm_out.linear";
    return r;
  }
  const bool single = m[1] == "single_transformer_blocks";
  const std::string prefix = (single ? "single_blocks." : "double_blocks.") + m[2].str() + ".";
  if (const auto n = norm_names(single).find(module); n != norm_names(single).end())
    return kind == "weight" ? std::optional<OriginalRows>(OriginalRows{prefix + n->second})
                            : std::nullopt;
  const auto& parts = single ? single_parts() : double_parts();
  const auto p = parts.find(module);
  if (p == parts.end()) return std::nullopt;
  OriginalRows r{prefix + p->second.tail + "." + kind};
  if (p->second.index >= 0) {
    r.begin = inner_dim * p->second.index;
    r.count = p->second.index == 3 ? mlp_hidden : inner_dim;
  }
  return r;
}

}  // namespace xdit::models
