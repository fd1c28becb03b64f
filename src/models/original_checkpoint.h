// A transformer's weights under diffusers' names from a single-file
// checkpoint of the model's original layout — the layout of the files people
// download (the community GGUF conversions, single-file safetensors) — as
// diffusers' single-file converters map them: a fused tensor split by rows,
// a modulation's shift | scale halves swapped to diffusers' scale | shift.
// The model's own map (flux_original_rows, sd3_original_rows) says where
// each weight lies.
#pragma once

#include <cstdint>
#include <functional>
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

// A model's map from a diffusers weight name to its original rows; none for
// a name the model has not. (A checkpoint's "model.diffusion_model." prefix
// is the reader's to drop.)
using OriginalRowMap = std::function<std::optional<OriginalRows>(const std::string&)>;

// The weights of `model` ("FLUX.1", for messages), under diffusers' names,
// from a GGUF or safetensors file of the original layout (with or without
// "model.diffusion_model."). F32, F16 and BF16 tensors are handed over as
// stored (a view of the mapping); quantized matrices as their blocks
// (read_quantized: the layers keep them so); exchanged halves, and
// quantized tensors read with get(), dequantized into f32
// (io/gguf_quants.h), only the rows a weight takes.
class OriginalCheckpointWeights : public io::WeightSource {
 public:
  OriginalCheckpointWeights(std::shared_ptr<const io::CheckpointFile> file, std::string model,
                            OriginalRowMap map);
  bool has(const std::string& name) const override;
  size_t stored_bytes() const override;
  // The file's pages of the weight's rows leave the resident set once a
  // layer holds its copy (io::WeightSource::drop_pages).
  void drop_pages(const std::string& name) const override;
  // Throws one line, before any weight is read, for a weight of `specs` the
  // file lacks or stores in another shape (a checkpoint of another model).
  void check_shapes(const io::WeightSpecs& specs) const;
  // The shape weight `name` has in this file (its rows of a fused tensor);
  // none when the model or the file has not the weight.
  std::optional<Shape> shape(const std::string& name) const;

 protected:
  Tensor read(const std::string& name, const Shape& expected) const override;
  // A matrix stored quantized (Q8_0, Q4_K, ...) as its blocks: the rows
  // the weight takes, in place in the mapping; none for float tensors and
  // exchanged halves.
  std::optional<io::QuantizedRows> read_quantized(const std::string& name, const Shape& expected,
                                                  const Shape& share) const override;

 private:
  // The file's tensor of an original name (nullptr when it has none), and
  // the name it is stored under.
  const io::GgufTensor* find(const std::string& original, std::string* stored_name = nullptr) const;
  // Where weight `name` lies: its tensor and the rows it takes.
  struct Located {
    OriginalRows rows;
    const io::GgufTensor* tensor;
    int64_t count, cols;
    size_t row_bytes;
    const uint8_t* data;  // the first row taken
  };
  Located locate(const std::string& name) const;
  std::shared_ptr<const io::CheckpointFile> file_;
  std::string model_;
  OriginalRowMap map_;
};

}  // namespace xdit::models
