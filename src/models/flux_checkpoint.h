// FLUX.1 transformer weights in Black Forest Labs' original layout, as
// diffusers' `convert_flux_transformer_checkpoint_to_diffusers` maps them:
// fused qkv and linear1 (q | k | v | MLP in) split by rows, the final
// modulation's shift | scale halves swapped to diffusers' scale | shift.
// models/original_checkpoint.h reads a file with this map.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "models/original_checkpoint.h"

namespace xdit::models {

// The original rows of FLUX.1 transformer weight `diffusers_name`
// ("transformer_blocks.3.attn.to_k.weight") for a model of width
// `inner_dim` and MLP width `mlp_hidden`; none for a name FLUX.1 has not.
std::optional<OriginalRows> flux_original_rows(const std::string& diffusers_name, int64_t inner_dim,
                                               int64_t mlp_hidden);

}  // namespace xdit::models
