// The decoder LLMs the 2025 image pipelines encode their prompts with, as
// text encoders (transformers Qwen2Model / the language model of
// Qwen2_5_VLForConditionalGeneration, and Qwen3Model): token embedding,
// layers of RMSNorm → grouped-query self-attention (q/k/v biases in Qwen2,
// per-head q/k RMSNorm in Qwen3; rotary embedding of each head's two halves;
// a causal mask and the padding's) → residual, RMSNorm → SwiGLU → residual,
// and the final RMSNorm. Qwen2.5-VL's multimodal RoPE gives a text-only
// prompt the same position on its three axes, which is the 1-D RoPE here.
// A pipeline takes the hidden states after some number of layers
// (transformers' output_hidden_states[k]: Qwen-Image the last, normed;
// Z-Image the one before, without the norm), so only those layers run.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/json.h"
#include "io/weights.h"
#include "nn/layers.h"
#include "nn/tensor_parallel.h"

namespace xdit::models {

struct QwenTextConfig {
  int64_t vocab_size = 151936;
  int64_t hidden_size = 3584;
  int64_t intermediate_size = 18944;
  int64_t num_layers = 28;
  int64_t num_heads = 28;
  int64_t num_kv_heads = 4;
  int64_t head_dim = 128;
  double rms_norm_eps = 1e-6;
  double rope_theta = 1000000.0;
  bool qkv_bias = true;  // Qwen2 (and Qwen2.5-VL); Qwen3: attention_bias (false)
  bool qk_norm = false;  // Qwen3
  std::string model_type = "qwen2";
  // Where the weights sit in the folder's files: "", "model." or
  // "model.language_model." (set from the files by `locate`).
  std::string prefix;

  // Reads transformers' config.json of a Qwen2, Qwen2.5-VL (its text_config)
  // or Qwen3 model, bounding every size; throws one line naming `where`.
  static QwenTextConfig from_json(const io::Json& j, const std::string& where);
  static QwenTextConfig qwen2_5_vl_7b();  // Qwen-Image's text encoder
  static QwenTextConfig qwen3_4b();       // Z-Image's
  // Sets `prefix` from the names in `w`; one line when none fits.
  void locate(const io::WeightSource& w, const std::string& where);
  io::WeightSpecs weight_specs(int64_t layers = -1) const;  // the first `layers` (-1: all)
  int64_t parameter_count() const;
  // FLOPs (2 × multiply-adds) of `layers` layers on batch × seq tokens.
  double flops(int64_t batch, int64_t seq, int64_t layers) const;
};

// Tensor parallelism over `degree` ranks: whether every part splits evenly
// (query heads, key/value heads — whole GQA groups —, feed-forward units),
// and a check that throws one line naming the part that does not.
bool qwen_splits(const QwenTextConfig& c, int degree);
void check_qwen_tensor_parallel(const QwenTextConfig& c, int degree);

class QwenTextEncoder {
 public:
  // Builds the first `layers` layers (−1: all; a pipeline that takes an
  // earlier layer's states needs no more). Under tensor parallelism (`tp`)
  // the query heads, the key/value heads (whole GQA groups) and the
  // feed-forward units split over the ranks; embedding and norms stay
  // whole. `resident` false: layers are built one at a time in each
  // encode() and freed after, as T5 streams (`weights` must outlive the
  // encoder).
  QwenTextEncoder(const QwenTextConfig& cfg, const io::WeightSource& weights, DType compute,
                  int64_t layers = -1, const nn::TensorParallel& tp = {}, bool resident = true);
  ~QwenTextEncoder();
  const QwenTextConfig& config() const { return cfg_; }
  int64_t layers() const { return layers_; }
  // ids and mask [batch, seq] (mask 1 = a real token; right padding): the
  // hidden states after `after` layers (≤ layers()), with the final norm
  // when `final_norm` — [batch, seq, hidden] on the host.
  Tensor encode(const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask, int64_t batch,
                int64_t seq, int64_t after, bool final_norm);

 private:
  struct Layer;
  std::unique_ptr<Layer> load_layer(const io::WeightSource& w, int64_t i) const;
  QwenTextConfig cfg_;
  nn::ComputeType ct_;
  nn::TensorParallel tp_;
  int64_t layers_, heads_, kv_heads_, ffn_;  // this rank's heads, key/value heads, units
  Tensor embedding_;                         // [vocab, hidden] as stored
  Tensor final_norm_;
  std::vector<std::unique_ptr<Layer>> built_;   // empty when not resident
  const io::WeightSource* streamed_ = nullptr;  // the layers' weights when not resident
  nn::Scratch h_, n_, qkv_, fused_, attn_, ff_, ff2_, tmp_;
};

}  // namespace xdit::models
