// Wan transformer weights in the original layout (Wan-AI's repositories,
// the community's GGUF conversions), as diffusers'
// `convert_wan_transformer_to_diffusers` maps them: renames only —
// `self_attn` / `cross_attn` ↔ `attn1` / `attn2`, `q` `k` `v` `o` ↔ `to_q`
// … `to_out.0`, `ffn.0` / `ffn.2`, `modulation` ↔ `scale_shift_table`,
// `head.head` ↔ `proj_out`, the time and text embeddings, and the
// cross-attention norm, `norm3` there and `norm2` here.
// models/original_checkpoint.h reads a file with this map.
#pragma once

#include <optional>
#include <string>

#include "models/original_checkpoint.h"

namespace xdit::models {

// The original tensor of Wan transformer weight `diffusers_name`
// ("blocks.3.attn2.to_k.weight" → "blocks.3.cross_attn.k.weight").
std::optional<OriginalRows> wan_original_rows(const std::string& diffusers_name);

}  // namespace xdit::models
