#include "models/t5.h"

#include <cmath>

#include "core/error.h"
#include "core/log.h"
#include "kernels/dispatch.h"
#include "kernels/kernels.h"
#include "nn/attention.h"

namespace xdit::models {

struct T5Encoder::Block {
  Tensor ln0, ln1;
  Tensor rel_bias;  // UMT5: this block's [num_buckets, heads] table, host
  kernels::Linear qkv, wi;
  nn::RowParallelLinear o, wo;  // row-parallel: they all-reduce their own partial sums
};

T5Encoder::T5Encoder(const T5Config& cfg, const io::WeightSource& w, DType compute,
                     const nn::TensorParallel& tp, bool resident)
    : cfg_(cfg),
      ct_(kernels::resolve_compute_type(compute)),
      tp_(tp),
      heads_(tp.part(cfg.num_heads, "attention heads of the T5 encoder")) {
  const int64_t d = cfg.d_model;
  tp.part(cfg.d_ff, "feed-forward units (d_ff) of the T5 encoder");
  const size_t before = w.loaded().total;
  const char* emb_name = w.has("shared.weight") ? "shared.weight" : "encoder.embed_tokens.weight";
  embedding_ = w.get(emb_name, {cfg.vocab_size, d});  // kept as stored; rows converted on lookup
  rel_bias_ = w.get("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                    {cfg.relative_attention_num_buckets, cfg.num_heads})
                  .to(DType::kF32);
  final_norm_ = nn::load_param(w, "encoder.final_layer_norm.weight", {d});
  if (!resident) {
    streamed_ = &w;
    streamed_before_ = before;  // the first encode logs the share
    return;
  }
  {
    const nn::LoadStaging staging;  // one buffer for all blocks' assembled matrices
    for (int64_t i = 0; i < cfg.num_layers; ++i) blocks_.push_back(load_block(w, i));
  }
  log_share(w, before);
}

std::unique_ptr<T5Encoder::Block> T5Encoder::load_block(const io::WeightSource& w,
                                                        int64_t i) const {
  const T5Config& cfg = cfg_;
  const int64_t d = cfg.d_model, inner = cfg.num_heads * cfg.d_kv;
  const std::string p = "encoder.block." + std::to_string(i) + ".layer.";
  auto b = std::make_unique<Block>();
  b->ln0 = nn::load_param(w, p + "0.layer_norm.weight", {d});
  b->ln1 = nn::load_param(w, p + "1.layer_norm.weight", {d});
  const std::string sa = p + "0.SelfAttention.";
  if (cfg.bias_per_block)
    b->rel_bias = w.get(sa + "relative_attention_bias.weight",
                        {cfg.relative_attention_num_buckets, cfg.num_heads})
                      .to(DType::kF32);
  b->qkv = nn::load_fused_linear(w, {sa + "q", sa + "k", sa + "v"}, d, {inner, inner, inner}, false,
                                 ct_, tp_);
  b->o = nn::RowParallelLinear(w, sa + "o", inner, d, false, ct_, tp_);
  const std::string ff = p + "1.DenseReluDense.";
  if (cfg.gated_gelu) {
    b->wi = nn::load_fused_linear(w, {ff + "wi_0", ff + "wi_1"}, d, {cfg.d_ff, cfg.d_ff}, false,
                                  ct_, tp_);
  } else {
    b->wi = nn::load_fused_linear(w, {ff + "wi"}, d, {cfg.d_ff}, false, ct_, tp_);
  }
  b->wo = nn::RowParallelLinear(w, ff + "wo", cfg.d_ff, d, false, ct_, tp_);
  return b;
}

void T5Encoder::log_share(const io::WeightSource& w, size_t before) const {
  if (tp_.split() && tp_.comm != nullptr)  // not when only loading (memory figures)
    XDIT_INFO("T5 encoder split over ", tp_.size, " ranks (heads and feed-forward units), rank ",
              tp_.rank, ": loaded ", human_size(static_cast<double>(w.loaded().total - before)),
              " of ", human_size(static_cast<double>(w.stored_bytes())),
              " (as stored; the embedding whole)");
}

T5Encoder::~T5Encoder() = default;

void T5Encoder::fill_bias(const Tensor& table, const std::vector<int64_t>& bucket, int64_t S,
                          std::vector<float>& bias) const {
  const int64_t H = heads_, h0 = tp_.begin(cfg_.num_heads);
  bias.resize(static_cast<size_t>(H * S * S));
  const float* t = table.data<float>();
  for (int64_t hh = 0; hh < H; ++hh)
    for (int64_t q = 0; q < S; ++q)
      for (int64_t k = 0; k < S; ++k)
        bias[static_cast<size_t>((hh * S + q) * S + k)] =
            t[bucket[static_cast<size_t>(k - q + S - 1)] * cfg_.num_heads + h0 + hh];
}

Tensor T5Encoder::encode(const std::vector<int32_t>& ids, const std::vector<uint8_t>& mask,
                         int64_t B, int64_t S) {
  DeviceScope scope(device_);
  const T5Config& c = cfg_;
  // Under tensor parallelism: this rank's H heads and d_ff / T units.
  const int64_t d = c.d_model, H = heads_, inner = H * c.d_kv, M = B * S, F = c.d_ff / tp_.size;
  XDIT_CHECK(static_cast<int64_t>(ids.size()) == M &&
                 (mask.empty() || static_cast<int64_t>(mask.size()) == M),
             "T5 encode: ids and mask must hold batch x seq values");
  float* h = h_.get(static_cast<size_t>(M * d));
  const size_t row_bytes = static_cast<size_t>(d) * dtype_size(embedding_.dtype());
  // The embedding rows are looked up on the host (the table stays there) and
  // copied where the ops run.
  nn::HostRows staged(h, static_cast<size_t>(M * d));
  float* rows = staged.data();
  for (int64_t t = 0; t < M; ++t) {
    const int32_t id = ids[static_cast<size_t>(t)];
    XDIT_CHECK(id >= 0 && id < c.vocab_size, "token id ", id, " is outside the T5 vocabulary of ",
               c.vocab_size);
    convert_to_f32(static_cast<const char*>(embedding_.raw()) + static_cast<size_t>(id) * row_bytes,
                   embedding_.dtype(), rows + t * d, static_cast<size_t>(d));
  }
  staged.upload();
  // Relative-position bias [H, S, S]: block 0's table for all blocks (T5),
  // or each block's own (UMT5), made again for each block.
  std::vector<int64_t> bucket(static_cast<size_t>(2 * S - 1));
  for (int64_t rp = -(S - 1); rp <= S - 1; ++rp)
    bucket[static_cast<size_t>(rp + S - 1)] =
        t5_relative_bucket(rp, c.relative_attention_num_buckets, c.relative_attention_max_distance);
  std::vector<float> bias;
  fill_bias(rel_bias_, bucket, S, bias);
  const float* bias_here = nn::on_current_device(bias, bias_keep_);
  const uint8_t* mask_here = nn::on_current_device(mask, mask_keep_);
  const float eps = static_cast<float>(c.layer_norm_epsilon);
  float* n = n_.get(static_cast<size_t>(M * d));
  float* qkv = qkv_.get(static_cast<size_t>(M * 3 * inner));
  float* attn = attn_.get(static_cast<size_t>(M * inner));
  float* ff = ff_.get(static_cast<size_t>(M * (c.gated_gelu ? 2 : 1) * F));
  float* ff2 = ff2_.get(static_cast<size_t>(M * F));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    // Not resident: this block is built now and freed after it ran, its
    // buffers then kept by core/buffer_pool for the next block's same sizes.
    std::unique_ptr<Block> built;
    if (streamed_ != nullptr) {
      const nn::LoadStaging staging;
      built = load_block(*streamed_, i);
    }
    const Block* blk = built ? built.get() : blocks_[static_cast<size_t>(i)].get();
    if (c.bias_per_block && i > 0) {
      fill_bias(blk->rel_bias, bucket, S, bias);
      bias_here = nn::on_current_device(bias, bias_keep_);
    }
    kernels::rms_norm(h, n, M, d, eps, blk->ln0.data<float>());
    blk->qkv.forward(n, M, qkv);
    kernels::AttentionArgs a =
        nn::fused_qkv_args(qkv, B, S, H, c.d_kv, attn, inner, ct_ == nn::ComputeType::kBF16);
    a.scale = 1.0f;  // T5 folds the scaling into its initialisation
    a.key_mask = mask_here;
    a.bias = bias_here;
    kernels::attention(a);
    blk->o.forward_add(attn, M, h, tmp_);  // h += o(attn)
    kernels::rms_norm(h, n, M, d, eps, blk->ln1.data<float>());
    blk->wi.forward(n, M, ff);
    if (c.gated_gelu) {
      kernels::gelu_tanh_gate(ff, ff2, M, F);
    } else {
      kernels::relu(ff, ff2, M * F);
    }
    blk->wo.forward_add(ff2, M, h, tmp_);  // h += wo(ff)
  }
  if (streamed_ != nullptr && !told_share_) log_share(*streamed_, streamed_before_);
  told_share_ = true;
  Tensor out = Tensor::empty({B, S, d}, DType::kF32, current_device());
  kernels::rms_norm(h, out.data<float>(), M, d, eps, final_norm_.data<float>());
  return out.to_device(Device{});  // the embeddings on the host
}

}  // namespace xdit::models
