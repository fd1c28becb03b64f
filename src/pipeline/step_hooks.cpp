#include "pipeline/step_hooks.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "comm/device_comm.h"
#include "core/error.h"
#include "core/log.h"
#include "core/trace.h"
#include "kernels/kernels.h"
#include "parallel/calibrate.h"
#include "parallel/split.h"

namespace xdit::pipeline {

namespace {
// Uneven shares under Ulysses are padded to the longest inside the
// attention (each chunk holds every rank's rows of some heads), so weights
// there move only the projections and MLP.
void warn_padded_attention(const parallel::ParallelConfig& c, const char* how) {
  if (c.ulysses_degree > 1)
    XDIT_WARN("--patch_weights ", how,
              " with Ulysses moves only the projections and MLP: its "
              "attention pads every rank's share to the longest, so a slow rank keeps its share "
              "of it; Ring and patch parallelism move a rank's attention with its rows");
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void CalibrationHook::begin_loop(Denoiser& d) {
  comm::set_comm_timing_excludes_compute(true);
  parallel::ParallelRuntime& rt = d.runtime();
  parallel::Mesh& mesh = *rt.mesh();
  const int64_t rows = d.token_rows();
  const double t = d.timesteps().front();
  // The weights are still unset, so my_rows splits evenly and tells the backend.
  const parallel::Calibration c =
      parallel::calibrate_weights(mesh, rows, [&](int64_t b, int64_t e) {
        const auto mine = rt.my_rows(0, rows);
        XDIT_CHECK(mine.first == b && mine.second == e, "calibration: row split mismatch");
        const Tensor model_in = d.model_input();
        if (nn::AttentionBackend* backend = rt.backend()) backend->begin_step(0, 1, true);
        trace::Span span("calibration step", "compute");
        d.model().forward(d.inputs().at(model_in, t, b, e));
      });
  mesh.set_patch_weights(c.weights);
  if (mesh.world().rank() == 0) {
    XDIT_INFO("--patch_weights auto: calibrated on one step: ", c.describe());
    warn_padded_attention(mesh.config(), "auto");
  }
}

void DynamicBalanceHook::begin_loop(Denoiser& d) {
  d_ = &d;
  rows_.clear();
  comm::set_comm_timing_excludes_compute(true);
  moved_at_ = -2;
  static bool warned = false;  // once per process (serve runs many loops)
  if (!warned && d.runtime().mesh()->world().rank() == 0)
    warn_padded_attention(d.runtime().mesh()->config(), "dynamic");
  warned = true;
}

void DynamicBalanceHook::before_step(const StepInfo&) {
  wait_for_device(d_->device());  // (a GPU's clock: its queued work first)
  waited0_ = parallel::waited_seconds(*d_->runtime().mesh());
  t0_ = now_seconds();
}

void DynamicBalanceHook::after_step(const StepInfo& s, double) {
  parallel::Mesh& mesh = *d_->runtime().mesh();
  wait_for_device(d_->device());
  const double wall = now_seconds() - t0_;
  const parallel::ParallelConfig& pc = mesh.config();
  const int64_t total = d_->token_rows();
  const std::vector<int64_t> rows = pc.row_split(total);
  rows_.push_back(rows);
  // Step 0 (first touches, the warm-up's synchronous exchange) and the step
  // right after a move (buffers resized) time something else than the split;
  // every rank skips the same steps, so the gather below stays collective.
  const bool measure = s.step > 0 && s.step != moved_at_ + 1;
  if (!measure || s.step + 1 >= s.total) return;
  const std::vector<float> compute = parallel::gather_compute(
      mesh.replica_group(), wall, parallel::waited_seconds(mesh) - waited0_);
  const parallel::Speeds sp = parallel::weights_from_compute(pc, rows, compute);
  if (sp.imbalance <= kImbalance) return;
  const std::vector<int64_t> next = parallel::row_counts(total, sp.weights);
  // The slowest position's time, now and on the new split (rows / speed).
  double now_max = 0, next_max = 0;
  for (size_t k = 0; k < rows.size(); ++k) {
    now_max = std::max(now_max, static_cast<double>(rows[k]) / sp.weights[k]);
    next_max = std::max(next_max, static_cast<double>(next[k]) / sp.weights[k]);
  }
  if (next_max > (1 - kGain) * now_max) return;
  mesh.set_patch_weights(sp.weights);
  moved_at_ = s.step;
  if (mesh.replica_group().rank() == 0) {  // (the log prints world rank 0's)
    std::string from, to, secs;  // (appended piecewise: GCC 12 warns -Wrestrict on "," + string)
    for (size_t k = 0; k < rows.size(); ++k) {
      if (k > 0) from += ',', to += ',';
      from += std::to_string(rows[k]);
      to += std::to_string(next[k]);
    }
    for (size_t r = 0; r < compute.size(); ++r) {
      if (r > 0) secs += ", ";
      secs += detail::concat(compute[r], " s");
    }
    XDIT_INFO("--patch_weights dynamic: after step ", s.step + 1, " (compute ", secs, ") the rows ",
              from, " -> ", to);
  }
}

}  // namespace xdit::pipeline
