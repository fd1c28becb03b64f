// What the cuDNN graph users (SDPA, convolution) share: a handle on the
// current device, one built graph (with its execution plan) per shape, and
// a workspace grown to the largest plan's. Include only where the cuDNN
// frontend's headers are (XDIT_HAVE_CUDNN_FE).
#pragma once

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "kernels/cuda/runtime.h"

namespace xdit::kernels::cuda {

namespace fe = cudnn_frontend;

// Throws one line: the step, the shape and cuDNN's words.
inline void check_cudnn(fe::error_t e, const char* step, const std::string& what) {
  if (!e.is_good())
    throw Error(std::string("cuDNN ") + step + " for " + what + ": " + e.get_message());
}

// Shape: an ordered key with str().
template <class Shape>
class CudnnPlans {
 public:
  CudnnPlans() {
    const cudnnStatus_t st = cudnnCreate(&handle_);
    if (st != CUDNN_STATUS_SUCCESS)
      throw Error(std::string("cudnnCreate failed: ") + cudnnGetErrorString(st));
  }
  ~CudnnPlans() {
    plans_.clear();
    if (handle_ != nullptr) cudnnDestroy(handle_);
  }
  CudnnPlans(const CudnnPlans&) = delete;
  CudnnPlans& operator=(const CudnnPlans&) = delete;

  // Runs the graph of `s` (built by make(s) on first use) on stream `st`
  // with the tensors of `pack` (uid → device pointer).
  template <class Make>
  void execute(const Shape& s, Make make, std::unordered_map<int64_t, void*>& pack,
               xdit::cuda::Stream st) {
    auto it = plans_.find(s);
    if (it == plans_.end()) {
      const std::string what = s.str();
      auto g = make(s);
      check_cudnn(g->validate(), "graph validation", what);
      check_cudnn(g->build_operation_graph(handle_), "operation graph", what);
      check_cudnn(g->create_execution_plans({fe::HeurMode_t::A}), "execution plans", what);
      check_cudnn(g->check_support(handle_), "support check", what);
      check_cudnn(g->build_plans(handle_), "plan build", what);
      int64_t ws = 0;
      check_cudnn(g->get_workspace_size(ws), "workspace size", what);
      if (static_cast<size_t>(ws) > workspace_.bytes())
        workspace_ = xdit::cuda::DeviceBuffer(static_cast<size_t>(ws));
      it = plans_.emplace(s, std::move(g)).first;
    }
    const cudnnStatus_t ss = cudnnSetStream(handle_, st);
    if (ss != CUDNN_STATUS_SUCCESS)
      throw Error(std::string("cudnnSetStream failed: ") + cudnnGetErrorString(ss));
    check_cudnn(it->second->execute(handle_, pack, workspace_.data()), "execution", s.str());
  }
  size_t size() const { return plans_.size(); }

 private:
  cudnnHandle_t handle_ = nullptr;
  std::map<Shape, std::shared_ptr<fe::graph::Graph>> plans_;
  xdit::cuda::DeviceBuffer workspace_;
};

}  // namespace xdit::kernels::cuda
