#include "nn/joint_attention.h"

#include "core/error.h"
#include "kernels/kernels.h"

namespace xdit::nn {

JointAttention::JointAttention(const io::WeightSource& w, const std::string& prefix,
                               const JointAttentionConfig& cfg, ComputeType ct,
                               const TensorParallel& tp)
    : dim_(cfg.dim),
      heads_(tp.part(cfg.heads, "attention heads of " + prefix)),
      head_dim_(cfg.head_dim),
      context_(cfg.context),
      context_out_(cfg.context && !cfg.context_pre_only),
      pre_only_(cfg.pre_only),
      bf16_(ct == ComputeType::kBF16),
      tp_(tp),
      qk_eps_(cfg.qk_eps) {
  const int64_t D = cfg.dim, inner = cfg.heads * cfg.head_dim, hd = cfg.head_dim;
  const std::string a = prefix + ".";
  qkv_ = load_fused_linear(w, {a + "to_q", a + "to_k", a + "to_v"}, D, {inner, inner, inner},
                           cfg.bias, ct, tp);
  if (context_)
    qkv_context_ = load_fused_linear(w, {a + "add_q_proj", a + "add_k_proj", a + "add_v_proj"}, D,
                                     {inner, inner, inner}, cfg.bias, ct, tp);
  if (!pre_only_) to_out_ = load_row_linear(w, a + "to_out.0", {inner}, D, cfg.bias, ct, tp);
  if (context_out_)
    to_add_out_ = load_row_linear(w, a + "to_add_out", {inner}, D, cfg.bias, ct, tp);
  if (cfg.qk_norm) {
    nq_ = load_param(w, a + "norm_q.weight", {hd});
    nk_ = load_param(w, a + "norm_k.weight", {hd});
    if (context_) {
      nq_context_ = load_param(w, a + "norm_added_q.weight", {hd});
      nk_context_ = load_param(w, a + "norm_added_k.weight", {hd});
    }
  }
}

void JointAttention::norm_rope(float* qkv, const JointCall& call, int64_t row_begin, int64_t rows,
                               const Tensor& wq, const Tensor& wk) const {
  if (!wq.defined()) return;
  if (!call.rope_per_item || call.rope_cos == nullptr) {
    kernels::qk_norm_rope(qkv, call.batch, call.seq(), row_begin, rows, heads_, head_dim_, qk_eps_,
                          wq.data<float>(), wk.data<float>(), call.rope_cos, call.rope_sin);
    return;
  }
  const int64_t S = call.seq(), table = S * head_dim_;
  for (int64_t b = 0; b < call.batch; ++b)  // each item its own table
    kernels::qk_norm_rope(qkv + b * S * 3 * width(), 1, S, row_begin, rows, heads_, head_dim_,
                          qk_eps_, wq.data<float>(), wk.data<float>(), call.rope_cos + b * table,
                          call.rope_sin + b * table);
}

const float* JointAttention::attend(const float* x, const JointCall& call,
                                    AttentionBackend& backend, AttentionScratch& scratch) const {
  XDIT_CHECK(call.rope_cos == nullptr || nq_.defined(),
             "joint attention: the rotation runs with the qk norm, which this layer has not");
  const int64_t B = call.batch, L = call.text, N = call.image, S = call.seq(), D = dim_,
                A = width();
  float* qkv = scratch.proj.get(static_cast<size_t>(B * S * 3 * A));
  float* out = scratch.out.get(static_cast<size_t>(B * S * A));
  if (context_) {  // per batch item: the text's rows [0, L), the image's [L, S)
    for (int64_t b = 0; b < B; ++b) {
      qkv_context_.forward(x + b * S * D, L, qkv + b * S * 3 * A);
      qkv_.forward(x + (b * S + L) * D, N, qkv + (b * S + L) * 3 * A);
    }
    norm_rope(qkv, call, 0, L, nq_context_, nk_context_);
    norm_rope(qkv, call, L, N, nq_, nk_);
  } else {
    qkv_.forward(x, B * S, qkv);
    norm_rope(qkv, call, 0, S, nq_, nk_);
  }
  AttentionSite site;
  site.layer = call.layer;
  site.text_tokens = L;
  site.text_mask = call.text_mask;
  kernels::AttentionArgs args = fused_qkv_args(qkv, B, S, heads_, head_dim_, out, A, bf16_);
  scratch.mask_host = text_key_mask(call.text_mask, B, L, N);
  args.key_mask = on_current_device(scratch.mask_host, scratch.mask);
  backend.attend(args, site);
  return out;
}

void JointAttention::forward(const float* x, const JointCall& call, float* y,
                             AttentionBackend& backend, AttentionScratch& scratch) const {
  XDIT_CHECK(!pre_only_, "joint attention: a pre_only layer has no output projection");
  const float* att = attend(x, call, backend, scratch);
  const int64_t B = call.batch, L = call.text, N = call.image, S = call.seq(), D = dim_,
                A = width();
  if (!context_) {
    to_out_.forward(att, B * S, y);
    tp_.all_reduce(y, B * S * D);  // the row-parallel output's partial sums
    return;
  }
  for (int64_t b = 0; b < B; ++b) {
    to_out_.forward(att + (b * S + L) * A, N, y + (b * S + L) * D);
    if (context_out_) to_add_out_.forward(att + b * S * A, L, y + b * S * D);
  }
  if (context_out_) {
    tp_.all_reduce(y, B * S * D);
  } else {  // only the image rows hold outputs
    for (int64_t b = 0; b < B; ++b) tp_.all_reduce(y + (b * S + L) * D, N * D);
  }
}

SingleStreamMlp::SingleStreamMlp(const io::WeightSource& w, const std::string& prefix, int64_t dim,
                                 int64_t attention, int64_t inner, ComputeType ct,
                                 const TensorParallel& tp)
    : mlp_(load_fused_linear(w, {prefix + ".proj_mlp"}, dim, {inner}, true, ct, tp,
                             kernels::Activation::kGeluTanh)),
      // proj_out's two column blocks, the bias with the attention's
      out_attn_(load_row_linear(w, prefix + ".proj_out", {attention, inner}, dim, true, ct, tp, 0)),
      out_mlp_(load_row_linear(w, prefix + ".proj_out", {attention, inner}, dim, false, ct, tp, 1)),
      tp_(tp) {}

void SingleStreamMlp::forward(const float* x, const float* attention, int64_t m, float* y,
                              float* hidden) const {
  // proj_out([attention | mlp]) = W_mlp·mlp + W_attn·attention + b.
  if (mlp_.is_bf16() && out_mlp_.is_bf16()) {
    auto* hb = reinterpret_cast<uint16_t*>(hidden);
    mlp_.forward_to_bf16(x, m, hb);  // GELU(tanh) fused
    out_mlp_.forward_bf16(hb, m, y);
  } else {
    mlp_.forward(x, m, hidden);
    out_mlp_.forward(hidden, m, y);
  }
  out_attn_.forward(attention, m, y, /*accumulate=*/true);
  tp_.all_reduce(y, m * out_attn_.out_features());  // one for both halves' partial sums
}

}  // namespace xdit::nn
