// SD3 / SD3.5 transformer weights in Stability AI's original (MMDiT)
// layout, as diffusers' `convert_sd3_transformer_checkpoint_to_diffusers`
// maps them: each fused qkv split by rows into q, k, v; the final
// modulation's and the last block's context modulation's shift | scale
// halves swapped to diffusers' scale | shift. models/original_checkpoint.h
// reads a file with this map.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "models/original_checkpoint.h"

namespace xdit::models {

// The original rows of SD3 transformer weight `diffusers_name`
// ("transformer_blocks.3.attn.add_k_proj.weight") for a model of width
// `inner_dim` whose last joint block is `last_block`; none for a name SD3
// has not.
std::optional<OriginalRows> sd3_original_rows(const std::string& diffusers_name, int64_t inner_dim,
                                              int64_t last_block);

}  // namespace xdit::models
