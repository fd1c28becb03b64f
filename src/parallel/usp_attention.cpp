#include "parallel/usp_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace xdit::parallel {

UspAttention::UspAttention(comm::Communicator& ulysses, comm::Communicator& ring)
    : ulysses_(ulysses), ring_(ring), exchange_(ulysses) {}

void merge_attention(float* o, float* lse, const float* ob, const float* lse_b, int64_t B,
                     int64_t S, int64_t H, int64_t D) {
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t li = (b * H + h) * S + s;
        const float a = lse[li], c = lse_b[li];
        const float m = std::max(a, c);
        if (m == -INFINITY) continue;
        const float l = m + std::log(std::exp(a - m) + std::exp(c - m));
        const float wa = std::exp(a - l), wc = std::exp(c - l);
        float* dst = o + ((b * S + s) * H + h) * D;
        const float* src = ob + ((b * S + s) * H + h) * D;
        for (int64_t d = 0; d < D; ++d) dst[d] = wa * dst[d] + wc * src[d];
        lse[li] = l;
      }
}

void UspAttention::ring_attention(const float* q, const float* k, const float* v, float* out,
                                  int64_t B, int64_t H, int64_t text, int64_t N, int64_t D,
                                  float scale, bool bf16) {
  const int r = ring_.size(), me = ring_.rank();
  const int64_t S = text + N;  // local queries: the text, then my image tokens
  const size_t kv_n = static_cast<size_t>(B * N * H * D);
  // The image K and V of a block travel together: [2][B, N, H, D]. The text's
  // K/V are attended once, with the local block (xDiT's "front").
  kv_.resize(2 * kv_n);
  kv_next_.resize(2 * kv_n);
  for (int t = 0; t < 2; ++t)
    for (int64_t b = 0; b < B; ++b)
      std::memcpy(kv_.data() + t * kv_n + b * N * H * D, (t == 0 ? k : v) + (b * S + text) * H * D,
                  static_cast<size_t>(N * H * D) * 4);
  part_.resize(static_cast<size_t>(B * S * H * D));
  lse_.resize(static_cast<size_t>(B * H * S));
  lse_part_.resize(lse_.size());
  kernels::AttentionArgs a;
  a.q = q;
  a.q_stride = a.k_stride = a.v_stride = a.out_stride = H * D;
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
      rreq = ring_.irecv(kv_next_.data(), 2 * kv_n, comm::Type::kF32, (me - 1 + r) % r, 100 + step);
      sreq = ring_.isend(kv_.data(), 2 * kv_n, comm::Type::kF32, (me + 1) % r, 100 + step);
    }
    a.k = step == 0 ? k : kv_.data();
    a.v = step == 0 ? v : kv_.data() + kv_n;
    a.kv_len = step == 0 ? S : N;
    // Uneven shares: the padding of the block's Ulysses chunks masked out.
    std::vector<uint8_t> mask;
    if (!split_.empty()) mask = key_mask(B, step == 0 ? text : 0, (me - step + r) % r);
    a.key_mask = mask.empty() ? nullptr : mask.data();
    a.out = step == 0 ? out : part_.data();
    a.lse = step == 0 ? lse_.data() : lse_part_.data();
    kernels::attention(a);
    if (step > 0) merge_attention(out, lse_.data(), part_.data(), lse_part_.data(), B, S, H, D);
    if (step + 1 < r) {
      rreq->wait();
      sreq->wait();
      std::swap(kv_, kv_next_);
    }
  }
}

void check_sequence_parallel_args(const kernels::AttentionArgs& args, int u, int64_t text) {
  XDIT_CHECK(args.key_mask == nullptr && args.bias == nullptr && args.kv_len == args.q_len,
             "sequence-parallel self-attention takes unmasked, unbiased attention");
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
  const int64_t Hu = H / u, Nu = P * u;  // after the all-to-all: my heads, the group's tokens
  const int64_t S = text + Nu;           // per batch item: the text, then the image tokens
  const size_t block = static_cast<size_t>(B * P * Hu * D);  // one q/k/v block per destination
  // Pack [dest j][q|k|v][B, P, Hu, D] with heads [j·Hu, (j+1)·Hu) of my image
  // tokens; the padding rows stay zero.
  send_.assign(static_cast<size_t>(u) * 3 * block, 0.0f);
  const float* src[3] = {args.q, args.k, args.v};
  const int64_t stride[3] = {args.q_stride, args.k_stride, args.v_stride};
#pragma omp parallel for collapse(2)
  for (int j = 0; j < u; ++j)
    for (int t = 0; t < 3; ++t)
      for (int64_t bn = 0; bn < B * N; ++bn) {
        const int64_t b = bn / N, n = bn % N;
        std::memcpy(send_.data() + (static_cast<size_t>(j) * 3 + t) * block + (b * P + n) * Hu * D,
                    src[t] + (b * (text + N) + text + n) * stride[t] + j * Hu * D,
                    static_cast<size_t>(Hu * D) * 4);
      }
  recv_.resize(send_.size());
  group_.alltoall(send_.data(), recv_.data(), 3 * block, comm::Type::kF32);
  // Unpack to q/k/v [B, S, Hu, D]: the text (replicated: my heads, taken
  // locally), then token chunk i from Ulysses rank i.
  const size_t full = static_cast<size_t>(B * S * Hu * D);
  qkv_.resize(3 * full);
  float* qkv[3] = {qkv_.data(), qkv_.data() + full, qkv_.data() + 2 * full};
#pragma omp parallel for collapse(2)
  for (int i = 0; i < u; ++i)
    for (int t = 0; t < 3; ++t)
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(qkv[t] + (b * S + text + i * P) * Hu * D,
                    recv_.data() + (static_cast<size_t>(i) * 3 + t) * block + b * P * Hu * D,
                    static_cast<size_t>(P * Hu * D) * 4);
  for (int t = 0; t < 3; ++t)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t l = 0; l < text; ++l)
        std::memcpy(qkv[t] + (b * S + l) * Hu * D,
                    src[t] + (b * (text + N) + l) * stride[t] + me * Hu * D,
                    static_cast<size_t>(Hu * D) * 4);
  return qkv_.data();
}

