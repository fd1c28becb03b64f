// What First-Block-Cache and TeaCache share (docs/caches.md): a step cache
// that, on a step it decides to skip, passes over a range of each stage's
// blocks and adds the residual those blocks left on the last step that ran
// them (their output − their input, for the text and image streams).
//   - Stage 0 decides once per step, at the step's first call, from an
//     indicator the subclass measures: per context, sums that add up over
//     the ranks that split the rows (CacheSetup::sum_groups), then one rule,
//     then agreed over CacheSetup::agree_groups.
//   - A context is a range of the call's batch that decides for itself: the
//     whole batch, or each CFG half (CacheSetup::contexts). When the halves
//     disagree the call runs every block, and the half that skips takes its
//     start plus its kept residual at the end, as its own call would.
//   - Under PipeFusion each stage keeps the residual of its own blocks (stage
//     0: from where it may skip; a later stage: from its input), which sum to
//     the whole residual; stage 0 sends each step's decision to the later
//     stages point to point, and every stage skips alike for every call
//     (patch) of the step. On the patch pipeline patch 0's rows decide.
//   - State is kept by global token row, stamped per context with the step
//     that wrote it, so a call over any rows (the whole image, a patch, an SP
//     share) finds its rows' residuals, and rows a rank held before a dynamic
//     re-split are not taken for current ones.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "pipeline/step_cache.h"

namespace xdit::pipeline {

class ResidualCache : public StepCache {
 public:
  ~ResidualCache() override;

  void begin_loop(Denoiser& d) override;
  void before_step(const StepInfo& s) override;
  void begin_call(const models::DiTInputs& in, const models::Streams& s) override;
  void end_call(models::Streams& s) override;
  bool at_boundary(int64_t b) const override;
  models::BlockSkip before_block(int64_t b, models::Streams& s) override;
  void after_block(int64_t b, models::Streams& s) override;

 protected:
  // `skip_from`: the first block of stage 0 a skipped step passes over (0:
  // all of them; 1: all after First-Block-Cache's head). `name` for messages.
  ResidualCache(const char* name, int64_t skip_from, CacheSetup setup);

  // The rule, per context c of a new step (stage 0): the indicator's sums
  // over every rank (Σ|change|, Σ|reference|; the reference sum is 0 where
  // some rank had none) → whether to skip, and the indicator to report (−1:
  // none). Then, once the ranks agreed, what was decided.
  virtual bool wants_skip(size_t c, double change, double reference, double& indicator) = 0;
  virtual void decided(size_t /*c*/, bool /*computes*/) {}
  // Stage 0's call began (after the base's bookkeeping; active calls only).
  virtual void call_began(const models::Streams& /*s*/) {}
  // A run began, or its size changed: state by row for `whole` ([B, token
  // rows · per row, D]) starts over.
  virtual void sized(const Shape& /*whole*/) {}

  // A reference by global token row on the host ([B, token rows · per row,
  // D]: r_prev, m_prev), stamped per context and row with the step that
  // wrote it.
  struct RowReference {
    Tensor values;
    std::vector<std::vector<int64_t>> stamps;
  };
  void clear(RowReference& ref, const Shape& whole) const;
  // The indicator's sums per context (2 each): Σ|v − ref| and Σ|ref| over
  // this call's image rows where `ref` holds them from step `from(c)`, on a
  // new step (else Σ|ref| = 0: this rank votes to compute). v = out − in
  // (out where `in` is null), batch item b's image rows at out + b ·
  // out_stride and in + b · N · D; v is written to `v` ([B, N, D], host).
  std::vector<double> change_sums(const float* out, int64_t out_stride, const float* in,
                                  const RowReference& ref,
                                  const std::function<int64_t(size_t)>& from, Tensor& v) const;
  // v's rows become context c's reference, stamped with this step.
  void keep(RowReference& ref, size_t c, const Tensor& v) const;

  // The new step's decision from the per-context sums here (2 per context):
  // summed, ruled, agreed, sent to the later stages, recorded.
  void decide(const std::vector<double>& sums);
  // The stage's start for this call's residual, where the step computes.
  void mark_start(const models::Streams& s);
  // Per context: whether `stamps` holds this call's rows from step `step`.
  bool rows_stamped(const std::vector<std::vector<int64_t>>& stamps, size_t c, int64_t step) const;
  void mark_rows(std::vector<std::vector<int64_t>>& stamps, size_t c) const;
  // Per-context stamps for the run's token rows, none set.
  std::vector<std::vector<int64_t>> no_stamps() const;
  // The contexts' batch ranges in a call of `batch` items.
  std::vector<std::pair<int64_t, int64_t>> contexts(int64_t batch) const;
  // The image rows of this call's rows in a [B, token rows · per row, width]
  // tensor of the whole run, at batch item b.
  float* whole_rows(Tensor& t, int64_t b) const;
  const float* whole_rows(const Tensor& t, int64_t b) const;

  const char* name_;
  int64_t skip_from_;
  CacheSetup setup_;
  bool active_ = false, new_step_ = false;  // a step's own call; its first
  StepInfo step_;                           // the step (its index among `total`)
  int64_t step_no_ = 0;         // the steps this run so far, from 1 (every stage counts alike)
  std::vector<bool> computes_;  // the step's decision per context
  bool skip_all_ = false;
  std::vector<int64_t> last_full_;  // per context: the step_no_ of its last full step
  // This call: batch, text tokens, width, global token rows and tokens per row.
  int64_t batch_ = 0, text_ = 0, width_ = 0, row0_ = 0, row1_ = 0, per_row_ = 0;

 private:
  // Stage 0 sends the step's decision to the later stages (point to point,
  // beside the pipeline's messages); a later stage receives it.
  void send_decision(const std::vector<uint8_t>& decision);
  std::vector<uint8_t> receive_decision();
  // The step's decisions (computes_) taken, with each context's indicator.
  void record_step(const std::vector<double>& indicators);
  // The stage's last block ran: the computing contexts keep their residual,
  // the skipping ones take start + theirs.
  void stage_ran(models::Streams& s);
  // The stage residual of this call's rows, in the streams' layout.
  const Tensor& call_residual();

  bool in_step_ = false, armed_ = false;
  // By global token row, [B, token rows · per row, D], on the streams'
  // device: the stage's image residual, valid per context and row; the text
  // residual per call rows (the latest if none).
  Tensor image_residual_;
  std::vector<std::vector<int64_t>> residual_stamp_;
  std::map<std::pair<int64_t, int64_t>, Tensor> text_residual_;
  // Decisions in flight to the later stages, kept until sent.
  std::vector<std::pair<std::vector<uint8_t>, std::unique_ptr<comm::Request>>> sends_;
  Tensor start_;          // the stage's start this call
  Tensor call_residual_;  // scratch: the residual in the streams' layout
};

}  // namespace xdit::pipeline
