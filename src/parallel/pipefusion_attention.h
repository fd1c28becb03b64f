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
// heads, the tokens of my ring super-chunk". Under Ulysses alone each rank's
// buffer holds the whole sequence for its heads; only the patch's K/V travel.
// Under Ring each ring rank keeps a 1/r share of the image tokens (as xDiT
// does): a call all-gathers the shares and the super-chunks' fresh K/V into
// one whole-sequence buffer that the layers take turns with, attends to it,
// and updates its share — r times less K/V memory for the whole stale
// sequence moving every call (xDiT's ring attention moves it too).
//
// Joint attention (FLUX): the text's tokens lead each batch item's q/k/v (on
// every rank); their K/V lead the buffer and are written fresh by every call
// (the text is recomputed with each patch), while the image's K/V are stale
// outside the patch, as xDiT's PipeFusion for FLUX keeps them.
//
// The buffers live on the device of the first call (the thread's current
// device): on a GPU the K/V stay in GPU memory and the exchanges go through
// the mesh's device communicators.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "nn/attention.h"
#include "nn/layers.h"
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
  void set_sequence_split(std::vector<int64_t> tokens_per_rank) override;

  // The buffers of a layer as f32 [B, text + total, heads·D], the rank's
  // heads under Ulysses, its share of the image tokens (no text) under Ring
  // (tests compare them).
  std::vector<float> keys(int layer) const { return unpack(buffers_.at(layer), true); }
  std::vector<float> values(int layer) const { return unpack(buffers_.at(layer), false); }
  // Bytes held by the K/V buffers (under Ring the shares, not the one
  // whole-sequence buffer the layers take turns with).
  size_t buffer_bytes() const;
  // Test switch: a pipeline that "forgets to refresh" its buffers after the
  // warm-up (the deviation tests must catch it).
  void set_refresh(bool refresh) { refresh_ = refresh; }
  // Called at the start of every attention call, i.e. between the blocks of
  // a stage's forward: the pipeline tests its in-flight sends and receives
  // there, since MPI (MPI_THREAD_FUNNELED, no progress thread) moves a large
  // rendezvous message only inside MPI calls and a forward makes none.
  void set_progress(std::function<void()> progress) { progress_ = std::move(progress); }

 private:
  // K and V as the attention kernel packs them (head-major [B, H, total, D],
  // bf16 when the attention computes in bf16): nothing is converted or
  // re-packed per patch but the patch's own tokens, and bf16 halves the bytes.
  struct Buffer {
    Tensor k, v;  // packed, on the device the attention runs on
    int64_t batch = 0, heads = 0, head_dim = 0;
    int64_t text = 0;    // joint attention: the text's tokens lead the buffer, fresh each call
    int64_t tokens = 0;  // image tokens after the text (the whole sequence, or a ring share)
    bool bf16 = false;   // as requested by the attention call
    bool filled = false;
  };
  // (Re)sizes buf for `text` + `tokens` tokens of `heads` heads; true when it did.
  static bool fit(Buffer& buf, const kernels::AttentionArgs& args, int64_t heads, int64_t text,
                  int64_t tokens);
  // The layer's buffer, (re)sized for the call and checked against the window.
  Buffer& buffer(int layer, const kernels::AttentionArgs& args, int64_t heads, bool whole,
                 int64_t text, int64_t tokens);
  // n tokens of k, v ([B, ·, H, D] with the given token strides, batch items
  // `batch_tokens` tokens apart) into the buffer's tokens [t, t + n).
  void store(Buffer& buf, const float* k, const float* v, int64_t k_stride, int64_t v_stride,
             int64_t batch_tokens, int64_t t, int64_t n) const;
  // Attention of q ([B, q_len, H, D] at q_stride) against the whole buffer,
  // its text keys masked by the site's text mask.
  void attend_buffer(const Buffer& buf, const kernels::AttentionArgs& args,
                     const nn::AttentionSite& site, const float* q, int64_t q_stride, int64_t q_len,
                     float* out, int64_t out_stride);
  std::vector<float> unpack(const Buffer& buf, bool keys) const;
  void attend_sequence_parallel(const kernels::AttentionArgs& args, const nn::AttentionSite& site);

  std::map<int, Buffer> buffers_;
  std::vector<int64_t> split_;  // image tokens per SP rank of the window, or empty (equal)
  int64_t total_ = 0, t0_ = 0, t1_ = 0;
  bool refresh_ = true;
  std::function<void()> progress_;
  comm::Communicator* ulysses_ = nullptr;
  comm::Communicator* ring_ = nullptr;
  std::unique_ptr<UlyssesExchange> exchange_;
  nn::Scratch kv_mine_, kv_all_, out_;
  Tensor mask_;   // a text key mask's copy on a CUDA device
  Buffer whole_;  // under Ring: the whole sequence, assembled for one call at a time
};

}  // namespace xdit::parallel
