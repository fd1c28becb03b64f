// FLUX.1 transformer weights in Black Forest Labs' original layout — the
// layout of the single-file checkpoints people download (the community
// GGUF conversions, single-file safetensors) — under diffusers' names, as
// diffusers' `convert_flux_transformer_checkpoint_to_diffusers` maps them:
// fused qkv and linear1 (q | k | v | MLP in) split by rows, the final
// modulation's shift | scale halves swapped to diffusers' scale | shift.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace xdit::models {

// Where a diffusers weight lies in an original checkpoint: `count` rows of
// `name` from `begin` (count −1: all of it), their two halves exchanged
// when `swap_halves`.
struct OriginalRows {
  std::string name;
  int64_t begin = 0, count = -1;
  bool swap_halves = false;
};

// The original rows of FLUX.1 transformer weight `diffusers_name`
// ("transformer_blocks.3.attn.to_k.weight") for a model of width
// `inner_dim` and MLP width `mlp_hidden`; none for a name FLUX.1 has not.
// (A checkpoint's "model.diffusion_model." prefix is the reader's to drop.)
std::optional<OriginalRows> flux_original_rows(const std::string& diffusers_name, int64_t inner_dim,
                                               int64_t mlp_hidden);

}  // namespace xdit::models
