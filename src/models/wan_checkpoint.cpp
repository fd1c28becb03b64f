#include "models/wan_checkpoint.h"

#include <array>
#include <utility>

namespace xdit::models {

std::optional<OriginalRows> wan_original_rows(const std::string& diffusers_name) {
  std::string name = diffusers_name;
  if (name == "scale_shift_table") return OriginalRows{"head.modulation"};
  // diffusers' names → Wan's, each tried once on the name, in this order.
  static const std::array<std::pair<std::string, std::string>, 16> kRenames = {{
      {"condition_embedder.time_embedder.linear_1.", "time_embedding.0."},
      {"condition_embedder.time_embedder.linear_2.", "time_embedding.2."},
      {"condition_embedder.text_embedder.linear_1.", "text_embedding.0."},
      {"condition_embedder.text_embedder.linear_2.", "text_embedding.2."},
      {"condition_embedder.time_proj.", "time_projection.1."},
      {".scale_shift_table", ".modulation"},
      {".attn1.", ".self_attn."},
      {".attn2.", ".cross_attn."},
      {".to_out.0.", ".o."},
      {".to_q.", ".q."},
      {".to_k.", ".k."},
      {".to_v.", ".v."},
      {".ffn.net.0.proj.", ".ffn.0."},
      {".ffn.net.2.", ".ffn.2."},
      {".norm2.", ".norm3."},
      {"proj_out.", "head.head."},
  }};
  for (const auto& [from, to] : kRenames)
    if (const size_t at = name.find(from); at != std::string::npos)
      name.replace(at, from.size(), to);
  return OriginalRows{name};
}

}  // namespace xdit::models
