#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cmath>
#include <map>
#include <unordered_map>

#include "core/error.h"
#include "kernels/cuda/sdpa.h"

namespace xdit::kernels::cuda {

namespace fe = cudnn_frontend;

namespace {

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats };

void check(fe::error_t e, const char* step, const SdpaShape& s) {
  if (!e.is_good())
    throw Error(std::string("cuDNN ") + step + " for " + s.str() + ": " + e.get_message());
}

// The graph of one shape: [B, S, H, D] in memory, [B, H, S, D] as cuDNN
// names the dimensions (strides say the layout).
// `sm` > 0 names the compute capability (validation without a device: set
// before the nodes, which otherwise ask the current device).
std::shared_ptr<fe::graph::Graph> make_graph(const SdpaShape& s, int sm = 0) {
  auto g = std::make_shared<fe::graph::Graph>();
  if (sm > 0) g->set_sm_version(sm);
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const int64_t b = s.batch, h = s.heads, d = s.head_dim;
  auto token_major = [&](const char* name, int64_t uid, int64_t len) {
    return g->tensor(fe::graph::Tensor_attributes()
                         .set_name(name)
                         .set_uid(uid)
                         .set_dim({b, h, len, d})
                         .set_stride({len * h * d, d, h * d, 1}));
  };
  auto q = token_major("q", kQ, s.q_len);
  auto k = token_major("k", kK, s.kv_len);
  auto v = token_major("v", kV, s.kv_len);
  const float scale = s.scale != 0 ? s.scale : 1.f / std::sqrt(static_cast<float>(d));
  auto options =
      fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(scale);
  auto [o, stats] = g->sdpa(q, k, v, options);
  o->set_output(true)
      .set_uid(kO)
      .set_dim({b, h, s.q_len, d})
      .set_stride({s.q_len * h * d, d, h * d, 1});
  stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT);
  return g;
}

}  // namespace

std::string SdpaShape::str() const {
  return "sdpa b" + std::to_string(batch) + " h" + std::to_string(heads) + " q" +
         std::to_string(q_len) + " kv" + std::to_string(kv_len) + " d" + std::to_string(head_dim);
}

void check_sdpa_graph(const SdpaShape& s, int sm) {
  auto g = make_graph(s, sm);
  check(g->validate(), "graph validation", s);
}

struct Sdpa::Impl {
  cudnnHandle_t handle = nullptr;
  std::map<SdpaShape, std::shared_ptr<fe::graph::Graph>> plans;
  xdit::cuda::DeviceBuffer workspace;
  // LSE is required by cuDNN's graph; a caller without one gets scratch.
  xdit::cuda::DeviceBuffer stats_scratch;
};

Sdpa::Sdpa() : impl_(std::make_unique<Impl>()) {
  const cudnnStatus_t st = cudnnCreate(&impl_->handle);
  if (st != CUDNN_STATUS_SUCCESS)
    throw Error(std::string("cudnnCreate failed: ") + cudnnGetErrorString(st));
}

Sdpa::~Sdpa() {
  impl_->plans.clear();
  if (impl_->handle != nullptr) cudnnDestroy(impl_->handle);
}

size_t Sdpa::plans() const {
  return impl_->plans.size();
}

void Sdpa::run(const SdpaShape& s, const void* q, const void* k, const void* v, void* o, float* lse,
               Stream st) {
  auto it = impl_->plans.find(s);
  if (it == impl_->plans.end()) {
    auto g = make_graph(s);
    check(g->validate(), "graph validation", s);
    check(g->build_operation_graph(impl_->handle), "operation graph", s);
    check(g->create_execution_plans({fe::HeurMode_t::A}), "execution plans", s);
    check(g->check_support(impl_->handle), "support check", s);
    check(g->build_plans(impl_->handle), "plan build", s);
    int64_t ws = 0;
    check(g->get_workspace_size(ws), "workspace size", s);
    if (static_cast<size_t>(ws) > impl_->workspace.bytes())
      impl_->workspace = xdit::cuda::DeviceBuffer(static_cast<size_t>(ws));
    it = impl_->plans.emplace(s, std::move(g)).first;
  }
  if (lse == nullptr) {
    const size_t need = static_cast<size_t>(s.batch * s.heads * s.q_len) * sizeof(float);
    if (impl_->stats_scratch.bytes() < need) impl_->stats_scratch = xdit::cuda::DeviceBuffer(need);
    lse = impl_->stats_scratch.as<float>();
  }
  const cudnnStatus_t ss = cudnnSetStream(impl_->handle, st);
  if (ss != CUDNN_STATUS_SUCCESS)
    throw Error(std::string("cudnnSetStream failed: ") + cudnnGetErrorString(ss));
  std::unordered_map<int64_t, void*> pack = {{kQ, const_cast<void*>(q)},
                                             {kK, const_cast<void*>(k)},
                                             {kV, const_cast<void*>(v)},
                                             {kO, o},
                                             {kStats, lse}};
  check(it->second->execute(impl_->handle, pack, impl_->workspace.data()), "execution", s);
}

}  // namespace xdit::kernels::cuda
