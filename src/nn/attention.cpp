#include "nn/attention.h"

#include <algorithm>
#include <cmath>

#include "core/device.h"
#include "core/error.h"

namespace xdit::nn {

std::vector<uint8_t> text_key_mask(const uint8_t* text_mask, int64_t batch, int64_t text,
                                   int64_t image) {
  if (text_mask == nullptr) return {};
  std::vector<uint8_t> m(static_cast<size_t>(batch * (text + image)), 1);
  for (int64_t b = 0; b < batch; ++b)
    std::copy_n(text_mask + b * text, text, m.begin() + b * (text + image));
  return m;
}

namespace {
class SerialAttention : public AttentionBackend {
 public:
  void attend(const kernels::AttentionArgs& args, const AttentionSite&) override {
    kernels::attention(args);
  }
  bool takes_bf16() const override { return !current_device().cuda(); }  // a CPU kernel's option
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

void Attention::set_qk_norm_across_heads(const io::WeightSource& w, const std::string& prefix,
                                         float eps) {
  const int64_t inner = heads_ * head_dim_, all = inner * tp_.size, first = tp_.rank * inner;
  const auto share = [&](const std::string& name) {
    const std::vector<float> v = w.get(name, {all}).to(DType::kF32).to_vector();
    return Tensor::from_vector(std::vector<float>(v.begin() + first, v.begin() + first + inner),
                               {inner})
        .to_device(current_device());
  };
  norm_q_ = share(prefix + ".norm_q.weight");
  norm_k_ = share(prefix + ".norm_k.weight");
  norm_eps_ = eps;
}

void Attention::forward(const float* x, int64_t batch, int64_t seq, const float* context,
                        int64_t ctx_len, const uint8_t* ctx_mask, float* y,
                        AttentionBackend& backend, AttentionSite site, AttentionScratch& scratch,
                        const RopeTables& rope) const {
  run(x, false, batch, seq, context, ctx_len, ctx_mask, y, backend, site, scratch, rope);
}

void Attention::forward(const uint16_t* x, int64_t batch, int64_t seq, const float* context,
                        int64_t ctx_len, const uint8_t* ctx_mask, float* y,
                        AttentionBackend& backend, AttentionSite site, AttentionScratch& scratch,
                        const RopeTables& rope) const {
  XDIT_CHECK(bf16_input(), "attention: a bf16 input needs bf16 layers");
  run(x, true, batch, seq, context, ctx_len, ctx_mask, y, backend, site, scratch, rope);
}

void Attention::norm_rows(float* x, int64_t rows, int64_t stride, int64_t seq, const Tensor& weight,
                          const RopeTables& rope, AttentionScratch& scratch) const {
  const int64_t inner = heads_ * head_dim_;
  float* sumsq = scratch.sumsq.get(static_cast<size_t>(rows));
  kernels::row_sum_squares(x, rows, stride, inner, sumsq);
  tp_.all_reduce(sumsq, rows);  // every rank's heads
  kernels::rms_scale_rope(x, rows, stride, inner, sumsq, inner * tp_.size, norm_eps_,
                          weight.data<float>(), seq, head_dim_, rope.cos, rope.sin);
}

void Attention::run(const void* x, bool x_bf16, int64_t batch, int64_t seq, const float* context,
                    int64_t ctx_len, const uint8_t* ctx_mask, float* y, AttentionBackend& backend,
                    AttentionSite site, AttentionScratch& scratch, const RopeTables& rope) const {
  const int64_t inner = heads_ * head_dim_;
  const bool qk_norm = norm_q_.defined();
  XDIT_CHECK(rope.cos == nullptr || (qk_norm && !cross_),
             "attention: rotary tables are for self-attention with a q/k norm");
  // With bf16 layers on both sides and a backend that takes them, q/k/v and
  // the output travel in bf16: the projections round their own output and
  // the attention reads it, and writes the rounded output the output
  // projection reads, with no f32 copies written, reread and converted.
  // (Not with a q/k norm, which runs on f32 rows.)
  const bool b16 = bf16_ && !qk_norm && backend.takes_bf16() &&
                   kernels::attention_packs_bf16(true) && out_.is_bf16() &&
                   (cross_ ? q_.is_bf16() && kv_.is_bf16() : qkv_.is_bf16());
  // m rows of `in` projected by l into buf, in f32 or (b16) bf16.
  const auto project = [&](const kernels::Linear& l, const void* in, bool in_bf16, int64_t m,
                           Scratch& buf) -> void* {
    float* f = buf.get(static_cast<size_t>(m * l.out_features()));
    auto* h = reinterpret_cast<uint16_t*>(f);
    const auto* in_h = static_cast<const uint16_t*>(in);
    const auto* in_f = static_cast<const float*>(in);
    if (b16 && in_bf16)
      l.forward_bf16(in_h, m, h);
    else if (b16)
      l.forward_to_bf16(in_f, m, h);
    else if (in_bf16)
      l.forward_bf16(in_h, m, f);
    else
      l.forward(in_f, m, f);
    return f;
  };
  // The operand `offset` elements into a projection, as f32 or bf16.
  const auto operand = [&](const void* p, int64_t offset, const float*& f, const uint16_t*& h) {
    if (b16)
      h = static_cast<const uint16_t*>(p) + offset;
    else
      f = static_cast<const float*>(p) + offset;
  };
  kernels::AttentionArgs a;
  a.batch = batch;
  a.heads = heads_;
  a.head_dim = head_dim_;
  a.q_len = seq;
  a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim_));
  a.bf16 = bf16_;
  if (!cross_) {
    void* qkv = project(qkv_, x, x_bf16, batch * seq, scratch.proj);
    if (qk_norm) {
      auto* f = static_cast<float*>(qkv);
      norm_rows(f, batch * seq, 3 * inner, seq, norm_q_, rope, scratch);
      norm_rows(f + inner, batch * seq, 3 * inner, seq, norm_k_, rope, scratch);
    }
    operand(qkv, 0, a.q, a.q_bf16);
    operand(qkv, inner, a.k, a.k_bf16);
    operand(qkv, 2 * inner, a.v, a.v_bf16);
    a.q_stride = a.k_stride = a.v_stride = 3 * inner;
    a.kv_len = seq;
  } else {
    XDIT_CHECK(context != nullptr, "cross-attention needs a context");
    void* q = project(q_, x, x_bf16, batch * seq, scratch.proj);
    void* kv = project(kv_, context, false, batch * ctx_len, scratch.kv);
    if (qk_norm) {
      norm_rows(static_cast<float*>(q), batch * seq, inner, seq, norm_q_, {}, scratch);
      norm_rows(static_cast<float*>(kv), batch * ctx_len, 2 * inner, ctx_len, norm_k_, {}, scratch);
    }
    operand(q, 0, a.q, a.q_bf16);
    operand(kv, 0, a.k, a.k_bf16);
    operand(kv, inner, a.v, a.v_bf16);
    a.q_stride = inner;
    a.k_stride = a.v_stride = 2 * inner;
    a.kv_len = ctx_len;
    a.key_mask = ctx_mask;
  }
  float* o = scratch.out.get(static_cast<size_t>(batch * seq * inner));
  auto* o_bf16 = reinterpret_cast<uint16_t*>(o);
  if (b16)
    a.out_bf16 = o_bf16;
  else
    a.out = o;
  a.out_stride = inner;
  site.cross = cross_;
  backend.attend(a, site);
  if (b16)
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
