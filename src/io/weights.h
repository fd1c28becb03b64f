// Where a model's weights come from. Models ask for each weight by its
// diffusers/transformers state-dict key and the shape they expect, once, at load.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"

namespace xdit::io {

// The weights a model reads, by state-dict key, with the shape its config
// implies: checked against the safetensors headers before anything loads.
using WeightSpecs = std::vector<std::pair<std::string, Shape>>;

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string& name) const = 0;
  // The weight `name`, checked against `expected` (throws naming both shapes).
  virtual Tensor get(const std::string& name, const Shape& expected) const = 0;
  // Bytes of the weights as stored (for memory estimates and logs).
  virtual size_t stored_bytes() const = 0;
};

// The safetensors weights of one model component folder (e.g. transformer/):
// a single file or a sharded set named by a *.safetensors.index.json.
class WeightStore : public WeightSource {
 public:
  explicit WeightStore(const std::string& folder);
  bool has(const std::string& name) const override;
  Tensor get(const std::string& name, const Shape& expected) const override;
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
  Tensor get(const std::string& name, const Shape& expected) const override;
  size_t stored_bytes() const override { return bytes_; }

 private:
  uint64_t seed_;
  mutable size_t bytes_ = 0;
};

}  // namespace xdit::io
