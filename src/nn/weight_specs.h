// The weights each nn layer reads, by state-dict key and shape: what the
// layer constructors in nn/layers.h and nn/attention.h ask a WeightSource for,
// so a model can list its weights (and check them against the safetensors
// headers) without loading any. tests/parity/test_weight_specs.cpp checks
// that each model's list equals what its constructor reads.
#pragma once

#include <string>

#include "io/weights.h"

namespace xdit::nn {

// Elements of all the weights a list names (a config's parameter count).
inline int64_t parameter_count(const io::WeightSpecs& specs) {
  int64_t n = 0;
  for (const auto& [name, shape] : specs) n += shape_numel(shape);
  return n;
}

// load_linear: "<prefix>.weight" [out, in], "<prefix>.bias" [out].
inline void linear_specs(io::WeightSpecs& s, const std::string& prefix, int64_t in, int64_t out,
                         bool bias) {
  s.emplace_back(prefix + ".weight", Shape{out, in});
  if (bias) s.emplace_back(prefix + ".bias", Shape{out});
}

// MlpSilu: linear_1 [hidden, in], linear_2 [out, hidden], with biases.
inline void mlp_silu_specs(io::WeightSpecs& s, const std::string& prefix, int64_t in,
                           int64_t hidden, int64_t out) {
  linear_specs(s, prefix + ".linear_1", in, hidden, true);
  linear_specs(s, prefix + ".linear_2", hidden, out, true);
}

// FeedForwardGelu: net.0.proj [inner, dim], net.2 [dim, inner], with biases.
inline void feed_forward_gelu_specs(io::WeightSpecs& s, const std::string& prefix, int64_t dim,
                                    int64_t inner) {
  linear_specs(s, prefix + ".net.0.proj", dim, inner, true);
  linear_specs(s, prefix + ".net.2", inner, dim, true);
}

// Attention: to_q/to_k/to_v (K and V from kv_dim when cross, kv_dim 0 = self)
// and to_out.0 (always with a bias).
inline void attention_specs(io::WeightSpecs& s, const std::string& prefix, int64_t dim,
                            int64_t heads, int64_t head_dim, int64_t kv_dim, bool bias) {
  const int64_t inner = heads * head_dim, kv_in = kv_dim != 0 ? kv_dim : dim;
  linear_specs(s, prefix + ".to_q", dim, inner, bias);
  linear_specs(s, prefix + ".to_k", kv_in, inner, bias);
  linear_specs(s, prefix + ".to_v", kv_in, inner, bias);
  linear_specs(s, prefix + ".to_out.0", inner, dim, true);
}

}  // namespace xdit::nn
