// The one parallel runtime a denoising run talks to: which attention method
// the mesh's layout selects (one table, used by generate, serve and bench
// alike), the part of the model this rank holds (PipeFusion's stage, the
// tensor-parallel share), the one row split (token rows: frame-major, frame
// × patch rows of the latent grid; parallel/gather.h), the gathers after a
// call, the step
// boundaries the stale-K/V methods need, and the release before decoding.
// Adding an attention-shaped method is one row of `methods()` plus its
// backend; nothing that runs the loop names a method.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "models/dit.h"
#include "nn/attention.h"
#include "parallel/config.h"

namespace xdit::parallel {

class PipeFusionAttention;

// One row of the method table: a method, whether a layout asks for it, and
// its attention backend over the mesh's model groups.
struct ParallelMethod {
  const char* name;  // "PipeFusion", "patch", "USP"
  bool (*selects)(const ParallelConfig& pc);
  std::unique_ptr<nn::AttentionBackend> (*make)(Mesh& mesh);
};
// In order of precedence: the first row whose `selects` holds is the method.
const std::vector<ParallelMethod>& methods();
// The row `pc` selects, or null (serial attention: no split of the rows).
const ParallelMethod* select_method(const ParallelConfig& pc);

class ParallelRuntime {
 public:
  // Serial without a mesh. `patch`: latent pixels per token side.
  ParallelRuntime(Mesh* mesh, int64_t patch);
  ~ParallelRuntime();

  Mesh* mesh() const { return mesh_; }
  // The part of a `blocks`-block model this rank holds: its PipeFusion
  // stage's blocks (all without PipeFusion), its tensor-parallel share.
  models::DiTStage stage(int64_t blocks) const;
  // This rank's tensor-parallel share over the mesh's model group (whole
  // without a mesh): the transformer's, and on a CUDA device the T5 encoder's.
  nn::TensorParallel tensor_parallel() const;
  // Makes the selected method's backend and hands it to `model` (nothing
  // for a serial layout). Once per loaded transformer.
  void attach(models::DiT& model);
  // The backend in use, or null (serial).
  nn::AttentionBackend* backend() const { return backend_.get(); }
  // PipeFusion's backend when that is the method, else null.
  PipeFusionAttention* pipefusion() const;
  // A stale-K/V method (PipeFusion, DistriFusion) that never refreshes its
  // buffers after the warm-up: a test switch the deviation tests must
  // catch. Set before attach().
  void set_stale_refresh(bool refresh) { refresh_ = refresh; }

  // Tokens per token row of the current request's grid.
  void set_grid_width(int64_t tokens_per_row) { grid_width_ = tokens_per_row; }
  // The one row split: the token rows [begin, end) this rank computes of
  // [r0, r1) (its SP share, uneven when they do not divide), told to the
  // backend before the calls that compute them.
  std::pair<int64_t, int64_t> my_rows(int64_t r0, int64_t r1);
  // A call's output [B, C, rows · patch, W] over token rows [r0, r1) (the
  // latent rows of the frame-major row axis, parallel/gather.h): the SP
  // ranks' shares gathered (and, with `cfg_halves`, the two CFG groups'
  // halves as [uncond; cond]). On the host groups; back on out's device.
  Tensor gather(Tensor out, bool cfg_halves, int64_t r0, int64_t r1) const;
  // Step i of n begins: warm-up steps are synchronous (exact) for the
  // stale-K/V methods.
  void begin_step(int64_t i, int64_t n) const;
  // The backend and its buffers go (before the decoder takes its memory).
  void release();

 private:
  Mesh* mesh_;
  int64_t patch_;
  int64_t grid_width_ = 0;
  bool refresh_ = true;
  const ParallelMethod* method_ = nullptr;
  std::unique_ptr<nn::AttentionBackend> backend_;
};

}  // namespace xdit::parallel
