// CLIP text encoders (transformers CLIPTextModel and
// CLIPTextModelWithProjection), as FLUX.1 (CLIP-L, pooled output) and SD3
// (CLIP-L and CLIP-G: penultimate hidden state and projected pooled output)
// use them: token + position embeddings; pre-LayerNorm layers with causal
// multi-head attention (biases, 1/√d scaling) and an MLP whose activation the
// config names (quick_gelu for CLIP-L, gelu for CLIP-G); the final LayerNorm.
// The pooled output is the final-normed state at the first EOS token (at the
// largest id when the config's eos_token_id is the legacy 2, as transformers
// does), projected by text_projection in the WithProjection model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/json.h"
#include "io/weights.h"
#include "nn/layers.h"

namespace xdit::models {

struct ClipTextConfig {
  int64_t vocab_size = 49408;
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t max_position_embeddings = 77;
  int64_t projection_dim = 0;  // > 0: CLIPTextModelWithProjection
  int64_t eos_token_id = 2;
  std::string hidden_act = "quick_gelu";  // or "gelu"
  double layer_norm_eps = 1e-5;

  // Reads transformers' config.json (CLIPTextConfig, or a CLIPConfig's
  // text_config); the architectures entry decides whether the projection is
  // part of the model. Throws one line naming `where` and the key.
  static ClipTextConfig from_json(const io::Json& j, const std::string& where);
  // The weights the encoder reads, under `prefix` ("text_model." or "").
  io::WeightSpecs weight_specs(const std::string& prefix = "text_model.") const;
  int64_t parameter_count() const;
  // The pooled output's width: projection_dim with a projection, else hidden_size.
  int64_t pooled_width() const { return projection_dim > 0 ? projection_dim : hidden_size; }
};

struct ClipTextOutput {
  Tensor last_hidden;  // [B, S, hidden], after the final LayerNorm
  Tensor pooled;       // [B, hidden], or [B, projection_dim] with a projection
  Tensor hidden;       // [B, S, hidden]: the requested hidden state (undefined if none)
};

class ClipTextEncoder {
 public:
  ClipTextEncoder(const ClipTextConfig& cfg, const io::WeightSource& weights, DType compute);
  ~ClipTextEncoder();
  const ClipTextConfig& config() const { return cfg_; }
  // ids [batch, seq] row-major, seq ≤ max_position_embeddings. `hidden_state`
  // indexes transformers' hidden_states tuple (0: the embeddings, k: after
  // layer k, negative from the end: -2 is SD3's penultimate layer, without
  // the final LayerNorm); kNoHiddenState returns none.
  static constexpr int64_t kNoHiddenState = INT64_MIN;
  ClipTextOutput encode(const std::vector<int32_t>& ids, int64_t batch, int64_t seq,
                        int64_t hidden_state = kNoHiddenState);

 private:
  struct Layer;
  ClipTextConfig cfg_;
  nn::ComputeType ct_;
  Tensor token_embedding_, position_embedding_;  // f32 [vocab, d], [positions, d], host
  Tensor causal_keep_;                           // the causal bias on a CUDA device
  std::vector<std::unique_ptr<Layer>> layers_;
  Tensor final_ln_w_, final_ln_b_;
  kernels::Linear projection_;
  nn::Scratch n_, qkv_, attn_, ff_;
  Device device_ = current_device();  // where it was built: its weights and its calls
};

}  // namespace xdit::models
