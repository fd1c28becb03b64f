#include "parallel/patch_attention.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "kernels/kernels.h"

namespace xdit::parallel {

namespace {
constexpr int kTag = 1 << 21;  // + the layer: one exchange per layer per step
}  // namespace

// Exchanged K/V travel in the packed buffers' element type (bf16 when the
// attention packs bf16: the same rounding the packing would do, half the
// bytes and half the exchange buffers).
struct PatchAttention::Layer {
  Tensor k, v;  // packed [B, H, text + total, D], on the attention's device
  int64_t batch = 0, heads = 0, head_dim = 0, text = 0, total = 0;
  size_t esz = 4;  // bytes per packed (and exchanged) element
  bool bf16 = false, filled = false;
  std::vector<int64_t> share, offset;  // every rank's band and its first token
  nn::Scratch fresh;                   // this rank's K then V: [2][B, n, H·D]
  std::vector<nn::Scratch> recv;       // every peer's, as fresh
  std::vector<std::unique_ptr<comm::Request>> pending;

  // Tokens [0, n) of exchanged K/V ([2][B, n, H·D], batch items `per_item`
  // tokens apart, 0: n) into the buffer at token t.
  void store(const uint8_t* kv, int64_t n, int64_t t, int64_t per_item = 0) {
    if (per_item == 0) per_item = n;
    const int64_t hd = heads * head_dim, all = text + total, bs = per_item * hd;
    for (int i = 0; i < 2; ++i) {
      const uint8_t* src = kv + static_cast<size_t>(i * batch * bs) * esz;
      void* dst = i == 0 ? k.raw() : v.raw();
      if (esz == 2)
        kernels::attention_pack_kv_bf16(reinterpret_cast<const uint16_t*>(src), hd, batch, heads, n,
                                        head_dim, dst, all, t, bs);
      else
        kernels::attention_pack_kv(reinterpret_cast<const float*>(src), hd, batch, heads, n,
                                   head_dim, bf16, dst, all, t, bs);
    }
  }
};

PatchAttention::PatchAttention(comm::Communicator& group, bool displaced, bool full_sync)
    : group_(group), displaced_(displaced), full_sync_(full_sync) {}

PatchAttention::~PatchAttention() {
  for (auto& [id, l] : layers_)
    for (auto& r : l->pending) r->wait();
}

void PatchAttention::set_sequence_split(std::vector<int64_t> tokens) {
  split_ = std::move(tokens);
}

void PatchAttention::begin_step(int64_t step, int64_t steps, bool sync) {
  sync_ = sync || full_sync_;
  last_step_ = step + 1 >= steps;
  if (step == 0)  // a new run: nothing stale from the previous image may be used
    for (auto& [id, l] : layers_) {
      for (auto& r : l->pending) r->wait();
      l->pending.clear();
      l->filled = false;
    }
}

std::vector<int64_t> PatchAttention::shares(int64_t mine) const {
  if (split_.empty()) return std::vector<int64_t>(static_cast<size_t>(group_.size()), mine);
  XDIT_CHECK(static_cast<int>(split_.size()) == group_.size() &&
                 split_[static_cast<size_t>(group_.rank())] == mine,
             "patch parallel: a band of ", mine, " tokens against the split");
  return split_;
}

void PatchAttention::complete(Layer& l) {
  if (l.pending.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& r : l.pending) r->wait();
  l.pending.clear();
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!refresh_) return;  // the test switch: keep what the warm-up stored
  for (int p = 0; p < group_.size(); ++p)
    if (p != group_.rank())
      l.store(static_cast<const uint8_t*>(l.recv[static_cast<size_t>(p)].bytes(0)),
              l.share[static_cast<size_t>(p)], l.text + l.offset[static_cast<size_t>(p)]);
}

void PatchAttention::attend_rows(const kernels::AttentionArgs& args, const nn::AttentionSite& site,
                                 const Layer& l, int64_t first, int64_t count) {
  kernels::AttentionArgs a;
  a.q = args.q;
  a.q_stride = args.q_stride;
  a.out = args.out;
  a.out_stride = args.out_stride;
  a.k_packed = l.k.raw();
  a.v_packed = l.v.raw();
  a.batch = l.batch;
  a.heads = l.heads;
  a.q_len = args.q_len;
  a.kv_len = l.text + l.total;
  a.head_dim = l.head_dim;
  a.scale = args.scale;
  a.bf16 = l.bf16;
  const std::vector<uint8_t> mask = nn::text_key_mask(site.text_mask, l.batch, l.text, l.total);
  a.key_mask = nn::on_current_device(mask, mask_);
  if (first == 0 && count == args.q_len) {  // every row: one call
    kernels::attention(a);
    return;
  }
  for (int64_t b = 0; b < l.batch; ++b)  // part of each item's rows: one call per item
    kernels::attention(kernels::attention_item_rows(a, b, first, count));
}

