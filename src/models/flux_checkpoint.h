// FLUX.1 transformer weights in Black Forest Labs' original layout — the
// layout of the single-file checkpoints people download (the community
// GGUF conversions, single-file safetensors) — under diffusers' names, as
// diffusers' `convert_flux_transformer_checkpoint_to_diffusers` maps them:
// fused qkv and linear1 (q | k | v | MLP in) split by rows, the final
// modulation's shift | scale halves swapped to diffusers' scale | shift.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "io/gguf.h"
#include "io/weights.h"

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

// A FLUX.1 transformer's weights, under diffusers' names, from a GGUF file
// of the original layout (with or without "model.diffusion_model."). F32,
// F16 and BF16 tensors are handed over as stored (a view of the mapping);
// quantized ones, and the final modulation's exchanged halves, dequantized
// into f32 (io/gguf_quants.h), only the rows a weight takes.
class FluxGgufWeights : public io::WeightSource {
 public:
  FluxGgufWeights(std::shared_ptr<const io::GgufFile> file, int64_t inner_dim, int64_t mlp_hidden);
  bool has(const std::string& name) const override;
  size_t stored_bytes() const override;
  // The file's pages of the weight's rows leave the resident set once a
  // layer holds its copy (io::WeightSource::drop_pages).
  void drop_pages(const std::string& name) const override;
  // Throws one line, before any weight is read, for a weight of `specs` the
  // file lacks or stores in another shape (a checkpoint of another model).
  void check_shapes(const io::WeightSpecs& specs) const;

 protected:
  Tensor read(const std::string& name, const Shape& expected) const override;

 private:
  // The file's name of an original tensor (nullptr when it has none).
  const io::GgufTensor* find(const std::string& original) const;
  std::shared_ptr<const io::GgufFile> file_;
  int64_t inner_, mlp_;
};

}  // namespace xdit::models
