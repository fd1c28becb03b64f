#include "models/ada_single.h"

#include "kernels/kernels.h"

namespace xdit::models {

Tensor ada_single_modulated_input(const float* h, const float* table, const float* t6, int64_t B,
                                  int64_t N, int64_t d, float eps, nn::Scratch& mod) {
  const int64_t ms = 6 * d;
  float* m = mod.get(static_cast<size_t>(B * ms));
  kernels::add_rows(t6, ms, table, 0, m, ms, B, ms);
  Tensor out = Tensor::empty({B, N, d}, DType::kF32, current_device());
  kernels::layer_norm_modulate(h, out.data<float>(), B, N, d, eps, m, m + d, ms);
  return out;
}

Tensor ada_single_final(const FinalLayer& f, const float* h, int64_t B, int64_t rows,
                        int64_t grid_width, int64_t width, int64_t d, nn::Scratch& fin,
                        nn::Scratch& norm, nn::Scratch& patches) {
  const int64_t N = rows * grid_width, p = f.patch;
  // shift, scale = scale_shift_table + the embedded timestep.
  float* ss = fin.get(static_cast<size_t>(B * 2 * d));
  for (int half = 0; half < 2; ++half)
    kernels::add_rows(f.emb, d, f.table + half * d, 0, ss + half * d, 2 * d, B, d);
  float* nrm = norm.get(static_cast<size_t>(B * N * d));
  kernels::layer_norm_modulate(h, nrm, B, N, d, f.eps, ss, ss + d, 2 * d);
  float* out_patches = patches.get(static_cast<size_t>(B * N * p * p * f.out_channels));
  f.proj_out->forward(nrm, B * N, out_patches);
  Tensor out = Tensor::empty({B, f.out_channels, rows * p, width}, DType::kF32, current_device());
  kernels::unpatchify(out_patches, B, f.out_channels, rows, grid_width, p, out.data<float>());
  return out;
}

}  // namespace xdit::models
