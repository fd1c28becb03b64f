#include "parallel/pipefusion_attention.h"

#include <algorithm>

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
  for (const auto& [layer, b] : buffers_) n += b.k.nbytes() + b.v.nbytes();
  return n;
}

PipeFusionAttention::Buffer& PipeFusionAttention::buffer(int layer,
                                                         const kernels::AttentionArgs& args,
                                                         int64_t heads, bool whole, int64_t text) {
  Buffer& buf = buffers_[layer];
  const DType type = kernels::attention_packs_bf16(args.bf16) ? DType::kBF16 : DType::kF32;
  const int64_t size = args.batch * heads * (text + total_) * args.head_dim;
  if (!buf.k.defined() || buf.k.numel() != size || buf.k.device() != current_device() ||
      buf.bf16 != args.bf16 || buf.heads != heads || buf.batch != args.batch ||
      buf.head_dim != args.head_dim || buf.text != text) {
    buf.k = Tensor();  // freed before the new ones are made
    buf.v = Tensor();
    buf.k = Tensor::zeros({size}, type, current_device());
    buf.v = Tensor::zeros({size}, type, current_device());
    buf.batch = args.batch;
    buf.heads = heads;
    buf.head_dim = args.head_dim;
    buf.text = text;
    buf.bf16 = args.bf16;
    buf.filled = false;
  }
  XDIT_CHECK(whole || buf.filled, "PipeFusion: layer ", layer,
             " attends a patch before a warm-up step filled its K/V buffer");
  return buf;
}

void PipeFusionAttention::store(Buffer& buf, const float* k, const float* v, int64_t k_stride,
                                int64_t v_stride, int64_t batch_tokens, int64_t t,
                                int64_t n) const {
  const int64_t total = buf.text + total_;
  kernels::attention_pack_kv(k, k_stride, buf.batch, buf.heads, n, buf.head_dim, buf.bf16,
                             buf.k.raw(), total, t, batch_tokens * k_stride);
  kernels::attention_pack_kv(v, v_stride, buf.batch, buf.heads, n, buf.head_dim, buf.bf16,
                             buf.v.raw(), total, t, batch_tokens * v_stride);
}

void PipeFusionAttention::attend_buffer(const Buffer& buf, const kernels::AttentionArgs& args,
                                        const float* q, int64_t q_stride, int64_t q_len, float* out,
                                        int64_t out_stride) const {
  kernels::AttentionArgs a;
  a.q = q;
  a.q_stride = q_stride;
  a.out = out;
  a.out_stride = out_stride;
  a.k_packed = buf.k.raw();
  a.v_packed = buf.v.raw();
  a.batch = buf.batch;
  a.heads = buf.heads;
  a.q_len = q_len;
  a.kv_len = buf.text + total_;
  a.head_dim = buf.head_dim;
  a.scale = args.scale;
  a.bf16 = buf.bf16;
  kernels::attention(a);
}

std::vector<float> PipeFusionAttention::unpack(const Buffer& buf, bool keys) const {
  const int64_t total = buf.text + total_;
  DeviceScope scope(buf.k.device());
  Tensor out =
      Tensor::empty({buf.batch * total * buf.heads * buf.head_dim}, DType::kF32, buf.k.device());
  kernels::attention_unpack_kv(keys ? buf.k.raw() : buf.v.raw(), buf.batch, buf.heads, total,
                               buf.head_dim, buf.bf16, out.data<float>());
  return out.to_vector();
}

void PipeFusionAttention::attend(const kernels::AttentionArgs& args,
                                 const nn::AttentionSite& site) {
  if (progress_) progress_();  // between blocks: the pipeline's messages move on
  if (site.cross) {
    kernels::attention(args);
    return;
  }
  if (ulysses_ != nullptr && ulysses_->size() * ring_->size() > 1) {
    attend_sequence_parallel(args, site);
    return;
  }
  const int64_t text = site.text_tokens, n = args.q_len - text;
  XDIT_CHECK(total_ > 0 && n == t1_ - t0_ && args.kv_len == args.q_len &&
                 args.key_mask == nullptr && args.bias == nullptr,
             "PipeFusion attention called on ", n, " image tokens for the window [", t0_, ", ", t1_,
             ")");
  const bool whole = t0_ == 0 && t1_ == total_;
  Buffer& buf = buffer(site.layer, args, args.heads, whole, text);
  // The text's K/V are fresh at every call; the image's patch rows refresh
  // the buffer, the other rows stay as last computed.
  if (text > 0) store(buf, args.k, args.v, args.k_stride, args.v_stride, args.q_len, 0, text);
  if (whole || refresh_) {
    store(buf, args.k + text * args.k_stride, args.v + text * args.v_stride, args.k_stride,
          args.v_stride, args.q_len, text + t0_, n);
    buf.filled = buf.filled || whole;
  }
  attend_buffer(buf, args, args.q, args.q_stride, args.q_len, args.out, args.out_stride);
}