void PatchAttention::attend(const kernels::AttentionArgs& args, const nn::AttentionSite& site) {
  if (site.cross || !displaced_ || group_.size() == 1) {
    kernels::attention(args);  // cross-attention, or naive: the band alone
    return;
  }
  XDIT_CHECK((args.key_mask == nullptr || site.text_mask != nullptr) && args.bias == nullptr &&
                 args.kv_len == args.q_len,
             "patch-parallel self-attention takes unbiased attention, masked only in the text");
  // Drive every layer's pending exchange: MPI moves large messages only
  // inside MPI calls, so without this they would wait for their own layer.
  for (auto& [id, other] : layers_)
    for (auto& r : other->pending) r->test();
  const int n_ranks = group_.size(), me = group_.rank();
  const int64_t text = site.text_tokens, n = args.q_len - text;
  const int64_t B = args.batch, H = args.heads, D = args.head_dim, hd = H * D;
  const std::vector<int64_t> share = shares(n);
  int64_t total = 0;
  for (const int64_t s : share) total += s;
  auto& slot = layers_[site.layer];
  if (!slot) slot = std::make_unique<Layer>();
  Layer& l = *slot;
  if (!l.k.defined() || l.k.device() != current_device() || l.batch != B || l.heads != H ||
      l.head_dim != D || l.text != text || l.total != total || l.bf16 != args.bf16) {
    for (auto& r : l.pending) r->wait();
    l.pending.clear();
    const bool packs_bf16 = kernels::attention_packs_bf16(args.bf16);
    l.esz = packs_bf16 ? 2 : 4;
    l.k = Tensor();  // freed before the new ones are made
    l.v = Tensor();
    const Shape packed{B * H * (text + total) * D};
    const DType type = packs_bf16 ? DType::kBF16 : DType::kF32;
    l.k = Tensor::zeros(packed, type, current_device());
    l.v = Tensor::zeros(packed, type, current_device());
    l.batch = B;
    l.heads = H;
    l.head_dim = D;
    l.text = text;
    l.total = total;
    l.bf16 = args.bf16;
    l.share.clear();  // (set below)
    l.filled = false;
  }
  // The previous step's exchange first, on the split it was posted with: its
  // sends still read l.fresh, and its receives hold the other bands' K/V of
  // that step.
  complete(l);
  if (l.share != share) {
    // A new split (--patch_weights dynamic): the buffer keeps every token's
    // K/V in its place, so only the bands' bounds change: no reallocation,
    // and the step stays stale.
    l.share = share;
    l.offset.assign(share.size(), 0);
    for (size_t p = 1; p < share.size(); ++p) l.offset[p] = l.offset[p - 1] + share[p - 1];
  }
  // This rank's fresh K and V, contiguous in the exchange type: [2][B, n, H·D],
  // each batch item `per` tokens apart (a sync step pads every band to the
  // longest so that one all-gather of equal blocks moves them).
  const int64_t most = *std::max_element(share.begin(), share.end());
  const bool sync = sync_ || !l.filled;
  const int64_t per = sync ? most : n;
  const size_t block = static_cast<size_t>(2 * B * per * hd) * l.esz;
  auto* mine = static_cast<uint8_t*>((sync ? sync_send_ : l.fresh).bytes(block));
  for (int t = 0; t < 2; ++t) {
    const float* src = t == 0 ? args.k : args.v;
    const int64_t stride = t == 0 ? args.k_stride : args.v_stride;
    for (int64_t b = 0; b < B; ++b) {
      const float* rows = src + (b * (text + n) + text) * stride;
      uint8_t* dst = mine + static_cast<size_t>((t * B + b) * per * hd) * l.esz;
      if (l.esz == 2)  // one threaded conversion of the band's rows
        kernels::to_bf16_rows(rows, stride, n, hd, reinterpret_cast<uint16_t*>(dst));
      else
        kernels::copy_rows(reinterpret_cast<float*>(dst), hd, rows, stride, n, hd);
    }
  }
  if (text > 0) {  // this rank's text K/V, fresh, in front
    kernels::attention_pack_kv(args.k, args.k_stride, B, H, text, D, l.bf16, l.k.raw(),
                               text + total, 0, (text + n) * args.k_stride);
    kernels::attention_pack_kv(args.v, args.v_stride, B, H, text, D, l.bf16, l.v.raw(),
                               text + total, 0, (text + n) * args.v_stride);
  }
  if (sync) {
    // Every band fresh, synchronously: exact.
    auto* all = static_cast<uint8_t*>(sync_recv_.bytes(block * static_cast<size_t>(n_ranks)));
    group_.allgather(mine, all, block, comm::Type::kByte);
    for (int p = 0; p < n_ranks; ++p)
      l.store(all + block * static_cast<size_t>(p), share[static_cast<size_t>(p)],
              text + l.offset[static_cast<size_t>(p)], most);
    l.filled = true;
  } else {
    // The text rows first, while every band (this one too) still holds the
    // previous step's K/V: the same keys on every rank, so the replicated
    // text stream stays equal without any communication.
    if (text > 0) attend_rows(args, site, l, 0, text);
    // The other bands' K/V as of the previous step (stored by complete).
    l.store(mine, n, text + l.offset[static_cast<size_t>(me)]);
  }
  const int64_t first = sync ? 0 : text;  // a stale step's text rows are done
  attend_rows(args, site, l, first, args.q_len - first);
  // After a stale step, send this step's K/V on for the next one.
  if (!sync_ && !last_step_) {
    const size_t item = static_cast<size_t>(n * hd) * l.esz, fresh = 2 * B * item;
    if (sync)  // the first stale step after a sync one: this band's K/V, unpadded
      kernels::copy_row_bytes(l.fresh.bytes(fresh), item, mine,
                              static_cast<size_t>(most * hd) * l.esz, 2 * B, item);
    l.recv.resize(static_cast<size_t>(n_ranks));
    for (int p = 0; p < n_ranks; ++p) {
      if (p == me) continue;
      const size_t bytes = static_cast<size_t>(2 * B * share[static_cast<size_t>(p)] * hd) * l.esz;
      l.pending.push_back(group_.irecv(l.recv[static_cast<size_t>(p)].bytes(bytes), bytes,
                                       comm::Type::kByte, p, kTag + site.layer));
    }
    for (int p = 0; p < n_ranks; ++p)
      if (p != me)
        l.pending.push_back(
            group_.isend(l.fresh.bytes(fresh), fresh, comm::Type::kByte, p, kTag + site.layer));
    l.pending.back()->test();  // starts them now (NCCL holds point-to-point calls until then)
  }
}

}  // namespace xdit::parallel
