// The VAE decoder a family names (ModelFamily::ComponentKind), behind one
// seam: latents [B, C, F, h, w] → frames [B·F', 3, H, W] in [−1, 1], batch
// item b's frame f at b·F' + f. diffusers' AutoencoderKL decodes a video
// frame by frame (F' = F); AutoencoderKLWan, Wan's causal video decoder,
// turns latent frame 0 into one frame and each later one into `temporal`
// frames. Either may split its rows over a replica's ranks (parallel::VaeBands).
#pragma once

#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "core/tensor.h"
#include "io/model_folder.h"
#include "nn/row_bands.h"
#include "pipeline/memory_estimate.h"
#include "pipeline/model_family.h"

namespace xdit::pipeline {

class LatentDecoder {
 public:
  // Pixels per latent pixel, and frames per latent frame after the first.
  struct Factors {
    int64_t spatial = 8, temporal = 1;
  };
  virtual ~LatentDecoder() = default;

  // Opens the config of the VAE component `component` of kind `kind` and
  // its weight headers, checked against the config and against the
  // transformer's `latent_channels` (one line naming the file).
  static std::unique_ptr<LatentDecoder> open(const io::ModelFolder& folder,
                                             ModelFamily::ComponentKind kind,
                                             const std::string& component, int64_t latent_channels);
  // The factors from the component's config alone (a plan for latents reads
  // them without opening the weights); {8, 1} where the folder has no VAE.
  static Factors read_factors(const io::ModelFolder& folder, ModelFamily::ComponentKind kind,
                              const std::string& component);

  virtual Factors factors() const = 0;
  // latents [B, C, F, h, w] → [B·F', 3, H, W]; the weights are read on the
  // first call, in `dtype` on the current device. `bands`: this rank's band
  // of latent rows (the patch-parallel VAE); every rank returns the whole.
  virtual Tensor decode(const Tensor& latents, DType dtype, nn::RowBands* bands) = 0;
  // Its part of a request's memory estimate.
  virtual void describe(MemoryQuery& q) const = 0;
};

}  // namespace xdit::pipeline