void UlyssesExchange::to_tokens(const float* out, const kernels::AttentionArgs& args,
                                int64_t text) {
  const int u = group_.size();
  const int64_t B = args.batch, D = args.head_dim, N = args.q_len - text, P = chunk(N);
  const int64_t Hu = args.heads / u, Nu = P * u, S = text + Nu;
  // Token chunk i of my heads goes to Ulysses rank i; I receive my tokens' heads.
  const size_t oblock = static_cast<size_t>(B * P * Hu * D);
  send_.resize(static_cast<size_t>(u) * oblock);
#pragma omp parallel for collapse(2)
  for (int i = 0; i < u; ++i)
    for (int64_t b = 0; b < B; ++b)
      std::memcpy(send_.data() + static_cast<size_t>(i) * oblock + b * P * Hu * D,
                  out + (b * S + text + i * P) * Hu * D, static_cast<size_t>(P * Hu * D) * 4);
  recv_.resize(send_.size());
  group_.alltoall(send_.data(), recv_.data(), oblock, comm::Type::kF32);
#pragma omp parallel for collapse(2)
  for (int j = 0; j < u; ++j)
    for (int64_t bn = 0; bn < B * N; ++bn) {
      const int64_t b = bn / N, n = bn % N;
      std::memcpy(args.out + (b * (text + N) + text + n) * args.out_stride + j * Hu * D,
                  recv_.data() + static_cast<size_t>(j) * oblock + (b * P + n) * Hu * D,
                  static_cast<size_t>(Hu * D) * 4);
    }
  if (text == 0) return;
  // The text's output: every Ulysses rank computed its heads; all-gather them.
  const size_t tblock = static_cast<size_t>(B * text * Hu * D);
  send_.resize(tblock);
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(send_.data() + b * text * Hu * D, out + b * S * Hu * D,
                static_cast<size_t>(text * Hu * D) * 4);
  recv_.resize(tblock * static_cast<size_t>(u));
  group_.allgather(send_.data(), recv_.data(), tblock, comm::Type::kF32);
  for (int j = 0; j < u; ++j)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t l = 0; l < text; ++l)
        std::memcpy(args.out + (b * (text + N) + l) * args.out_stride + j * Hu * D,
                    recv_.data() + static_cast<size_t>(j) * tblock + (b * text + l) * Hu * D,
                    static_cast<size_t>(Hu * D) * 4);
}

void UlyssesExchange::release_buffers() {
  for (auto* v : {&send_, &recv_, &qkv_}) std::vector<float>().swap(*v);
}

void UspAttention::release_buffers() {
  for (auto* v : {&kv_, &kv_next_, &out_, &part_, &lse_, &lse_part_}) std::vector<float>().swap(*v);
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

std::vector<uint8_t> UspAttention::key_mask(int64_t batch, int64_t text, int ring_rank) const {
  const int u = ulysses_.size();
  const int64_t pad = *std::max_element(split_.begin(), split_.end());
  std::vector<uint8_t> m(static_cast<size_t>(batch * (text + u * pad)), 0);
  for (int64_t b = 0; b < batch; ++b) {
    uint8_t* row = m.data() + b * (text + u * pad);
    std::fill(row, row + text, 1);
    for (int i = 0; i < u; ++i)
      std::fill(row + text + i * pad,
                row + text + i * pad + split_[static_cast<size_t>(ring_rank * u + i)], 1);
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
  check_sequence_parallel_args(args, u, text);
  const int64_t B = args.batch, D = args.head_dim, Hu = args.heads / u;
  const int64_t Nu = exchange_.chunk(args.q_len - text) * u, S = text + Nu;
  const size_t full = static_cast<size_t>(B * S * Hu * D);
  const float* q = exchange_.to_heads(args, text);
  out_.resize(full);
  if (r == 1) {
    std::vector<uint8_t> mask;
    if (!split_.empty()) mask = key_mask(B, text, 0);
    kernels::AttentionArgs a;
    a.q = q;
    a.k = q + full;
    a.v = q + 2 * full;
    a.q_stride = a.k_stride = a.v_stride = a.out_stride = Hu * D;
    a.out = out_.data();
    a.batch = B;
    a.heads = Hu;
    a.q_len = a.kv_len = S;
    a.head_dim = D;
    a.scale = args.scale;
    a.bf16 = args.bf16;
    a.key_mask = mask.empty() ? nullptr : mask.data();
    kernels::attention(a);
  } else {
    ring_attention(q, q + full, q + 2 * full, out_.data(), B, Hu, text, Nu, D, args.scale,
                   args.bf16);
  }
  exchange_.to_tokens(out_.data(), args, text);
}

}  // namespace xdit::parallel
