// PipeFusion's attention (arXiv 2405.14430): each self-attention layer of a
// pipeline stage keeps a full-sequence K/V buffer. A call on a patch of tokens
// [t0, t1) writes that patch's fresh K/V into the buffer and attends the
// patch's queries to the whole buffer — the other patches' K/V as last
// computed (one step stale for the patches after this one). A call on the
// whole image (warm-up) refreshes everything. Cross-attention is unaffected.
#pragma once

#include <map>
#include <vector>

#include "nn/attention.h"

namespace xdit::parallel {

class PipeFusionAttention : public nn::AttentionBackend {
 public:
  // The next calls compute tokens [t0, t1) of a `total`-token sequence.
  void set_window(int64_t total, int64_t t0, int64_t t1);
  void attend(const kernels::AttentionArgs& args, const nn::AttentionSite& site) override;

  // The buffers of a layer: [B, total, H·D] each (tests compare them).
  const std::vector<float>& keys(int layer) const { return buffers_.at(layer).k; }
  const std::vector<float>& values(int layer) const { return buffers_.at(layer).v; }
  // Test switch: a pipeline that "forgets to refresh" its buffers after the
  // warm-up (the deviation tests must catch it).
  void set_refresh(bool refresh) { refresh_ = refresh; }

 private:
  struct Buffer {
    std::vector<float> k, v;
    bool filled = false;
  };
  std::map<int, Buffer> buffers_;
  int64_t total_ = 0, t0_ = 0, t1_ = 0;
  bool refresh_ = true;
};

}  // namespace xdit::parallel
