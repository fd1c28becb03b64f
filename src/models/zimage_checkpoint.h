// Z-Image transformer weights in the original layout (the Tongyi-MAI
// checkpoints, their single-file downloads and the community's GGUF
// conversions), as diffusers' `convert_z_image_transformer_checkpoint_to
// _diffusers` maps them: `attention.qkv` split by rows into to_q | to_k |
// to_v, `attention.out` → `to_out.0`, `q_norm` / `k_norm` → `norm_q` /
// `norm_k`, `x_embedder.` / `final_layer.` → `all_x_embedder.2-1.` /
// `all_final_layer.2-1.`; every other name as it is. models/original
// _checkpoint.h reads a file with this map.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "models/original_checkpoint.h"

namespace xdit::models {

// The original rows of Z-Image transformer weight `diffusers_name`
// ("layers.3.attention.to_k.weight") for a model of width `dim`; none for
// a name the converter does not produce (another patch size's embedders).
std::optional<OriginalRows> zimage_original_rows(const std::string& diffusers_name, int64_t dim);

}  // namespace xdit::models
