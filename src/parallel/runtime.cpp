#include "parallel/runtime.h"

#include "core/error.h"
#include "nn/tensor_parallel.h"
#include "parallel/gather.h"
#include "parallel/patch_attention.h"
#include "parallel/pipefusion_attention.h"
#include "parallel/split.h"
#include "parallel/usp_attention.h"

namespace xdit::parallel {

const std::vector<ParallelMethod>& methods() {
  static const std::vector<ParallelMethod> table = {
      {"PipeFusion", [](const ParallelConfig& pc) { return pc.pipefusion_parallel_degree > 1; },
       [](Mesh& m) -> std::unique_ptr<nn::AttentionBackend> {
         return std::make_unique<PipeFusionAttention>(*m.model_groups().ulysses,
                                                      *m.model_groups().ring);
       }},
      {"patch", [](const ParallelConfig& pc) { return pc.patch_parallel_degree > 1; },
       [](Mesh& m) -> std::unique_ptr<nn::AttentionBackend> {
         const ParallelConfig& pc = m.config();
         return std::make_unique<PatchAttention>(*m.model_groups().sp, pc.displaced(),
                                                 pc.full_sync);
       }},
      {"USP", [](const ParallelConfig& pc) { return pc.row_split_degree() > 1; },
       [](Mesh& m) -> std::unique_ptr<nn::AttentionBackend> {
         return std::make_unique<UspAttention>(*m.model_groups().ulysses, *m.model_groups().ring);
       }},
  };
  return table;
}

const ParallelMethod* select_method(const ParallelConfig& pc) {
  for (const ParallelMethod& m : methods())
    if (m.selects(pc)) return &m;
  return nullptr;
}

ParallelRuntime::ParallelRuntime(Mesh* mesh, int64_t patch) : mesh_(mesh), patch_(patch) {
  if (mesh_ != nullptr) method_ = select_method(mesh_->config());
}

ParallelRuntime::~ParallelRuntime() = default;

nn::TensorParallel ParallelRuntime::tensor_parallel() const {
  return mesh_ != nullptr ? nn::TensorParallel::of(*mesh_->model_groups().tp)
                          : nn::TensorParallel{};
}

models::DiTStage ParallelRuntime::stage(int64_t blocks) const {
  models::DiTStage stage;
  if (mesh_ == nullptr) return stage;
  stage.tp = tensor_parallel();
  const ParallelConfig& pc = mesh_->config();
  if (pc.pipefusion_parallel_degree > 1) {  // this rank keeps only its stage's blocks
    pc.validate_pipefusion(blocks);
    const int s = mesh_->coord().pp;
    const auto b = pc.stage_blocks(blocks)[static_cast<size_t>(s)];
    stage = {b.first, b.second, s == 0, s == pc.pipefusion_parallel_degree - 1, stage.tp};
  }
  return stage;
}

void ParallelRuntime::attach(models::DiT& model) {
  if (method_ == nullptr) return;
  backend_ = method_->make(*mesh_);
  if (auto* pf = dynamic_cast<PipeFusionAttention*>(backend_.get())) pf->set_refresh(refresh_);
  if (auto* pa = dynamic_cast<PatchAttention*>(backend_.get())) pa->set_refresh(refresh_);
  model.set_attention_backend(backend_.get());
}

PipeFusionAttention* ParallelRuntime::pipefusion() const {
  return dynamic_cast<PipeFusionAttention*>(backend_.get());
}

std::pair<int64_t, int64_t> ParallelRuntime::my_rows(int64_t r0, int64_t r1) {
  if (mesh_ == nullptr || mesh_->config().row_split_degree() == 1) return {r0, r1};
  // The backend learns every SP rank's share (uneven when the rows do not
  // divide: it pads the shorter ones and masks the padding).
  std::vector<int64_t> tokens;
  bool even = true;
  const std::vector<int64_t> counts = mesh_->config().row_split(r1 - r0);
  for (int64_t rows : counts) {
    tokens.push_back(rows * grid_width_);
    even = even && rows * grid_width_ == tokens.front();
  }
  if (backend_) backend_->set_sequence_split(even ? std::vector<int64_t>{} : tokens);
  return row_share(r0, counts, mesh_->coord().sp);
}

Tensor ParallelRuntime::gather(Tensor out, bool cfg_halves, int64_t r0, int64_t r1) const {
  const bool rows_split = mesh_ != nullptr && mesh_->config().row_split_degree() > 1;
  if (!rows_split && !cfg_halves) return out;
  const Device back = out.device();
  out = out.to_device(Device{});  // the host groups gather host tensors
  if (rows_split) {
    // The SP ranks' shares of the token rows, in latent rows.
    std::vector<int64_t> rows = mesh_->config().row_split(r1 - r0);
    for (int64_t& r : rows) r *= patch_;
    out = gather_rows(mesh_->sp_group(), out, rows);
  }
  if (cfg_halves) out = gather_batch(mesh_->cfg_group(), out);  // [uncond; cond]
  return out.to_device(back);
}

void ParallelRuntime::begin_step(int64_t i, int64_t n) const {
  if (backend_) backend_->begin_step(i, n, i < mesh_->config().sync_steps(n));
}

void ParallelRuntime::release() {
  backend_.reset();
}

}  // namespace xdit::parallel