void PipeFusionAttention::set_sequence_split(std::vector<int64_t> tokens) {
  split_ = std::move(tokens);
  if (!exchange_) return;
  const int u = ulysses_->size();
  if (split_.empty()) {
    exchange_->set_counts({}, 0);
    return;
  }
  XDIT_CHECK(static_cast<int>(split_.size()) == u * ring_->size(), "sequence split of ",
             split_.size(), " shares for ", u * ring_->size(), " sequence-parallel ranks");
  const auto first = split_.begin() + static_cast<std::ptrdiff_t>(ring_->rank()) * u;
  exchange_->set_counts(std::vector<int64_t>(first, first + u),
                        *std::max_element(split_.begin(), split_.end()));
}

void PipeFusionAttention::attend_sequence_parallel(const kernels::AttentionArgs& args,
                                                   const nn::AttentionSite& site) {
  const int u = ulysses_->size(), r = ring_->size();
  const int64_t text = site.text_tokens;
  check_sequence_parallel_args(args, u, text);
  const int64_t B = args.batch, D = args.head_dim, Hu = args.heads / u, cols = Hu * D;
  const int64_t mine = args.q_len - text;
  // Every SP rank's share of the window (SP rank k = ring · u + ulysses).
  std::vector<int64_t> share = split_;
  if (share.empty()) share.assign(static_cast<size_t>(u * r), mine);
  int64_t window = 0;
  for (int64_t n : share) window += n;
  XDIT_CHECK(total_ > 0 && window == t1_ - t0_, "PipeFusion attention called on ", mine,
             " image tokens per rank (", u * r, " sequence-parallel ranks) for the window [", t0_,
             ", ", t1_, ")");
  const int64_t P = exchange_->chunk(mine);  // each Ulysses chunk after the exchange
  const int64_t Nu = P * u, S = text + Nu;   // per batch item after the exchange
  const bool whole = t0_ == 0 && t1_ == total_;
  Buffer& buf = buffer(site.layer, args, Hu, whole, text);
  const float* q = exchange_->to_heads(args, text);  // q, k, v: [B, S, Hu, D]
  const size_t n = static_cast<size_t>(B * S * cols);
  const float *k = q + n, *v = q + 2 * n;
  if (text > 0) store(buf, k, v, cols, cols, S, 0, text);
  if (whole || refresh_) {
    // The ring super-chunks' fresh image K/V ([2][B, Nu, Hu, D], Ulysses
    // chunks padded to P), each SP rank's real tokens stored at their place.
    const size_t m = static_cast<size_t>(B * Nu * cols);
    float* mine = kv_mine_.get(2 * m);
    for (int t = 0; t < 2; ++t)
      for (int64_t b = 0; b < B; ++b)
        kernels::copy_rows(mine + t * m + b * Nu * cols, cols,
                           (t == 0 ? k : v) + (b * S + text) * cols, cols, Nu, cols);
    const float* kv = mine;
    if (r > 1) {
      float* all = kv_all_.get(2 * m * static_cast<size_t>(r));
      ring_->allgather(mine, all, 2 * m, comm::Type::kF32);
      kv = all;
    }
    int64_t at = text + t0_;
    for (int i = 0; i < r; ++i)
      for (int j = 0; j < u; ++j) {
        const float* blk = kv + 2 * m * static_cast<size_t>(i) + j * P * cols;
        const int64_t cnt = share[static_cast<size_t>(i * u + j)];
        store(buf, blk, blk + m, cols, cols, Nu, at, cnt);
        at += cnt;
      }
    buf.filled = buf.filled || whole;
  }
  float* out = out_.get(n);
  attend_buffer(buf, args, q, cols, S, out, cols);
  exchange_->to_tokens(out, args, text);
}

}  // namespace xdit::parallel
