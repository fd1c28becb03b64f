#include "parallel/usp_attention.h"

#include <algorithm>

#include "core/error.h"

namespace xdit::parallel {

using kernels::copy_rows;

UspAttention::UspAttention(comm::Communicator& ulysses, comm::Communicator& ring)
    : ulysses_(ulysses), ring_(ring), exchange_(ulysses) {}

void UspAttention::ring_attention(const float* q, const float* k, const float* v, float* out,
                                  int64_t B, int64_t H, int64_t text, int64_t N, int64_t D,
                                  float scale, bool bf16, const uint8_t* text_mask) {
  const int r = ring_.size(), me = ring_.rank();
  const int64_t S = text + N, hd = H * D;  // local queries: the text, then my image tokens
  // Uneven shares without Ulysses: this rank's rows are the first of its
  // padded chunk, and only they query — the attention follows the split
  // (under Ulysses each chunk holds every rank's rows of some heads: padded).
  const int64_t Sq =
      ulysses_.size() == 1 && !split_.empty() ? text + split_[static_cast<size_t>(me)] : S;
  const size_t kv_n = static_cast<size_t>(B * N * hd);
  // The image K and V of a block travel together: [2][B, N, H, D]. The text's
  // K/V are attended once, with the local block (xDiT's "front").
  float* kv = kv_.get(2 * kv_n);
  float* kv_next = kv_next_.get(2 * kv_n);
  for (int t = 0; t < 2; ++t)
    for (int64_t b = 0; b < B; ++b)
      copy_rows(kv + t * kv_n + b * N * hd, hd, (t == 0 ? k : v) + (b * S + text) * hd, hd, N, hd);
  float* part = part_.get(static_cast<size_t>(B * S * hd));
  float* lse = lse_.get(static_cast<size_t>(B * H * S));
  float* lse_part = lse_part_.get(static_cast<size_t>(B * H * S));
  kernels::AttentionArgs a;
  a.q = q;
  a.q_stride = a.k_stride = a.v_stride = a.out_stride = hd;
  a.batch = B;
  a.heads = H;
  a.q_len = S;
  a.head_dim = D;
  a.scale = scale;
  a.bf16 = bf16;
  for (int step = 0; step < r; ++step) {
    // Post the exchange for the next block before computing on this one.
    std::unique_ptr<comm::Request> sreq, rreq;
    if (step + 1 < r) {
      rreq = ring_.irecv(kv_next, 2 * kv_n, comm::Type::kF32, (me - 1 + r) % r, 100 + step);
      sreq = ring_.isend(kv, 2 * kv_n, comm::Type::kF32, (me + 1) % r, 100 + step);
      sreq->test();  // starts the pair now (NCCL holds point-to-point calls until a test or wait)
    }
    a.k = step == 0 ? k : kv;
    a.v = step == 0 ? v : kv + kv_n;
    a.kv_len = step == 0 ? S : N;
    // Uneven shares: the padding of the block's Ulysses chunks masked out;
    // the text's padding with the local block.
    const std::vector<uint8_t> mask =
        key_mask(B, step == 0 ? text : 0, N / ulysses_.size(), (me - step + r) % r,
                 step == 0 ? text_mask : nullptr);
    a.key_mask = nn::on_current_device(mask, mask_);
    a.out = step == 0 ? out : part;
    a.lse = step == 0 ? lse : lse_part;
    const auto progress = [&] {
      rreq->test();  // the next block's K/V move while this one is attended
      sreq->test();
    };
    const bool pieces = rreq && !current_device().cuda();
    if (Sq == S) {
      if (pieces)
        attention_in_pieces(a, progress);
      else
        kernels::attention(a);
      if (step > 0) kernels::attention_merge(out, lse, part, lse_part, B, S, H, D);
    } else {
      // Only this rank's own rows query: per batch item, the first Sq of its
      // S rows (the padding rows' output is never read).
      for (int64_t b = 0; b < B; ++b) {
        const kernels::AttentionArgs p = kernels::attention_item_rows(a, b, 0, Sq);
        if (pieces)
          attention_in_pieces(p, progress);
        else
          kernels::attention(p);
        if (step > 0)
          kernels::attention_merge(out + b * S * hd, lse + b * H * S, part + b * S * hd,
                                   lse_part + b * H * S, 1, Sq, H, D);
      }
    }
    if (step + 1 < r) {
      rreq->wait();
      sreq->wait();
      std::swap(kv, kv_next);
    }
  }
}

void UspAttention::attention_in_pieces(const kernels::AttentionArgs& a,
                                       const std::function<void()>& progress) {
  // Per batch item and group of heads: each piece's lse rows [heads, q_len]
  // are contiguous in the whole [B, H, q_len], and its q/k/v/out columns an
  // offset within the rows (the strides stay the row's).
  const int64_t groups = std::min<int64_t>(a.heads, kRingPieces), D = a.head_dim;
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t h0 = a.heads * g / groups, h1 = a.heads * (g + 1) / groups;
      kernels::AttentionArgs p = a;
      p.batch = 1;
      p.heads = h1 - h0;
      p.q = a.q + b * a.q_len * a.q_stride + h0 * D;
      p.k = a.k + b * a.kv_len * a.k_stride + h0 * D;
      p.v = a.v + b * a.kv_len * a.v_stride + h0 * D;
      p.out = a.out + b * a.q_len * a.out_stride + h0 * D;
      p.lse = a.lse + (b * a.heads + h0) * a.q_len;
      if (a.key_mask != nullptr) p.key_mask = a.key_mask + b * a.kv_len;
      kernels::attention(p);
      progress();
    }
}

