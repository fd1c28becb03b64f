#include "nn/attention.h"

#include <cmath>

#include "core/device.h"
#include "core/error.h"

namespace xdit::nn {

namespace {
class SerialAttention : public AttentionBackend {
 public:
  void attend(const kernels::AttentionArgs& args, const AttentionSite&) override {
    kernels::attention(args);
  }
  bool writes_bf16() const override { return !current_device().cuda(); }  // a CPU kernel's option
};
}  // namespace

AttentionBackend& serial_attention() {
  static SerialAttention s;
  return s;
}

Attention::Attention(const io::WeightSource& w, const std::string& prefix, int64_t dim,
                     int64_t heads, int64_t head_dim, int64_t kv_dim, bool bias, ComputeType ct,
                     const TensorParallel& tp)
    : dim_(dim),
      heads_(tp.part(heads, "attention heads of " + prefix)),
      head_dim_(head_dim),
      cross_(kv_dim != 0),
      bf16_(ct == ComputeType::kBF16),
      tp_(tp) {
  const int64_t inner = heads * head_dim;
  if (!cross_) {
    qkv_ = load_fused_linear(w, {prefix + ".to_q", prefix + ".to_k", prefix + ".to_v"}, dim,
                             {inner, inner, inner}, bias, ct, tp);
  } else {
    q_ = load_fused_linear(w, {prefix + ".to_q"}, dim, {inner}, bias, ct, tp);
    kv_ = load_fused_linear(w, {prefix + ".to_k", prefix + ".to_v"}, kv_dim, {inner, inner}, bias,
                            ct, tp);
  }
  out_ = load_row_linear(w, prefix + ".to_out.0", {inner}, dim, true, ct, tp);
}

void Attention::forward(const float* x, int64_t batch, int64_t seq, const float* context,
                        int64_t ctx_len, const uint8_t* ctx_mask, float* y,
                        AttentionBackend& backend, AttentionSite site,
                        AttentionScratch& scratch) const {
  run(x, false, batch, seq, context, ctx_len, ctx_mask, y, backend, site, scratch);
}

void Attention::forward(const uint16_t* x, int64_t batch, int64_t seq, const float* context,
                        int64_t ctx_len, const uint8_t* ctx_mask, float* y,
                        AttentionBackend& backend, AttentionSite site,
                        AttentionScratch& scratch) const {
  XDIT_CHECK(bf16_input(), "attention: a bf16 input needs bf16 layers");
  run(x, true, batch, seq, context, ctx_len, ctx_mask, y, backend, site, scratch);
}

void Attention::run(const void* x, bool x_bf16, int64_t batch, int64_t seq, const float* context,
                    int64_t ctx_len, const uint8_t* ctx_mask, float* y, AttentionBackend& backend,
                    AttentionSite site, AttentionScratch& scratch) const {
  const int64_t inner = heads_ * head_dim_;
  kernels::AttentionArgs a;
  a.batch = batch;
  a.heads = heads_;
  a.head_dim = head_dim_;
  a.q_len = seq;
  a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
  a.bf16 = bf16_;
  float* o = scratch.out.get(static_cast<size_t>(batch * seq * inner));
  // A bf16 output projection reads the attention's output as bf16 written
  // by the attention itself, where the backend can.
  uint16_t* o_bf16 =
      out_.is_bf16() && backend.writes_bf16() ? reinterpret_cast<uint16_t*>(o) : nullptr;
  a.out = o_bf16 != nullptr ? nullptr : o;
  a.out_bf16 = o_bf16;
  a.out_stride = inner;
  if (!cross_) {
    float* qkv = scratch.proj.get(static_cast<size_t>(batch * seq * 3 * inner));
    if (x_bf16)
      qkv_.forward_bf16(static_cast<const uint16_t*>(x), batch * seq, qkv);
    else
      qkv_.forward(static_cast<const float*>(x), batch * seq, qkv);
    a.q = qkv;
    a.k = qkv + inner;
    a.v = qkv + 2 * inner;
    a.q_stride = a.k_stride = a.v_stride = 3 * inner;
    a.kv_len = seq;
  } else {
    XDIT_CHECK(context != nullptr, "cross-attention needs a context");
    float* q = scratch.proj.get(static_cast<size_t>(batch * seq * inner));
    float* kv = scratch.kv.get(static_cast<size_t>(batch * ctx_len * 2 * inner));
    if (x_bf16)
      q_.forward_bf16(static_cast<const uint16_t*>(x), batch * seq, q);
    else
      q_.forward(static_cast<const float*>(x), batch * seq, q);
    kv_.forward(context, batch * ctx_len, kv);
    a.q = q;
    a.q_stride = inner;
    a.k = kv;
    a.v = kv + inner;
    a.k_stride = a.v_stride = 2 * inner;
    a.kv_len = ctx_len;
    a.key_mask = ctx_mask;
  }
  site.cross = cross_;
  backend.attend(a, site);
  if (o_bf16 != nullptr)
    out_.forward_bf16(o_bf16, batch * seq, y);
  else
    out_.forward(o, batch * seq, y);
  tp_.all_reduce(y, batch * seq * dim_);
}

kernels::AttentionArgs fused_qkv_args(const float* qkv, int64_t batch, int64_t seq, int64_t heads,
                                      int64_t head_dim, float* out, int64_t out_stride, bool bf16) {
  const int64_t D = heads * head_dim;
  kernels::AttentionArgs a;
  a.q = qkv;
  a.k = qkv + D;
  a.v = qkv + 2 * D;
  a.q_stride = a.k_stride = a.v_stride = 3 * D;
  a.out = out;
  a.out_stride = out_stride;
  a.batch = batch;
  a.heads = heads;
  a.q_len = a.kv_len = seq;
  a.head_dim = head_dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  a.bf16 = bf16;
  return a;
}

}  // namespace xdit::nn
