#include "models/zimage_checkpoint.h"

#include <array>
#include <utility>

namespace xdit::models {

namespace {

// Replaces the first `from` in `s` by `to`; whether it was there.
bool replace(std::string& s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  if (at == std::string::npos) return false;
  s.replace(at, from.size(), to);
  return true;
}

}  // namespace

std::optional<OriginalRows> zimage_original_rows(const std::string& diffusers_name, int64_t dim) {
  std::string name = diffusers_name;
  // The fused attention projection: q | k | v, `dim` rows each.
  static const std::array<std::string, 3> kQkv = {
      ".attention.to_q.weight", ".attention.to_k.weight", ".attention.to_v.weight"};
  for (int64_t i = 0; i < 3; ++i)
    if (replace(name, kQkv[static_cast<size_t>(i)], ".attention.qkv.weight"))
      return OriginalRows{name, i * dim, dim};
  // The converter's renames, read backwards (it renames only these).
  static const std::array<std::pair<std::string, std::string>, 3> kInner = {{
      {".attention.to_out.0.", ".attention.out."},
      {".attention.norm_k.", ".attention.k_norm."},
      {".attention.norm_q.", ".attention.q_norm."},
  }};
  for (const auto& [diffusers, original] : kInner)
    if (replace(name, diffusers, original)) return OriginalRows{name};
  for (const auto& [diffusers, original] :
       {std::pair<std::string, std::string>{"all_x_embedder.", "x_embedder."},
        std::pair<std::string, std::string>{"all_final_layer.", "final_layer."}}) {
    if (name.rfind(diffusers, 0) != 0) continue;
    // Only the 2-1 patch size's embedders come from an original checkpoint.
    if (name.rfind(diffusers + "2-1.", 0) != 0) return std::nullopt;
    return OriginalRows{original + name.substr(diffusers.size() + 4)};
  }
  return OriginalRows{name};
}

}  // namespace xdit::models
