// TeaCache, as xDiT (xfuser/model_executor/cache/utils.py,
// TeaCachedTransformerBlocks) and the TeaCache paper define it
// (docs/research/step_caches.md §3.1):
//   - the indicator is block 0's timestep-modulated image input m (the
//     model's norm1 of the block: LN(x)·(1 + scale_msa) + shift_msa);
//   - d = mean|m − m_prev| / mean|m_prev| over the context's image rows,
//     m_prev from the step before (every step keeps its m, full or not);
//   - acc += P(d), P the model's rescaling polynomial (FLUX.1: TeaCache's
//     published coefficients; the others: P(d) = d, xDiT's default);
//   - skip every block while acc < threshold, adding the residual (the last
//     block's output − block 0's input, text and image streams) of the last
//     full step; a full step sets acc to 0;
//   - the first and the last steps always run in full (the paper's rule;
//     xDiT's counter forces steps 0 and 1 and not the last: see
//     docs/caches.md).
// Contexts, rank groups, PipeFusion stages and state by row: residual_cache.h.
#pragma once

#include <string>
#include <vector>

#include "pipeline/residual_cache.h"

namespace xdit::pipeline {

class TeaCache final : public ResidualCache {
 public:
  TeaCache(double threshold, CacheSetup setup);
  // P's coefficients for a model (DiT::name()), highest power first: FLUX's
  // published ones, else none (the identity).
  static std::vector<double> rescale_for(const std::string& model);
  // P(x) of those coefficients (x itself for none).
  static double rescaled(const std::vector<double>& coefficients, double x);

  bool wants_modulated_input(int64_t b) const override;
  void modulated_input(int64_t b, const Tensor& m, const models::Streams& s) override;

 private:
  bool wants_skip(size_t c, double change, double reference, double& indicator) override;
  void decided(size_t c, bool computes) override;
  void sized(const Shape& whole) override;

  double threshold_;
  std::vector<double> rescale_;
  std::vector<double> acc_, pending_;  // per context: the accumulation, and this step's
  RowReference previous_;              // m_prev
  Tensor current_;                     // host: this call's m
};

}  // namespace xdit::pipeline
