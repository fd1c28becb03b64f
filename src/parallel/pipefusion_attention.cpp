#include "parallel/pipefusion_attention.h"

#include <cstring>

#include "core/error.h"
#include "kernels/kernels.h"

namespace xdit::parallel {

PipeFusionAttention::PipeFusionAttention(comm::Communicator& ulysses, comm::Communicator& ring)
    : ulysses_(&ulysses), ring_(&ring), exchange_(std::make_unique<UlyssesExchange>(ulysses)) {}

void PipeFusionAttention::set_window(int64_t total, int64_t t0, int64_t t1) {
  XDIT_CHECK(0 <= t0 && t0 < t1 && t1 <= total, "PipeFusion window [", t0, ", ", t1, ") of ",
             total);
  total_ = total;
  t0_ = t0;
  t1_ = t1;
}

size_t PipeFusionAttention::buffer_bytes() const {
  size_t n = 0;
  for (const auto& [layer, b] : buffers_) n += (b.k.size() + b.v.size()) * sizeof(float);
  return n;
}

PipeFusionAttention::Buffer& PipeFusionAttention::buffer(int layer, int64_t B, int64_t cols,
                                                         bool whole) {
  Buffer& buf = buffers_[layer];
  const size_t size = static_cast<size_t>(B * total_ * cols);
  if (buf.k.size() != size) {
    buf.k.assign(size, 0.0f);
    buf.v.assign(size, 0.0f);
    buf.filled = false;
  }
  XDIT_CHECK(whole || buf.filled, "PipeFusion: layer ", layer,
             " attends a patch before a warm-up step filled its K/V buffer");
  return buf;
}

void PipeFusionAttention::store(Buffer& buf, const float* k, const float* v, int64_t k_stride,
                                int64_t v_stride, int64_t B, int64_t t, int64_t n,
                                int64_t cols) const {
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < n; ++i) {
      const size_t row = static_cast<size_t>((b * total_ + t + i) * cols);
      std::memcpy(buf.k.data() + row, k + (b * n + i) * k_stride, static_cast<size_t>(cols) * 4);
      std::memcpy(buf.v.data() + row, v + (b * n + i) * v_stride, static_cast<size_t>(cols) * 4);
    }
}

void PipeFusionAttention::attend(const kernels::AttentionArgs& args,
                                 const nn::AttentionSite& site) {
  if (site.cross) {
    kernels::attention(args);
    return;
  }
  if (ulysses_ != nullptr && ulysses_->size() * ring_->size() > 1) {
    attend_sequence_parallel(args, site);
    return;
  }
  XDIT_CHECK(total_ > 0 && args.q_len == t1_ - t0_ && args.kv_len == args.q_len,
             "PipeFusion attention called on ", args.q_len, " tokens for the window [", t0_, ", ",
             t1_, ")");
  const int64_t B = args.batch, HD = args.heads * args.head_dim, n = args.q_len;
  const bool whole = t0_ == 0 && t1_ == total_;
  Buffer& buf = buffer(site.layer, B, HD, whole);
  if (whole || refresh_) {
    store(buf, args.k, args.v, args.k_stride, args.v_stride, B, t0_, n, HD);
    buf.filled = buf.filled || whole;
  }
  kernels::AttentionArgs a = args;
  a.k = buf.k.data();
  a.v = buf.v.data();
  a.k_stride = a.v_stride = HD;
  a.kv_len = total_;
  kernels::attention(a);
}

void PipeFusionAttention::attend_sequence_parallel(const kernels::AttentionArgs& args,
                                                   const nn::AttentionSite& site) {
  const int u = ulysses_->size(), r = ring_->size();
  check_sequence_parallel_args(args, u);
  const int64_t B = args.batch, D = args.head_dim, Hu = args.heads / u, cols = Hu * D;
  const int64_t Nu = args.q_len * u;  // my ring super-chunk: u·N tokens
  XDIT_CHECK(total_ > 0 && Nu * r == t1_ - t0_, "PipeFusion attention called on ", args.q_len,
             " tokens per rank (", u * r, " sequence-parallel ranks) for the window [", t0_, ", ",
             t1_, ")");
  const bool whole = t0_ == 0 && t1_ == total_;
  Buffer& buf = buffer(site.layer, B, cols, whole);
  const float* q = exchange_->to_heads(args);  // q, k, v: [B, Nu, Hu, D]
  const size_t n = static_cast<size_t>(B * Nu * cols);
  if (whole || refresh_) {
    if (r == 1) {
      store(buf, q + n, q + 2 * n, cols, cols, B, t0_, Nu, cols);
    } else {
      // Every ring rank's super-chunk of fresh K/V, stored at its tokens.
      kv_.resize(2 * n);
      std::memcpy(kv_.data(), q + n, 2 * n * sizeof(float));
      kv_all_.resize(2 * n * static_cast<size_t>(r));
      ring_->allgather(kv_.data(), kv_all_.data(), 2 * n, comm::Type::kF32);
      for (int i = 0; i < r; ++i) {
        const float* kv = kv_all_.data() + 2 * n * static_cast<size_t>(i);
        store(buf, kv, kv + n, cols, cols, B, t0_ + i * Nu, Nu, cols);
      }
    }
    buf.filled = buf.filled || whole;
  }
  out_.resize(n);
  kernels::AttentionArgs a;
  a.q = q;
  a.k = buf.k.data();
  a.v = buf.v.data();
  a.q_stride = a.k_stride = a.v_stride = a.out_stride = cols;
  a.out = out_.data();
  a.batch = B;
  a.heads = Hu;
  a.q_len = Nu;
  a.kv_len = total_;
  a.head_dim = D;
  a.scale = args.scale;
  a.bf16 = args.bf16;
  kernels::attention(a);
  exchange_->to_tokens(out_.data(), args);
}

}  // namespace xdit::parallel
