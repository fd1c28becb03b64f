// Shared by the scheduler tests: stepping a latent patch by patch (row
// ranges, as PipeFusion's last stage does) must equal stepping it whole.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"
#include "schedulers/scheduler.h"
#include "test_util.h"

namespace xdit::test {

// `whole` and `patched` have the same timesteps set; steps all of them on
// random model outputs of `shape` ([B, C, H, W] or [B, C, F, H, W]), patched
// in the rows `patches` (of the frame-major row axis F·H).
inline void expect_patchwise_equals_whole(schedulers::Scheduler& whole,
                                          schedulers::Scheduler& patched, const Shape& shape,
                                          const std::vector<std::pair<int64_t, int64_t>>& patches) {
  const int64_t B = shape[0], C = shape[1], W = shape.back();
  const int64_t H = schedulers::Scheduler::latent_rows(shape);
  Tensor a = Tensor::from_vector(randn(B * C * H * W, 1), shape);
  Tensor b = a.clone();
  const auto steps = static_cast<int64_t>(whole.timesteps().size());
  for (int64_t step = 0; step < steps; ++step) {
    Tensor m = Tensor::from_vector(randn(B * C * H * W, 100 + static_cast<int>(step)), shape);
    whole.step(m, a);
    for (auto [r0, r1] : patches) {
      const int64_t rows = r1 - r0;
      std::vector<float> mo(static_cast<size_t>(B * C * rows * W)), sp(mo.size());
      for (int64_t bc = 0; bc < B * C; ++bc)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t w = 0; w < W; ++w) {
            mo[(bc * rows + r) * W + w] = m.data<float>()[(bc * H + r0 + r) * W + w];
            sp[(bc * rows + r) * W + w] = b.data<float>()[(bc * H + r0 + r) * W + w];
          }
      EXPECT_EQ(patched.step_index(), step) << "the step index advances only after the last patch";
      patched.step(mo.data(), sp.data(), shape, r0, r1);
      for (int64_t bc = 0; bc < B * C; ++bc)
        for (int64_t r = 0; r < rows; ++r)
          std::memcpy(b.data<float>() + (bc * H + r0 + r) * W, sp.data() + (bc * rows + r) * W,
                      static_cast<size_t>(W) * 4);
    }
    EXPECT_EQ(patched.step_index(), step + 1);
    ASSERT_EQ(0, std::memcmp(a.data<float>(), b.data<float>(), a.nbytes())) << "step " << step;
  }
}

// Steps `s` (timesteps already set) from golden case `c`'s sample0 through its
// model_outputs; the relative error against each step's golden sample.
inline std::vector<double> trajectory_errors(schedulers::Scheduler& s, io::SafeTensorsFile& f,
                                             const std::string& c) {
  Tensor x = f.get(c + ".sample0").to(DType::kF32);
  Tensor outs = f.get(c + ".model_outputs").to(DType::kF32);
  Tensor want = f.get(c + ".samples").to(DType::kF32);
  const int64_t n = x.numel();
  std::vector<double> errors;
  for (size_t i = 0; i < s.timesteps().size(); ++i) {
    Tensor m = Tensor::from_vector(
        std::vector<float>(outs.data<float>() + i * n, outs.data<float>() + (i + 1) * n),
        x.shape());
    s.step(m, x);
    errors.push_back(
        rel_max_err(x.data<float>(), want.data<float>() + i * n, static_cast<size_t>(n)));
  }
  return errors;
}

}  // namespace xdit::test
