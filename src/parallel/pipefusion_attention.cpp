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

bool PipeFusionAttention::fit(Buffer& buf, const kernels::AttentionArgs& args, int64_t heads,
                              int64_t text, int64_t tokens) {
  const DType type = kernels::attention_packs_bf16(args.bf16) ? DType::kBF16 : DType::kF32;
  const int64_t size = args.batch * heads * (text + tokens) * args.head_dim;
  if (buf.k.defined() && buf.k.numel() == size && buf.k.device() == current_device() &&
      buf.bf16 == args.bf16 && buf.heads == heads && buf.batch == args.batch &&
      buf.head_dim == args.head_dim && buf.text == text && buf.tokens == tokens)
    return false;
  buf.k = Tensor();  // freed before the new ones are made
  buf.v = Tensor();
  buf.k = Tensor::zeros({size}, type, current_device());
  buf.v = Tensor::zeros({size}, type, current_device());
  buf.batch = args.batch;
  buf.heads = heads;
  buf.head_dim = args.head_dim;
  buf.text = text;
  buf.tokens = tokens;
  buf.bf16 = args.bf16;
  buf.filled = false;
  return true;
}

PipeFusionAttention::Buffer& PipeFusionAttention::buffer(int layer,
                                                         const kernels::AttentionArgs& args,
                                                         int64_t heads, bool whole, int64_t text,
                                                         int64_t tokens) {
  Buffer& buf = buffers_[layer];
  fit(buf, args, heads, text, tokens);
  XDIT_CHECK(whole || buf.filled, "PipeFusion: layer ", layer,
             " attends a patch before a warm-up step filled its K/V buffer");
  return buf;
}

void PipeFusionAttention::store(Buffer& buf, const float* k, const float* v, int64_t k_stride,
                                int64_t v_stride, int64_t batch_tokens, int64_t t,
                                int64_t n) const {
  const int64_t total = buf.text + buf.tokens;
  kernels::attention_pack_kv(k, k_stride, buf.batch, buf.heads, n, buf.head_dim, buf.bf16,
                             buf.k.raw(), total, t, batch_tokens * k_stride);
  kernels::attention_pack_kv(v, v_stride, buf.batch, buf.heads, n, buf.head_dim, buf.bf16,
                             buf.v.raw(), total, t, batch_tokens * v_stride);
}

void PipeFusionAttention::attend_buffer(const Buffer& buf, const kernels::AttentionArgs& args,
                                        const nn::AttentionSite& site, const float* q,
                                        int64_t q_stride, int64_t q_len, float* out,
                                        int64_t out_stride) {
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
  a.kv_len = buf.text + buf.tokens;
  a.head_dim = buf.head_dim;
  a.scale = args.scale;
  a.bf16 = buf.bf16;
  const std::vector<uint8_t> mask =
      nn::text_key_mask(site.text_mask, buf.batch, buf.text, buf.tokens);
  a.key_mask = nn::on_current_device(mask, mask_);
  kernels::attention(a);
}

