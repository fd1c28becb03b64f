// PipeFusion's attention (arXiv 2405.14430): each self-attention layer of a
// pipeline stage keeps a full-sequence K/V buffer. A call on a patch of tokens
// [t0, t1) writes that patch's fresh K/V into the buffer and attends the
// patch's queries to the whole buffer — the other patches' K/V as last
// computed (one step stale for the patches after this one). A call on the
// whole image (warm-up) refreshes everything. Cross-attention is unaffected.
//
// Inside a sequence-parallel group (PipeFusion × Ulysses/Ring) each rank
// computes its chunk of the patch: SP rank k = ring·u + ulysses holds tokens
// [t0 + k·N, t0 + (k+1)·N). The Ulysses all-to-all turns that into "my H/u
// heads, the tokens of my ring super-chunk"; the ring all-gathers the
// super-chunks' fresh K/V, so every SP rank's buffer holds the whole sequence
// for its heads — patch fresh, the rest as last computed — and its queries
// attend to that buffer. Only the patch's K/V travel, never the buffer.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "nn/attention.h"
#include "parallel/usp_attention.h"

namespace xdit::parallel {

class PipeFusionAttention : public nn::AttentionBackend {
 public:
  PipeFusionAttention() = default;
  // Within a sequence-parallel group: the rank's Ulysses and Ring groups.
  PipeFusionAttention(comm::Communicator& ulysses, comm::Communicator& ring);
  // The next calls compute tokens [t0, t1) of a `total`-token sequence (the
  // whole patch; under sequence parallelism this rank holds its chunk).
  void set_window(int64_t total, int64_t t0, int64_t t1);
  void attend(const kernels::AttentionArgs& args, const nn::AttentionSite& site) override;

  // The buffers of a layer: [B, total, heads·D] each, the rank's heads under
  // Ulysses (tests compare them).
  const std::vector<float>& keys(int layer) const { return buffers_.at(layer).k; }
  const std::vector<float>& values(int layer) const { return buffers_.at(layer).v; }
  // Bytes held by the K/V buffers.
  size_t buffer_bytes() const;
  // Test switch: a pipeline that "forgets to refresh" its buffers after the
  // warm-up (the deviation tests must catch it).
  void set_refresh(bool refresh) { refresh_ = refresh; }

 private:
  struct Buffer {
    std::vector<float> k, v;
    bool filled = false;
  };
  // The layer's buffer for `heads`·`head_dim` columns, checked against the window.
  Buffer& buffer(int layer, int64_t batch, int64_t cols, bool whole);
  // Tokens [t, t + n) of k, v ([B, n, cols] with the given row strides) into the buffer.
  void store(Buffer& buf, const float* k, const float* v, int64_t k_stride, int64_t v_stride,
             int64_t batch, int64_t t, int64_t n, int64_t cols) const;
  void attend_sequence_parallel(const kernels::AttentionArgs& args, const nn::AttentionSite& site);

  std::map<int, Buffer> buffers_;
  int64_t total_ = 0, t0_ = 0, t1_ = 0;
  bool refresh_ = true;
  comm::Communicator* ulysses_ = nullptr;
  comm::Communicator* ring_ = nullptr;
  std::unique_ptr<UlyssesExchange> exchange_;
  std::vector<float> kv_, kv_all_, out_;
};

}  // namespace xdit::parallel