void check_sequence_parallel_args(const kernels::AttentionArgs& args, int u,
                                  const nn::AttentionSite& site) {
  const int64_t text = site.text_tokens;
  XDIT_CHECK((args.key_mask == nullptr || site.text_mask != nullptr) && args.bias == nullptr &&
                 args.kv_len == args.q_len,
             "sequence-parallel self-attention takes unbiased attention, masked only in the text");
  XDIT_CHECK(text >= 0 && text < args.q_len, "joint attention with ", text,
             " text tokens needs image tokens after them (", args.q_len, " tokens)");
  XDIT_CHECK(args.heads % u == 0, "attention heads ", args.heads,
             " not divisible by the Ulysses degree ", u);
}

void UlyssesExchange::set_counts(std::vector<int64_t> counts, int64_t pad) {
  counts_ = std::move(counts);
  pad_ = pad;
}

int64_t UlyssesExchange::chunk(int64_t mine) const {
  return counts_.empty() ? mine : pad_;
}

float* UlyssesExchange::to_heads(const kernels::AttentionArgs& args, int64_t text) {
  const int u = group_.size(), me = group_.rank();
  const int64_t B = args.batch, H = args.heads, D = args.head_dim, N = args.q_len - text;
  const int64_t P = chunk(N);  // every rank's chunk, padded to the longest share
  XDIT_CHECK(N <= P, "Ulysses: ", N, " tokens exceed the chunk of ", P);
  const int64_t Hu = H / u, Nu = P * u, cols = Hu * D;  // after: my heads, the group's tokens
  const int64_t S = text + Nu;  // per batch item: the text, then the image tokens
  const size_t block = static_cast<size_t>(B * P * cols);  // one q/k/v block per destination
  // Pack [dest j][q|k|v][B, P, Hu, D] with heads [j·Hu, (j+1)·Hu) of my image
  // tokens; the padding rows are zeros.
  float* send = send_.get(static_cast<size_t>(u) * 3 * block);
  if (N < P) kernels::zero_bytes(send, static_cast<size_t>(u) * 3 * block * 4);
  const float* src[3] = {args.q, args.k, args.v};
  const int64_t stride[3] = {args.q_stride, args.k_stride, args.v_stride};
  for (int j = 0; j < u; ++j)
    for (int t = 0; t < 3; ++t)
      for (int64_t b = 0; b < B; ++b)
        copy_rows(send + (static_cast<size_t>(j) * 3 + t) * block + b * P * cols, cols,
                  src[t] + (b * (text + N) + text) * stride[t] + j * cols, stride[t], N, cols);
  float* recv = recv_.get(static_cast<size_t>(u) * 3 * block);
  group_.alltoall(send, recv, 3 * block, comm::Type::kF32);
  // Unpack to q/k/v [B, S, Hu, D]: the text (replicated: my heads, taken
  // locally), then token chunk i from Ulysses rank i.
  const size_t full = static_cast<size_t>(B * S * cols);
  float* qkv = qkv_.get(3 * full);
  for (int t = 0; t < 3; ++t)
    for (int64_t b = 0; b < B; ++b) {
      float* item = qkv + t * full + b * S * cols;
      for (int i = 0; i < u; ++i)
        copy_rows(item + (text + i * P) * cols, cols,
                  recv + (static_cast<size_t>(i) * 3 + t) * block + b * P * cols, cols, P, cols);
      if (text > 0)
        copy_rows(item, cols, src[t] + b * (text + N) * stride[t] + me * cols, stride[t], text,
                  cols);
    }
  return qkv;
}