std::vector<float> PipeFusionAttention::unpack(const Buffer& buf, bool keys) const {
  const int64_t total = buf.text + buf.tokens;
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
                 (args.key_mask == nullptr || site.text_mask != nullptr) && args.bias == nullptr,
             "PipeFusion attention called on ", n, " image tokens for the window [", t0_, ", ", t1_,
             ")");
  const bool whole = t0_ == 0 && t1_ == total_;
  Buffer& buf = buffer(site.layer, args, args.heads, whole, text, total_);
  // The text's K/V are fresh at every call; the image's patch rows refresh
  // the buffer, the other rows stay as last computed.
  if (text > 0) store(buf, args.k, args.v, args.k_stride, args.v_stride, args.q_len, 0, text);
  if (whole || refresh_) {
    store(buf, args.k + text * args.k_stride, args.v + text * args.v_stride, args.k_stride,
          args.v_stride, args.q_len, text + t0_, n);
    buf.filled = buf.filled || whole;
  }
  attend_buffer(buf, args, site, args.q, args.q_stride, args.q_len, args.out, args.out_stride);
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
  check_sequence_parallel_args(args, u, site);
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
  const float* q = exchange_->to_heads(args, text);  // q, k, v: [B, S, Hu, D]
  const size_t n = static_cast<size_t>(B * S * cols);
  const float *k = q + n, *v = q + 2 * n;
  // The ring super-chunks' fresh image K/V ([2][B, Nu, Hu, D], Ulysses
  // chunks padded to P) and where each SP rank's real tokens go.
  const size_t m = static_cast<size_t>(B * Nu * cols);
  const auto store_fresh = [&](Buffer& into, const float* kv, size_t apart) {
    int64_t at = text + t0_;
    for (int i = 0; i < r; ++i)
      for (int j = 0; j < u; ++j) {
        const float* blk = kv + apart * static_cast<size_t>(i) + j * P * cols;
        const int64_t cnt = share[static_cast<size_t>(i * u + j)];
        store(into, blk, blk + m, cols, cols, Nu, at, cnt);
        at += cnt;
      }
  };
  const auto copy_fresh = [&](float* dst) {
    for (int t = 0; t < 2; ++t)
      for (int64_t b = 0; b < B; ++b)
        kernels::copy_rows(dst + t * m + b * Nu * cols, cols,
                           (t == 0 ? k : v) + (b * S + text) * cols, cols, Nu, cols);
  };
  float* out = out_.get(n);
  if (r == 1) {  // Ulysses alone: the rank's buffer holds the whole sequence for its heads
    Buffer& buf = buffer(site.layer, args, Hu, whole, text, total_);
    if (text > 0) store(buf, k, v, cols, cols, S, 0, text);
    if (whole || refresh_) {
      float* mine = kv_mine_.get(2 * m);
      copy_fresh(mine);
      store_fresh(buf, mine, 0);
      buf.filled = buf.filled || whole;
    }
    attend_buffer(buf, args, site, q, cols, S, out, cols);
    exchange_->to_tokens(out, args, text);
    return;
  }
  // Ring: ring rank j keeps image tokens [total·j/r, total·(j+1)/r) of the
  // layer (a 1/r share). Each call all-gathers the shares with every ring
  // rank's fresh super-chunk into one whole-sequence buffer the layers take
  // turns with: the text fresh, the shares, the window's fresh K/V over them;
  // the queries attend to it, and this rank's share is updated from it. The
  // whole buffer holds the bytes the rank would otherwise keep (the same
  // packing, in token order), so the result is PipeFusion's to the bit.
  const int me = ring_->rank();
  const auto owned = [&](int j) { return std::pair{total_ * j / r, total_ * (j + 1) / r}; };
  const auto [o0, o1] = owned(me);
  Buffer& mine_kv = buffer(site.layer, args, Hu, whole, 0, o1 - o0);
  const size_t esz = kernels::attention_packs_bf16(args.bf16) ? 2 : 4;
  const int64_t most = (total_ + r - 1) / r;  // no share is longer
  const size_t row = static_cast<size_t>(D) * esz;
  const size_t share_bytes = (static_cast<size_t>(B * Hu * most) * row + 15) / 16 * 16;
  const size_t blob = 2 * share_bytes + 2 * m * sizeof(float);
  auto* send = static_cast<uint8_t*>(kv_mine_.bytes(blob));
  const size_t my_bytes = static_cast<size_t>(B * Hu * (o1 - o0)) * row;
  kernels::copy_row_bytes(send, my_bytes, mine_kv.k.raw(), my_bytes, 1, my_bytes);
  kernels::copy_row_bytes(send + share_bytes, my_bytes, mine_kv.v.raw(), my_bytes, 1, my_bytes);
  copy_fresh(reinterpret_cast<float*>(send + 2 * share_bytes));
  auto* all = static_cast<uint8_t*>(kv_all_.bytes(blob * static_cast<size_t>(r)));
  ring_->allgather(send, all, blob, comm::Type::kByte);
  fit(whole_, args, Hu, text, total_);
  const size_t whole_pitch = static_cast<size_t>(text + total_) * row;
  // Share j's tokens [B·Hu][len, D] to or from their place in the whole buffer.
  const auto place = [&](int j, uint8_t* share_k, uint8_t* share_v, bool into_whole) {
    const auto [a0, a1] = owned(j);
    const size_t len = static_cast<size_t>(a1 - a0) * row,
                 at = static_cast<size_t>(text + a0) * row;
    auto* wk = static_cast<uint8_t*>(whole_.k.raw()) + at;
    auto* wv = static_cast<uint8_t*>(whole_.v.raw()) + at;
    if (into_whole) {
      kernels::copy_row_bytes(wk, whole_pitch, share_k, len, B * Hu, len);
      kernels::copy_row_bytes(wv, whole_pitch, share_v, len, B * Hu, len);
    } else {
      kernels::copy_row_bytes(share_k, len, wk, whole_pitch, B * Hu, len);
      kernels::copy_row_bytes(share_v, len, wv, whole_pitch, B * Hu, len);
    }
  };
  for (int j = 0; j < r; ++j) {
    uint8_t* b = all + blob * static_cast<size_t>(j);
    place(j, b, b + share_bytes, true);
  }
  if (text > 0) store(whole_, k, v, cols, cols, S, 0, text);
  if (whole || refresh_) {
    store_fresh(whole_, reinterpret_cast<const float*>(all + 2 * share_bytes),
                blob / sizeof(float));
    place(me, static_cast<uint8_t*>(mine_kv.k.raw()), static_cast<uint8_t*>(mine_kv.v.raw()),
          false);
    mine_kv.filled = mine_kv.filled || whole;
  }
  attend_buffer(whole_, args, site, q, cols, S, out, cols);
  exchange_->to_tokens(out, args, text);
}

}  // namespace xdit::parallel
