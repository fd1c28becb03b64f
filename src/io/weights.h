// Where a model's weights come from. Models ask for each weight by its
// diffusers/transformers state-dict key and the shape they expect, once, at load.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/gguf.h"
#include "io/safetensors.h"

namespace xdit::io {

// The weights a model reads, by state-dict key, with the shape its config
// implies: checked against the safetensors headers before anything loads.
using WeightSpecs = std::vector<std::pair<std::string, Shape>>;

// A weight a source keeps block-quantized (a GGUF's Q8_0, Q4_K, ...): its
// rows as stored, whole blocks each, for a layer that computes from them.
struct QuantizedRows {
  GgmlType type = GgmlType::kQ8_0;
  int64_t rows = 0, cols = 0;
  const uint8_t* data = nullptr;  // rows · row_bytes bytes
  size_t row_bytes = 0;
  std::shared_ptr<const void> keep;  // what holds `data` (a file's mapping)
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string& name) const = 0;
  // The weight `name`, checked against `expected` (throws naming both shapes).
  Tensor get(const std::string& name, const Shape& expected) const;
  // Elements [begin, begin + count) along dimension `dim` (0 or 1) of the
  // weight `name`, whose whole shape is `expected`: a tensor-parallel
  // rank's share in the stored dtype. Rows are a view of what read() gives
  // (a file's mapping: nothing copied); columns are copied, one strided read
  // of the mapping per row, so nothing outside the share is touched.
  Tensor get_slice(const std::string& name, const Shape& expected, int dim, int64_t begin,
                   int64_t count) const;
  // The matrix `name` of shape `expected` as the blocks it is stored in,
  // when the source keeps it block-quantized; none when it is stored as
  // floats (read it with get()). Throws one line for non-finite scales.
  // `share` ([rows, cols] a tensor-parallel rank keeps of it; empty: all)
  // is what loaded() counts.
  std::optional<QuantizedRows> quantized(const std::string& name, const Shape& expected,
                                         const Shape& share = {}) const;
  // Bytes of the weights as stored (for memory estimates and logs).
  virtual size_t stored_bytes() const = 0;
  // Called once the weight `name` has been converted into a layer's own
  // copy: the source may let go of the memory its reads touched (WeightStore:
  // the file pages leave the resident set; a view read later still reads
  // right). Nothing by default.
  virtual void drop_pages(const std::string& /*name*/) const {}

  // Bytes (as stored) this source has handed out: all of them, and those of
  // get_slice (the shares). A model's loaded weights, for tests and logs.
  struct Loaded {
    size_t total = 0, sliced = 0;
  };
  const Loaded& loaded() const { return loaded_; }

 protected:
  virtual Tensor read(const std::string& name, const Shape& expected) const = 0;
  // None by default: every weight is stored as floats.
  virtual std::optional<QuantizedRows> read_quantized(const std::string& /*name*/,
                                                      const Shape& /*expected*/,
                                                      const Shape& /*share*/) const {
    return std::nullopt;
  }
  // Default: a view of read()'s rows, or its columns copied out.
  virtual Tensor read_slice(const std::string& name, const Shape& expected, int dim, int64_t begin,
                            int64_t count) const;

 private:
  mutable Loaded loaded_;
};

// The safetensors weights of one model component folder (e.g. transformer/):
// a single file or a sharded set named by a *.safetensors.index.json.
class WeightStore : public WeightSource {
 public:
  explicit WeightStore(const std::string& folder);
  bool has(const std::string& name) const override;
  size_t stored_bytes() const override;
  std::vector<std::string> names() const;
  // The stored shape of `name` (throws when missing).
  Shape shape(const std::string& name) const;
  // Every weight of `specs` is stored with that shape: throws one line naming
  // the first that is missing or of another shape (a config the weights
  // contradict), from the headers alone.
  void check_shapes(const WeightSpecs& specs) const;
  // Scans every stored value: (name, count of NaN/Inf values) for each tensor
  // that holds any, in name order.
  std::vector<std::pair<std::string, int64_t>> nonfinite_tensors() const;
  const std::string& folder() const { return folder_; }
  // Parameter count and the stored dtypes ("F32", "BF16", ...) of all weights
  // whose names start with `prefix`.
  int64_t parameter_count(const std::string& prefix = "") const;
  std::vector<std::string> dtypes() const;
  void drop_pages(const std::string& name) const override;

 protected:
  Tensor read(const std::string& name, const Shape& expected) const override;

 private:
  std::string folder_;
  std::vector<std::unique_ptr<SafeTensorsFile>> files_;
  std::map<std::string, const SafeTensorsFile*> index_;
};

// Random weights made in memory (benchmarks): N(0, 0.02²) for matrices, small
// values for vectors, deterministic per name.
class RandomWeights : public WeightSource {
 public:
  explicit RandomWeights(uint64_t seed = 0) : seed_(seed) {}
  bool has(const std::string&) const override { return true; }
  size_t stored_bytes() const override { return loaded().total; }  // those made so far

 protected:
  Tensor read(const std::string& name, const Shape& expected) const override;
  // Makes only the slice's values (the same as the whole tensor's there).
  Tensor read_slice(const std::string& name, const Shape& expected, int dim, int64_t begin,
                    int64_t count) const override;

 private:
  // The values of `out`: the whole tensor's, or those of its slice from
  // `begin` along `dim`.
  void fill(const std::string& name, const Shape& whole, Tensor& out, int dim, int64_t begin) const;
  uint64_t seed_;
};

}  // namespace xdit::io
