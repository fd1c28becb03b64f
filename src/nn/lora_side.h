// LoRAs switched per request without touching the loaded weights (xdit
// serve): each adapted layer gets a low-rank side path
// (kernels::LowRankSlot, act(x·Wᵀ + b + (x·Aᵀ)·Bᵀ)) built from the adapters
// of the weights it was packed from — a fused layer's parts (q | k | v),
// this rank's tensor-parallel rows or columns, a PipeFusion stage's blocks
// only. Clearing them gives the base model back bit for bit.
//
// Measured against merging (docs/lora.md): applying costs milliseconds
// instead of a reload of every adapted weight, and a step pays the two thin
// products (about rank · (in + out) / (in · out) of the layer's work).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "io/weights.h"
#include "kernels/linear.h"
#include "nn/lora.h"

namespace xdit::nn {

// What a loader packed one layer from.
struct LinearOrigin {
  std::vector<std::string> weights;               // the stored weights, stacked as row blocks
  std::vector<std::pair<int64_t, int64_t>> rows;  // per weight: [begin, count) of its rows
  std::vector<std::pair<int64_t, int64_t>> cols;  // the layer's inputs: [begin, count) column runs
  std::shared_ptr<kernels::LowRankSlot> slot;
  size_t weight_bytes = 0;  // what the layer keeps of its weight (kernels::Linear::weight_bytes)
};

// The layers nn's loaders (load_linear, load_fused_linear, load_row_linear)
// made while a Recording of this registry was alive on the thread.
class LinearRegistry {
 public:
  class Recording {
   public:
    explicit Recording(LinearRegistry& r);
    ~Recording();
    Recording(const Recording&) = delete;
    Recording& operator=(const Recording&) = delete;

   private:
    LinearRegistry* previous_;
  };
  // The loaders' call: notes `l` in the registry recording on this thread
  // (nothing when none is).
  static void note(const kernels::Linear& l, LinearOrigin origin);
  const std::vector<LinearOrigin>& layers() const { return layers_; }
  // Every weight the model read through a RecordingWeights, with its whole shape.
  const std::map<std::string, Shape>& shapes() const { return shapes_; }
  // The weights read into layers with a side path (every registered layer's).
  std::set<std::string> side_weights() const;
  void clear();

 private:
  friend class RecordingWeights;
  std::vector<LinearOrigin> layers_;
  std::map<std::string, Shape> shapes_;
};

// `base` as a model reads it, each weight's name and shape noted in `registry`.
class RecordingWeights : public io::WeightSource {
 public:
  RecordingWeights(const io::WeightSource& base, LinearRegistry& registry)
      : base_(base), registry_(registry) {}
  bool has(const std::string& name) const override { return base_.has(name); }
  size_t stored_bytes() const override { return base_.stored_bytes(); }
  void drop_pages(const std::string& name) const override { base_.drop_pages(name); }

 protected:
  Tensor read(const std::string& name, const Shape& expected) const override;
  Tensor read_slice(const std::string& name, const Shape& expected, int dim, int64_t begin,
                    int64_t count) const override;
  std::optional<io::QuantizedRows> read_quantized(const std::string& name, const Shape& expected,
                                                  const Shape& share) const override;

 private:
  const io::WeightSource& base_;
  LinearRegistry& registry_;
};

// Throws one line for an adapter of a weight outside `side_weights` (one
// read into something other than a layer with a side path, e.g. an
// embedding: such a LoRA merges at start, --lora).
void check_side_targets(const std::vector<LoraAdapter>& adapters,
                        const std::set<std::string>& side_weights);

// Sets every registered layer's side path to the adapters the LoRAs hold
// for `component`'s weights (none: cleared), replacing what it held;
// returns the layers adapted. Throws one line, before any layer changes,
// for a scale that is not finite, an adapter whose [out, in] its weight
// contradicts, or one on a weight this rank read into a layer the loaders
// did not make (no side path: such a LoRA merges at start, --lora).
// Adapters of weights this rank did not read (another PipeFusion stage's
// blocks) are skipped: the caller checks a LoRA against the whole model.
int set_side_loras(const LinearRegistry& registry, const std::vector<LoraUse>& loras,
                   const std::string& component = "transformer");

}  // namespace xdit::nn
