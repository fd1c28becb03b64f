// Patch parallelism behind nn::AttentionBackend (REFERENCE.md: DistriFusion,
// arXiv 2402.19481, and naive patch parallelism). Each rank of the group
// computes one row band of the image.
//  - naive: attention stays inside the band (the quality baseline; no
//    communication until the rows are gathered after the step).
//  - displaced (DistriFusion): each self-attention layer keeps the whole
//    sequence's K/V in the kernel's packed layout. On a sync step (warm-up, or
//    every step with full_sync) the layer all-gathers every band's fresh K/V
//    before attending: exact. Afterwards it attends with its own band's fresh
//    K/V and the other bands' from the previous step; right after storing its
//    fresh K/V it posts a non-blocking all-gather of them (sends to and
//    receives from every peer), and completes it before the same layer's next
//    step, so the exchange hides behind a whole step of compute.
// Joint attention (FLUX, SD3): the text's K/V lead the buffer and are the
// local rank's, fresh every call. The text stream is replicated; on a stale
// step the text queries attend before this rank's fresh band is stored, to
// every band's K/V of the previous step (the same on every rank), so the
// ranks' text rows stay equal with no communication, while the image rows
// see their own band fresh. Cross-attention stays local.
// The buffers live on the thread's current device (GPU memory under a CUDA
// scope, exchanged through the mesh's device communicators).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "nn/attention.h"
#include "nn/layers.h"

namespace xdit::parallel {

class PatchAttention : public nn::AttentionBackend {
 public:
  PatchAttention(comm::Communicator& group, bool displaced, bool full_sync);
  ~PatchAttention() override;
  void attend(const kernels::AttentionArgs& args, const nn::AttentionSite& site) override;
  void set_sequence_split(std::vector<int64_t> tokens_per_rank) override;
  void begin_step(int64_t step, int64_t steps, bool sync) override;
  // Test switch: a displaced run that never applies the other bands' K/V
  // after the warm-up (the deviation test must catch it). Its own band still
  // refreshes, so the ranks' text rows differ there: a broken run anyway.
  void set_refresh(bool refresh) { refresh_ = refresh; }
  // Seconds this rank waited for the other bands' K/V (benchmarks).
  double wait_seconds() const { return wait_seconds_; }

 private:
  struct Layer;
  // Every rank's band of image tokens (uniform when no split was set).
  std::vector<int64_t> shares(int64_t mine) const;
  void complete(Layer& l);  // waits for the layer's pending all-gather, stores it
  // Rows [first, first + count) of every batch item's queries against the
  // layer's whole packed K/V, its text keys masked by the site's text mask.
  void attend_rows(const kernels::AttentionArgs& args, const nn::AttentionSite& site,
                   const Layer& l, int64_t first, int64_t count);

  comm::Communicator& group_;
  bool displaced_, full_sync_, refresh_ = true;
  bool sync_ = true, last_step_ = false;
  std::vector<int64_t> split_;
  std::map<int, std::unique_ptr<Layer>> layers_;
  // A sync step's all-gather buffers, shared by every layer (one call at a time).
  nn::Scratch sync_send_, sync_recv_;
  Tensor mask_;  // a text key mask's copy on a CUDA device
  double wait_seconds_ = 0;
};

}  // namespace xdit::parallel
