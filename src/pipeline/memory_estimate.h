// What a request needs in memory, estimated from the configs before anything
// loads, so that a request that cannot fit is refused at once instead of
// failing in an allocation after minutes of work. Weights count in the compute
// type; activations as the engine allocates them (f32). Deliberately not an
// upper bound: it refuses what cannot fit, it does not promise what can.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "models/clip.h"
#include "models/dit.h"
#include "models/pixart.h"
#include "models/qwen_text.h"
#include "models/t5.h"
#include "models/vae.h"
#include "models/wan_vae.h"

namespace xdit::pipeline {

struct MemoryQuery {
  int64_t prompts = 1;
  int64_t run_height = 0, run_width = 0;  // pixels the model runs at
  int64_t out_height = 0, out_width = 0;  // pixels written (after the binning resize)
  int64_t frames = 1, latent_frames = 1;  // per prompt: written, and of the latents
  int64_t text_tokens = 0;                // T5 sequence length (FLUX: also the text stream's)
  bool cfg = true;                        // classifier-free guidance doubles the batch
  DType dtype = DType::kBF16;
  // Bytes the transformer's layers keep per parameter when not the compute
  // type's (quantized weights: a GGUF's blocks, --weights_dtype); 0: dtype's.
  double transformer_bytes_per_parameter = 0;
  const models::T5Config* t5 = nullptr;           // the T5 encoder, when it runs
  const models::ClipTextConfig* clip = nullptr;   // FLUX's CLIP (77 tokens), when it runs
  const models::QwenTextConfig* qwen = nullptr;   // a decoder-LLM encoder, when it runs
  int64_t qwen_layers = 0;                        // the layers of it that run
  const models::VaeConfig* vae = nullptr;         // the VAE decoder, when it runs
  const models::WanVaeConfig* wan_vae = nullptr;  // or Wan's video decoder
  int64_t vae_scale_factor = 8;
  // This rank's share under a parallel layout.
  int data_parallel = 1, sequence_parallel = 1, pipeline_stages = 1;
  int tensor_parallel = 1;     // splits the transformer's weights (about 1/T)
  int text_parallel = 1;       // splits T5's weights (Pipeline: over the replica on the CPU)
  bool text_streamed = false;  // T5 built a block at a time (one-shot on the CPU)
  bool one_shot = false;       // the transformer freed before the VAE decodes
  bool cfg_parallel = false;
  int vae_bands = 1;  // the patch-parallel VAE's bands (ranks of a replica)
  // The request's own inputs held through the run (prompt embeddings and
  // their masks, given latents), in bytes as f32: the loop stacks a copy.
  double input_bytes = 0;
};

struct MemoryEstimate {
  double text_encoder = 0;  // T5 weights + activations (freed before denoising)
  double transformer = 0;   // transformer weights
  double denoise = 0;       // latents, activations and attention scratch of a step
  double decode = 0;        // VAE weights + activations
  double output = 0;        // decoded, resized and 8-bit images
  bool transformer_freed_for_decode = false;  // one-shot: not held while decoding
  // The most held at once: text encoding, then denoising, then decoding
  // (the transformer stays loaded unless freed for it).
  double peak() const;
  // "text encoder 1.2 GB, transformer 1.2 GB, denoising 3.4 GB, ..."
  std::string describe() const;
};

// For a transformer of `parameters` weights described by `spec`.
MemoryEstimate estimate_memory(const models::DiTSpec& spec, int64_t parameters,
                               const MemoryQuery& q);
MemoryEstimate estimate_memory(const models::PixArtConfig& cfg, const MemoryQuery& q);

// Throws one line with the estimate and the limit when `e` cannot fit in
// what the machine has left for each of `local_ranks` processes.
void check_memory(const MemoryEstimate& e, int local_ranks = 1);

}  // namespace xdit::pipeline
