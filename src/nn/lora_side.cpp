#include "nn/lora_side.h"

#include <cmath>
#include <cstring>

#include "core/device.h"
#include "core/error.h"

namespace xdit::nn {

namespace {
thread_local LinearRegistry* t_recording = nullptr;
}  // namespace

LinearRegistry::Recording::Recording(LinearRegistry& r) : previous_(t_recording) {
  t_recording = &r;
}

LinearRegistry::Recording::~Recording() {
  t_recording = previous_;
}

void LinearRegistry::note(const kernels::Linear& l, LinearOrigin origin) {
  if (t_recording == nullptr) return;
  origin.slot = l.low_rank();
  origin.weight_bytes = l.weight_bytes();
  t_recording->layers_.push_back(std::move(origin));
}

void LinearRegistry::clear() {
  layers_.clear();
  shapes_.clear();
}

std::set<std::string> LinearRegistry::side_weights() const {
  std::set<std::string> held;
  for (const LinearOrigin& o : layers_) held.insert(o.weights.begin(), o.weights.end());
  return held;
}

Tensor RecordingWeights::read(const std::string& name, const Shape& expected) const {
  registry_.shapes_[name] = expected;
  return base_.get(name, expected);
}

Tensor RecordingWeights::read_slice(const std::string& name, const Shape& expected, int dim,
                                    int64_t begin, int64_t count) const {
  registry_.shapes_[name] = expected;
  return base_.get_slice(name, expected, dim, begin, count);
}

std::optional<io::QuantizedRows> RecordingWeights::read_quantized(const std::string& name,
                                                                  const Shape& expected,
                                                                  const Shape& share) const {
  std::optional<io::QuantizedRows> q = base_.quantized(name, expected, share);
  if (q) registry_.shapes_[name] = expected;
  return q;
}

namespace {

// One layer's A [R, in] and B [out, R] from the adapters of its weights:
// A's rows are every adapter's A over the layer's columns; B is block
// diagonal, each adapter's rows of the layer in its own rank columns.
std::pair<Tensor, Tensor> side_matrices(
    const LinearOrigin& o, const std::map<std::string, std::vector<LoraAdapter>>& by_weight) {
  int64_t rank = 0, in = 0, out = 0;
  for (const auto& [c0, n] : o.cols) in += n;
  for (size_t p = 0; p < o.weights.size(); ++p) {
    out += o.rows[p].second;
    if (const auto it = by_weight.find(o.weights[p]); it != by_weight.end())
      for (const LoraAdapter& a : it->second) rank += a.module->rank;
  }
  if (rank == 0) return {};
  Tensor A = Tensor::zeros({rank, in}), B = Tensor::zeros({out, rank});
  int64_t r0 = 0, row0 = 0;
  for (size_t p = 0; p < o.weights.size(); ++p) {
    const auto [begin, rows] = o.rows[p];
    if (const auto it = by_weight.find(o.weights[p]); it != by_weight.end()) {
      for (const LoraAdapter& a : it->second) {
        const int64_t r = a.module->rank;
        const Tensor da = a.file->down(*a.module), db = a.file->up(*a.module);
        for (int64_t k = 0; k < r; ++k) {
          int64_t col = 0;
          for (const auto& [c0, n] : o.cols) {
            std::memcpy(A.data<float>() + (r0 + k) * in + col,
                        da.data<float>() + k * a.module->in + c0, sizeof(float) * n);
            col += n;
          }
        }
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t k = 0; k < r; ++k)
            B.data<float>()[(row0 + i) * rank + r0 + k] =
                static_cast<float>(a.factor * db.data<float>()[(begin + i) * r + k]);
        r0 += r;
      }
    }
    row0 += rows;
  }
  return {A, B};
}

}  // namespace

void check_side_targets(const std::vector<LoraAdapter>& adapters,
                        const std::set<std::string>& side_weights) {
  for (const LoraAdapter& a : adapters)
    XDIT_CHECK(side_weights.count(a.weight) != 0, "LoRA ", a.file->path(), ": ", a.weight,
               " is not in a linear layer with a low-rank side path; apply this LoRA at start "
               "(--lora) instead of per request");
}

int set_side_loras(const LinearRegistry& registry, const std::vector<LoraUse>& loras,
                   const std::string& component) {
  const DeviceScope host(Device{});
  // Adapters of weights this rank did not read are skipped (another stage's).
  const auto shape_of = [&](const std::string& n) -> std::optional<Shape> {
    const auto it = registry.shapes().find(n);
    if (it == registry.shapes().end()) return std::nullopt;
    return it->second;
  };
  const std::vector<LoraAdapter> adapters =
      match_lora_adapters(loras, component, shape_of, /*skip_missing=*/true);
  check_side_targets(adapters, registry.side_weights());
  std::map<std::string, std::vector<LoraAdapter>> by_weight;
  for (const LoraAdapter& a : adapters) by_weight[a.weight].push_back(a);
  // Checked: each layer's matrices now, built and packed one layer at a time.
  int adapted = 0;
  for (const LinearOrigin& o : registry.layers()) {
    const auto [a, b] = side_matrices(o, by_weight);
    o.slot->set(a, b);
    adapted += a.defined() ? 1 : 0;
  }
  return adapted;
}

}  // namespace xdit::nn
