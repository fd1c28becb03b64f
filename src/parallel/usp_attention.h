// Sequence-parallel self-attention behind nn::AttentionBackend: Ulysses
// (all-to-all of Q, K, V from "all heads, my tokens" to "my heads, the
// Ulysses group's tokens" and back), Ring (K/V blocks passed around the ring
// with non-blocking sends overlapped with the block's attention, partial
// results merged exactly through their log-sum-exp in f32), and the USP hybrid
// (Ulysses inside, Ring outside). Cross-attention keeps the whole text on every
// rank and runs locally. Joint attention (FLUX): the text tokens lead each
// batch item on every rank; Ulysses splits them by heads without exchanging
// them and all-gathers their output heads; Ring attends them once, with the
// local block. Model files are unchanged.
//
// Activations stay where the model computes them: the packing and merging
// are ops (kernels.h), the buffers nn::Scratch on the thread's current
// device, and the groups must carry that memory (on a GPU the mesh's device
// communicators: NCCL, or host-staged). The same code runs on the CPU.
#pragma once

#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "nn/attention.h"
#include "nn/layers.h"

namespace xdit::parallel {

// Ulysses' two all-to-alls, shared by UspAttention and PipeFusion's
// sequence-parallel mode. Rank i of the Ulysses group holds token chunk i.
class UlyssesExchange {
 public:
  explicit UlyssesExchange(comm::Communicator& group) : group_(group) {}
  // Q, K, V of args ("all H heads, my N tokens") → "heads [me·H/u, (me+1)·H/u),
  // the group's u·N tokens": three [B, u·N, H/u, D] arrays, token chunk i from
  // Ulysses rank i. Returns q; k and v follow at q + n and q + 2n
  // (n = B·u·N·H/u·D). The pointer is valid until the next call.
  // Joint attention: the first `text` tokens of each batch item are the
  // replicated text; they are not exchanged but taken locally for my heads
  // and lead each item: [B, text + u·N, H/u, D].
  float* to_heads(const kernels::AttentionArgs& args, int64_t text = 0);
  // Back: out [B, text + u·N, H/u, D] (my heads) → args.out [B, text + N, H·D]
  // (my tokens; the text's heads all-gathered over the group).
  void to_tokens(const float* out, const kernels::AttentionArgs& args, int64_t text = 0);
  // Uneven shares: the image tokens of each rank of the group, every chunk
  // padded to `pad` tokens (zeros) in the exchange; empty: equal shares.
  void set_counts(std::vector<int64_t> counts, int64_t pad);
  // The tokens each rank's chunk occupies after to_heads (mine: my share).
  int64_t chunk(int64_t mine) const;
  void release_buffers();

 private:
  comm::Communicator& group_;
  std::vector<int64_t> counts_;
  int64_t pad_ = 0;
  nn::Scratch send_, recv_, qkv_;
};

class UspAttention : public nn::AttentionBackend {
 public:
  // `ulysses` and `ring` are the rank's groups (either may have size 1).
  UspAttention(comm::Communicator& ulysses, comm::Communicator& ring);
  void attend(const kernels::AttentionArgs& args, const nn::AttentionSite& site) override;
  void set_sequence_split(std::vector<int64_t> tokens_per_rank) override;
  void release_buffers() override;

 private:
  // The valid keys [B, text + u·chunk] of the block that ring rank
  // `ring_rank`'s Ulysses group holds after the exchange: the text's from
  // `text_mask` ([B, text]; null: all), then each Ulysses chunk's real
  // tokens (uneven shares: the rank's share of the padded chunk). Empty
  // when neither applies (equal shares, no text mask).
  std::vector<uint8_t> key_mask(int64_t batch, int64_t text, int64_t chunk, int ring_rank,
                                const uint8_t* text_mask) const;
  // Exact attention of the local queries ([B, text + N, H, D]) against the
  // local K/V (text and image) and then the ring's image K/V blocks;
  // `text_mask` as AttentionSite's.
  void ring_attention(const float* q, const float* k, const float* v, float* out, int64_t batch,
                      int64_t heads, int64_t text, int64_t tokens, int64_t head_dim, float scale,
                      bool bf16, const uint8_t* text_mask);
  // On the CPU, while the next block's K/V are in flight: `a` attended per
  // batch item and group of heads (up to kRingPieces groups), `progress`
  // called after each piece, so that MPI moves a large (rendezvous) message
  // during the compute rather than only at the wait (MPI_THREAD_FUNNELED,
  // no progress thread). The same result as one call.
  static void attention_in_pieces(const kernels::AttentionArgs& a,
                                  const std::function<void()>& progress);
  static constexpr int64_t kRingPieces = 4;
  comm::Communicator& ulysses_;
  comm::Communicator& ring_;
  UlyssesExchange exchange_;
  std::vector<int64_t> split_;  // image tokens per SP rank, or empty (equal)
  nn::Scratch kv_, kv_next_, out_, part_, lse_, lse_part_;
  Tensor mask_;  // the key mask's device copy
};

// The checks every sequence-parallel self-attention call shares.
// A key mask in the arguments only with the site's text mask, whose keys
// the backend lays out anew.
void check_sequence_parallel_args(const kernels::AttentionArgs& args, int ulysses_degree,
                                  const nn::AttentionSite& site);

}  // namespace xdit::parallel
