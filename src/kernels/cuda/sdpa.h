// Attention on the CUDA backend through cuDNN's fused SDPA (flash attention),
// built with the cuDNN frontend's graph API: o = softmax(q·kᵀ·scale)·v per
// batch and head, and the log-sum-exp of each query row (natural log, f32)
// that Ring attention and PipeFusion merge partial results with. q, k, v and
// o are token-major as the layers keep them: [B, S, H·D] (bf16). Each shape's
// graph and execution plan are built once; the workspace grows to the
// largest plan's. Built when the cuDNN frontend headers were found
// (scripts/install_deps.sh); XDIT_HAVE_CUDNN_FE says so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>

#include "kernels/cuda/runtime.h"

namespace xdit::kernels::cuda {

using xdit::cuda::Stream;

struct SdpaShape {
  int64_t batch = 1, heads = 1, q_len = 1, kv_len = 1, head_dim = 64;
  float scale = 0;  // 0: 1/√head_dim
  auto key() const { return std::tie(batch, heads, q_len, kv_len, head_dim, scale); }
  bool operator<(const SdpaShape& o) const { return key() < o.key(); }
  std::string str() const;  // "sdpa b2 h16 q4096 kv4096 d72"
};

// Builds and validates the cuDNN graph of `s` for compute capability `sm`
// (90: Hopper) without a device; throws one line with cuDNN's reason.
void check_sdpa_graph(const SdpaShape& s, int sm = 90);

class Sdpa {
 public:
  Sdpa();  // a cuDNN handle on the current device
  ~Sdpa();
  Sdpa(const Sdpa&) = delete;
  Sdpa& operator=(const Sdpa&) = delete;

  // o [B, q_len, H·D] and lse [B, H, q_len] (f32; may be null) from
  // q [B, q_len, H·D], k and v [B, kv_len, H·D], all bf16 but lse.
  void run(const SdpaShape& s, const void* q, const void* k, const void* v, void* o, float* lse,
           Stream st = nullptr);
  size_t plans() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xdit::kernels::cuda
