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

#include "io/checkpoint_file.h"
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

// A FLUX.1 transformer's weights, under diffusers' names, from a GGUF or
// safetensors file of the original layout (with or without
// "model.diffusion_model."). F32, F16 and BF16 tensors are handed over as
// stored (a view of the mapping); quantized matrices as their blocks
// (read_quantized: the layers keep them so); the final modulation's
// exchanged halves, and quantized tensors read with get(), dequantized into
// f32 (io/gguf_quants.h), only the rows a weight takes.
class FluxCheckpointWeights : public io::WeightSource {
 public:
  FluxCheckpointWeights(std::shared_ptr<const io::CheckpointFile> file, int64_t inner_dim,
                        int64_t mlp_hidden);
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
  // A matrix stored quantized (Q8_0, Q4_K, ...) as its blocks: the rows
  // the weight takes, in place in the mapping; none for float tensors and
  // the final modulation (its halves are exchanged).
  std::optional<io::QuantizedRows> read_quantized(const std::string& name, const Shape& expected,
                                                  const Shape& share) const override;

 private:
  // The file's tensor of an original name (nullptr when it has none), and
  // the name it is stored under.
  const io::GgufTensor* find(const std::string& original, std::string* stored_name = nullptr) const;
  // Where FLUX.1's weight `name` lies: its tensor and the rows it takes.
  struct Located {
    OriginalRows rows;
    const io::GgufTensor* tensor;
    int64_t count, cols;
    size_t row_bytes;
    const uint8_t* data;  // the first row taken
  };
  Located locate(const std::string& name) const;
  std::shared_ptr<const io::CheckpointFile> file_;
  int64_t inner_, mlp_;
};

}  // namespace xdit::models
