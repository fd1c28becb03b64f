// First-Block-Cache, as diffusers' FirstBlockCacheConfig(threshold) applies
// it (hooks/first_block_cache.py; docs/research/step_caches.md §1):
//   - the head is block 0. r = its image-stream output − its input;
//   - ratio = mean|r − r_prev| / mean|r_prev| over the context's image rows,
//     r_prev from the last step that ran every block (the first step of a
//     run always runs them);
//   - ratio > threshold: run every block, keep r as r_prev and the tail
//     residual (the last block's output − the head's output) of the text and
//     image streams;
//   - otherwise skip blocks 1 … end and add the kept tail residual to the
//     head's output.
// A context is a range of the call's batch that decides for itself: the
// whole batch, or each CFG half (CacheSetup::contexts). When the halves
// disagree the call runs every block, and the half that skips takes the
// head's output plus its kept residual at the end, as its own call would.
// Under a row split the sums add up over the ranks; every rank that computes
// the blocks together takes the same decision (CacheSetup).
//
// Under PipeFusion each stage keeps the residual of its own blocks (stage 0:
// its end − the head's output; a later stage: its end − its input), which
// sum to the tail residual; stage 0 decides at the step's first call and
// broadcasts the decision over the PipeFusion group, and every stage skips
// its blocks alike for every call (patch) of the step. On the patch
// pipeline the step's first call is patch 0: its rows decide for the step.
// State is kept by global token row, so a call over any rows (the whole
// image, a patch, an SP share) finds its rows' references and residuals.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "pipeline/step_cache.h"

namespace xdit::pipeline {

class FirstBlockCache final : public StepCache {
 public:
  FirstBlockCache(double threshold, CacheSetup setup);
  ~FirstBlockCache() override;

  void begin_loop(Denoiser& d) override;
  void before_step(const StepInfo& s) override;

  void begin_call(const models::DiTInputs& in, const models::Streams& s) override;
  void end_call(models::Streams& s) override;
  bool at_boundary(int64_t b) const override;
  models::BlockSkip before_block(int64_t b, models::Streams& s) override;
  void after_block(int64_t b, models::Streams& s) override;

 private:
  // Per context, over this call's rows: whether r_prev / the stage
  // residual holds them from the context's last full step (rows a rank
  // held before a re-split, then again, are stale).
  bool rows_valid(const std::vector<std::vector<int64_t>>& stamps, size_t c) const;
  void mark_rows(std::vector<std::vector<int64_t>>& stamps, size_t c);
  // Stage 0 sends the step's decision to the later stages (point to point,
  // beside the pipeline's messages); a later stage receives it.
  void send_decision(const std::vector<uint8_t>& decision);
  std::vector<uint8_t> receive_decision();
  // The head ran (stage 0): a new step's decision, or a later call's update
  // of r_prev where the step computes.
  void head_ran(const models::Streams& s);
  // The step's decisions: stage 0's, agreed, then sent to the later stages.
  void decide(const std::vector<double>& sums);
  // The step's decisions (computes_) taken, with each context's indicator
  // (−1 where none): skip_all_, the contexts' last full step, the counts.
  void record_step(const std::vector<double>& ratios);
  // The stage's last block ran: the computing contexts keep their residual,
  // the skipping ones take start + theirs.
  void stage_ran(models::Streams& s);
  // The stage residual of this call's rows, in the streams' layout.
  const Tensor& call_residual();
  std::vector<std::pair<int64_t, int64_t>> contexts(int64_t batch) const;

  double threshold_;
  CacheSetup setup_;
  bool armed_ = false, in_step_ = false, new_step_ = false, active_ = false;
  std::vector<bool> computes_;  // the step's decision per context
  bool skip_all_ = false;
  // This call: batch, text tokens, width, global token rows and tokens per row.
  int64_t batch_ = 0, text_ = 0, width_ = 0, row0_ = 0, row1_ = 0, per_row_ = 0;
  // By global token row, [B, token rows · per row, D]: r_prev (host) and
  // the stage's image residual (the streams' device), each valid per
  // context and row; the text residual per call rows (the latest if none).
  Tensor previous_, image_residual_;
  std::vector<std::vector<int64_t>> previous_stamp_, residual_stamp_;
  int64_t step_no_ = 0;             // the steps this run so far (every stage counts alike)
  std::vector<int64_t> last_full_;  // per context: the step_no_ of its last full step
  // Decisions in flight to the later stages, kept until sent.
  std::vector<std::pair<std::vector<uint8_t>, std::unique_ptr<comm::Request>>> sends_;
  std::map<std::pair<int64_t, int64_t>, Tensor> text_residual_;
  Tensor input_, residual_;  // host: this call's head input and residual (image rows)
  Tensor start_;             // the stage's start this call: the head's output, or its input
  Tensor call_residual_;     // scratch: the residual in the streams' layout
};

}  // namespace xdit::pipeline