void UlyssesExchange::to_tokens(const float* out, const kernels::AttentionArgs& args,
                                int64_t text) {
  const int u = group_.size();
  const int64_t B = args.batch, D = args.head_dim, N = args.q_len - text, P = chunk(N);
  const int64_t Hu = args.heads / u, cols = Hu * D, S = text + P * u;
  // Token chunk i of my heads goes to Ulysses rank i; I receive my tokens' heads.
  const size_t oblock = static_cast<size_t>(B * P * cols);
  float* send = send_.get(static_cast<size_t>(u) * oblock);
  for (int i = 0; i < u; ++i)
    for (int64_t b = 0; b < B; ++b)
      copy_rows(send + static_cast<size_t>(i) * oblock + b * P * cols, cols,
                out + (b * S + text + i * P) * cols, cols, P, cols);
  float* recv = recv_.get(static_cast<size_t>(u) * oblock);
  group_.alltoall(send, recv, oblock, comm::Type::kF32);
  for (int j = 0; j < u; ++j)
    for (int64_t b = 0; b < B; ++b)
      copy_rows(args.out + (b * (text + N) + text) * args.out_stride + j * cols, args.out_stride,
                recv + static_cast<size_t>(j) * oblock + b * P * cols, cols, N, cols);
  if (text == 0) return;
  // The text's output: every Ulysses rank computed its heads; all-gather them.
  const size_t tblock = static_cast<size_t>(B * text * cols);
  float* mine = send_.get(tblock);
  for (int64_t b = 0; b < B; ++b)
    copy_rows(mine + b * text * cols, cols, out + b * S * cols, cols, text, cols);
  float* all = recv_.get(tblock * static_cast<size_t>(u));
  group_.allgather(mine, all, tblock, comm::Type::kF32);
  for (int j = 0; j < u; ++j)
    for (int64_t b = 0; b < B; ++b)
      copy_rows(args.out + b * (text + N) * args.out_stride + j * cols, args.out_stride,
                all + static_cast<size_t>(j) * tblock + b * text * cols, cols, text, cols);
}

void UlyssesExchange::release_buffers() {
  for (auto* s : {&send_, &recv_, &qkv_}) s->release();
}

void UspAttention::release_buffers() {
  for (auto* s : {&kv_, &kv_next_, &out_, &part_, &lse_, &lse_part_}) s->release();
  mask_ = Tensor();
  exchange_.release_buffers();
}

void UspAttention::set_sequence_split(std::vector<int64_t> tokens) {
  split_ = std::move(tokens);
  const int u = ulysses_.size();
  if (split_.empty()) {
    exchange_.set_counts({}, 0);
    return;
  }
  XDIT_CHECK(static_cast<int>(split_.size()) == u * ring_.size(), "sequence split of ",
             split_.size(), " shares for ", u * ring_.size(), " sequence-parallel ranks");
  const int64_t pad = *std::max_element(split_.begin(), split_.end());
  const auto first = split_.begin() + static_cast<std::ptrdiff_t>(ring_.rank()) * u;
  exchange_.set_counts(std::vector<int64_t>(first, first + u), pad);
}

std::vector<uint8_t> UspAttention::key_mask(int64_t batch, int64_t text, int64_t chunk,
                                            int ring_rank, const uint8_t* text_mask) const {
  if (split_.empty() && (text_mask == nullptr || text == 0)) return {};
  const int u = ulysses_.size();
  const int64_t keys = text + u * chunk;
  std::vector<uint8_t> m(static_cast<size_t>(batch * keys), 0);
  for (int64_t b = 0; b < batch; ++b) {
    uint8_t* row = m.data() + b * keys;
    if (text_mask != nullptr)
      std::copy_n(text_mask + b * text, text, row);
    else
      std::fill(row, row + text, 1);
    for (int i = 0; i < u; ++i) {
      const int64_t real = split_.empty() ? chunk : split_[static_cast<size_t>(ring_rank * u + i)];
      std::fill(row + text + i * chunk, row + text + i * chunk + real, 1);
    }
  }
  return m;
}

void UspAttention::attend(const kernels::AttentionArgs& args, const nn::AttentionSite& site) {
  const int u = ulysses_.size(), r = ring_.size();
  if (site.cross || (u == 1 && r == 1)) {
    kernels::attention(args);  // the text stays whole on every rank
    return;
  }
  const int64_t text = site.text_tokens;
  check_sequence_parallel_args(args, u, site);
  const int64_t B = args.batch, D = args.head_dim, Hu = args.heads / u;
  const int64_t P = exchange_.chunk(args.q_len - text), Nu = P * u, S = text + Nu;
  const size_t full = static_cast<size_t>(B * S * Hu * D);
  const float* q = exchange_.to_heads(args, text);
  float* out = out_.get(full);
  if (r == 1) {
    const std::vector<uint8_t> mask = key_mask(B, text, P, 0, site.text_mask);
    kernels::AttentionArgs a;
    a.q = q;
    a.k = q + full;
    a.v = q + 2 * full;
    a.q_stride = a.k_stride = a.v_stride = a.out_stride = Hu * D;
    a.out = out;
    a.batch = B;
    a.heads = Hu;
    a.q_len = a.kv_len = S;
    a.head_dim = D;
    a.scale = args.scale;
    a.bf16 = args.bf16;
    a.key_mask = nn::on_current_device(mask, mask_);
    kernels::attention(a);
  } else {
    ring_attention(q, q + full, q + 2 * full, out, B, Hu, text, Nu, D, args.scale, args.bf16,
                   site.text_mask);
  }
  exchange_.to_tokens(out, args, text);
}

}  // namespace xdit::parallel
