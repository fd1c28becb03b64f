// T5 encoder (transformers T5EncoderModel), as PixArt uses it: token
// embedding, blocks of RMSNorm → self-attention with the relative-position
// bias of block 0 (no 1/√d scaling) → residual, RMSNorm → gated-GELU (T5 v1.1)
// or ReLU feed-forward → residual, final RMSNorm. No biases anywhere.
// UMT5 (UMT5EncoderModel, Wan's text encoder) is the same but for one thing:
// every block has its own relative-position bias table.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/json.h"
#include "io/weights.h"
#include "nn/attention.h"
#include "nn/layers.h"

namespace xdit::models {

struct T5Config {
  int64_t vocab_size = 32128;
  int64_t d_model = 4096;
  int64_t d_kv = 64;
  int64_t d_ff = 10240;
  int64_t num_layers = 24;
  int64_t num_heads = 64;
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  bool gated_gelu = true;       // feed_forward_proj "gated-gelu"; false: "relu"
  bool bias_per_block = false;  // model_type "umt5": each block its own bias table
  double layer_norm_epsilon = 1e-6;

  // Reads transformers' text_encoder/config.json, bounding every size;
  // throws one line naming `where` and the key.
  static T5Config from_json(const io::Json& j, const std::string& where);
  static T5Config xxl();  // google/t5-v1_1-xxl, PixArt's text encoder
  // The weights the encoder reads; the token embedding is stored as
  // "shared.weight" or "encoder.embed_tokens.weight" (`embedding_name`).
  io::WeightSpecs weight_specs(const std::string& embedding_name = "shared.weight") const;
  int64_t parameter_count() const;
  // FLOPs (2 × multiply-adds) of encoding batch × seq tokens.
  double encoder_flops(int64_t batch, int64_t seq) const;
};

// T5's bidirectional relative-position bucket of (key − query), computed in
// f32 exactly as transformers does.
int64_t t5_relative_bucket(int64_t relative_position, int64_t num_buckets, int64_t max_distance);

class T5Encoder {
 public:
  // Under tensor parallelism (`tp`) the attention is split by heads and the
  // feed-forward by units, as in the transformers' blocks (nn/tensor_parallel.h);
  // the embedding, the relative-position table and the norms stay whole.
  // `resident` false: the blocks are not built here but one at a time in
  // each encode(), each freed before the next (a one-shot encoding holds one
  // block's packed weights instead of all of them, and each block reuses
  // the previous one's memory); `weights` must then outlive the encoder.
  T5Encoder(const T5Config& cfg, const io::WeightSource& weights, DType compute,
            const nn::TensorParallel& tp = {}, bool resident = true);
  ~T5Encoder();
  const T5Config& config() const { return cfg_; }
  // ids and mask: [batch, seq] row-major; returns [batch, seq, d_model].
  // An empty mask runs without one, as FLUX.1 and SD3 call T5: the padding
  // positions attend and are attended to like any token.
  Tensor encode(const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask, int64_t batch,
                int64_t seq);

 private:
  struct Block;
  std::unique_ptr<Block> load_block(const io::WeightSource& w, int64_t i) const;
  // The [heads_, S, S] position bias of this rank's heads from a [num_buckets,
  // num_heads] table, with `bucket` the table row of each (key − query + S − 1).
  void fill_bias(const Tensor& table, const std::vector<int64_t>& bucket, int64_t S,
                 std::vector<float>& bias) const;
  // The log line of a split encoder: the bytes this rank read of the weights.
  void log_share(const io::WeightSource& w, size_t before) const;
  T5Config cfg_;
  nn::ComputeType ct_;
  nn::TensorParallel tp_;
  int64_t heads_;     // this rank's
  Tensor embedding_;  // [vocab, d_model], as stored (may be a view of the file)
  Tensor rel_bias_;   // block 0's [num_buckets, heads], host (the bias is made on the host)
  std::vector<std::unique_ptr<Block>> blocks_;  // empty when not resident
  const io::WeightSource* streamed_ = nullptr;  // the blocks' weights when not resident
  size_t streamed_before_ = 0;  // the source's loaded bytes before this encoder read any
  bool told_share_ = false;
  Tensor final_norm_;
  nn::Scratch h_, n_, qkv_, attn_, ff_, ff2_, tmp_;
  Tensor bias_keep_, mask_keep_;      // the position bias and key mask on a CUDA device
  Device device_ = current_device();  // where it was built: its weights and its calls
};

}  // namespace xdit::models
