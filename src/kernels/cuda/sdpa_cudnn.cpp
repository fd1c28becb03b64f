#include <cmath>

#include "kernels/cuda/cudnn_plans.h"
#include "kernels/cuda/sdpa.h"

namespace xdit::kernels::cuda {

namespace {

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats };

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
  check_cudnn(g->validate(), "graph validation", s.str());
}

struct Sdpa::Impl {
  CudnnPlans<SdpaShape> plans;
  // LSE is required by cuDNN's graph; a caller without one gets scratch.
  xdit::cuda::DeviceBuffer stats_scratch;
};

Sdpa::Sdpa() : impl_(std::make_unique<Impl>()) {}

Sdpa::~Sdpa() = default;

size_t Sdpa::plans() const {
  return impl_->plans.size();
}

void Sdpa::run(const SdpaShape& s, const void* q, const void* k, const void* v, void* o, float* lse,
               Stream st) {
  if (lse == nullptr) {
    const size_t need = static_cast<size_t>(s.batch * s.heads * s.q_len) * sizeof(float);
    if (impl_->stats_scratch.bytes() < need) impl_->stats_scratch = xdit::cuda::DeviceBuffer(need);
    lse = impl_->stats_scratch.as<float>();
  }
  std::unordered_map<int64_t, void*> pack = {{kQ, const_cast<void*>(q)},
                                             {kK, const_cast<void*>(k)},
                                             {kV, const_cast<void*>(v)},
                                             {kO, o},
                                             {kStats, lse}};
  impl_->plans.execute(
      s, [](const SdpaShape& x) { return make_graph(x); }, pack, st);
}

}  // namespace xdit::kernels::cuda
