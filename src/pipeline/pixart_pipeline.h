// The PixArt-α / PixArt-Σ pipeline (diffusers PixArtAlphaPipeline /
// PixArtSigmaPipeline): prompts → T5 tokenizer and encoder → CFG denoising
// loop (micro-conditions, transformer, guidance, learned-sigma split,
// DPM-Solver++) → VAE decoder → resize back from the resolution bin → RGB8.
// Construction reads and checks the transformer and scheduler configs and
// opens their weight files (header checks only); validate() does the same for
// the text encoder and VAE a request needs. Models are built on first use.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "io/model_folder.h"
#include "io/weights.h"
#include "models/pixart.h"
#include "models/t5.h"
#include "models/vae.h"
#include "parallel/config.h"
#include "parallel/pipefusion_attention.h"
#include "parallel/usp_attention.h"
#include "pipeline/memory_estimate.h"
#include "schedulers/scheduler_config.h"
#include "tokenizers/t5_tokenizer.h"

namespace xdit::pipeline {

struct LatentRequest {
  Tensor prompt_embeds;    // [P, L, caption_channels]
  Tensor prompt_mask;      // [P, L] or undefined (all tokens valid)
  Tensor negative_embeds;  // [P, L', caption_channels]; needed when guidance_scale > 1
  Tensor negative_mask;
  Tensor latents;      // [P, C, H/8, W/8] or undefined (drawn from the seed)
  int64_t height = 0;  // pixels; 0 = the model's default (sample_size · 8)
  int64_t width = 0;
  int64_t num_inference_steps = 20;
  double guidance_scale = 4.5;
  uint64_t seed = 42;
};

// A request from prompts to images, with diffusers' defaults.
struct ImageRequest {
  std::vector<std::string> prompts;  // one image per prompt
  std::string negative_prompt;       // "" as diffusers
  int64_t height = 0, width = 0;     // pixels; 0 = the model's default
  int64_t num_inference_steps = 20;
  double guidance_scale = 4.5;
  uint64_t seed = 42;
  bool resolution_binning = true;
  int64_t max_sequence_length = 0;  // 0 = 120 (PixArt-α) or 300 (PixArt-Σ)
  Tensor latents;                   // initial latents; undefined = drawn from the seed
  // Filled by validate(): the size the model runs at (the bin, when binning).
  int64_t run_height = 0, run_width = 0;
};

struct ImageResult {
  std::vector<std::vector<uint8_t>> rgb;  // per prompt, height·width·3 bytes
  int64_t height = 0, width = 0;
  double text_seconds = 0, denoise_seconds = 0, decode_seconds = 0;
};

// Prompt embeddings as the transformer takes them.
struct PromptEmbeddings {
  Tensor embeds, mask;                    // [P, L, d], [P, L]
  Tensor negative_embeds, negative_mask;  // undefined without CFG
};

struct StepEvent {
  int64_t step = 0, total = 0;
  double seconds = 0;  // this step
};

// The noise prediction from the transformer output [(2)P, out_channels, h, w]:
// classifier-free guidance (when cfg, out = [uncond; cond]) and the first C
// channels (PixArt's learned sigma).
Tensor guided_noise(const Tensor& out, int64_t P, int64_t C, bool cfg, double guidance_scale);

// Stops the run (throws one line naming the step and the likely causes) when
// the latents hold NaN or Inf after denoising step `step` of `total`: such
// latents decode to a black image.
void check_finite_latents(const Tensor& latents, int64_t step, int64_t total);

class PixArtPipeline {
 public:
  static constexpr int64_t kVaeScaleFactor = 8;
  // No side may exceed this (a bound that keeps every size product in 64
  // bits; the memory estimate refuses far smaller sizes on real machines).
  static constexpr int64_t kMaxImageSide = int64_t{1} << 20;
  // The model_index.json classes this pipeline runs.
  static const std::vector<std::string>& supported_pipelines();

  PixArtPipeline(const std::string& folder, DType dtype);
  // A transformer-only pipeline (prompt embeddings → latents) from a config
  // and any weight source — the benchmarks' random full-size models.
  PixArtPipeline(const models::PixArtConfig& cfg, const schedulers::SchedulerConfig& sched,
                 std::unique_ptr<io::WeightSource> weights, DType dtype);
  ~PixArtPipeline();

  const models::PixArtConfig& config() const { return cfg_; }
  const io::ModelFolder& folder() const;
  // Pixels per latent pixel: from vae/config.json, 8 without a VAE.
  int64_t vae_scale_factor() const;
  const schedulers::SchedulerConfig& scheduler_config() const { return sched_cfg_; }
  // 120 for PixArt-α pipelines, 300 for PixArt-Σ (diffusers' defaults).
  int64_t default_max_sequence_length() const;

  // Fills defaults (height/width) and checks the request against the model;
  // throws a one-line error. Cheap: call before load().
  void validate(LatentRequest& r) const;
  // Fills defaults, bins the size, opens tokenizer / text encoder / VAE
  // configs and weight headers, and checks everything. Cheap.
  void validate(ImageRequest& r);
  void load();
  // Runs the denoising loop; returns the final latents [P, C, H/f, W/f].
  Tensor generate_latents(const LatentRequest& r,
                          const std::function<void(const StepEvent&)>& on_step = {});
  // Tokenizes and encodes prompts (and the negative prompt when guidance > 1).
  PromptEmbeddings encode_prompts(const ImageRequest& r);
  // Decodes latents to images in [−1, 1], [B, 3, H, W].
  Tensor decode_latents(const Tensor& latents);
  // The whole pipeline.
  ImageResult generate(ImageRequest r, const std::function<void(const StepEvent&)>& on_step = {});
  // Runs the transformer over the mesh: CFG halves on the two CFG groups,
  // image rows split over the sequence-parallel group (Ulysses / Ring / USP
  // attention). nullptr (the default) is the serial run. Set before load().
  void set_mesh(parallel::Mesh* mesh) { mesh_ = mesh; }
  parallel::Mesh* mesh() const { return mesh_; }

  // generate() frees the text encoder after encoding (bounding peak memory
  // to the larger of T5 and transformer + VAE) unless asked to keep it.
  void set_keep_text_encoder(bool keep) { keep_text_encoder_ = keep; }

 private:
  void check_size(int64_t height, int64_t width) const;
  void check_steps(int64_t steps) const;
  void check_guidance(double guidance_scale) const;
  // The memory query for `prompts` images at height x width px on this mesh.
  MemoryQuery memory_query(int64_t prompts, int64_t height, int64_t width, bool cfg) const;
  // The estimate of `q` against the memory left (weights already loaded not
  // counted again); throws when it cannot fit.
  void check_request_memory(const MemoryQuery& q) const;
  // PipeFusion's patch pipeline over the mesh's stages (pipeline/pipefusion.cpp).
  Tensor pipefusion_loop(Tensor latents, schedulers::Scheduler& sched, const Tensor& text,
                         const Tensor& mask, const Tensor& resolution, const Tensor& aspect,
                         int64_t MB, bool cfg, bool cfg_split, double guidance_scale,
                         const std::function<void(const StepEvent&)>& on_step);
  std::optional<io::ModelFolder> folder_;
  DType dtype_;
  models::PixArtConfig cfg_;
  schedulers::SchedulerConfig sched_cfg_;
  std::unique_ptr<io::WeightSource> weights_;
  std::unique_ptr<models::PixArtTransformer> transformer_;
  // Text side and VAE, opened by validate(ImageRequest), built on first use.
  std::unique_ptr<tokenizers::T5Tokenizer> tokenizer_;
  std::unique_ptr<models::T5Config> t5_cfg_;
  std::unique_ptr<io::WeightStore> t5_weights_;
  std::unique_ptr<models::T5Encoder> t5_;
  std::unique_ptr<models::VaeConfig> vae_cfg_;
  std::unique_ptr<io::WeightStore> vae_weights_;
  std::unique_ptr<models::VaeDecoder> vae_;
  bool keep_text_encoder_ = false;
  parallel::Mesh* mesh_ = nullptr;
  std::unique_ptr<parallel::UspAttention> usp_;
  std::unique_ptr<parallel::PipeFusionAttention> pipefusion_;

 public:
  // After a PipeFusion run: this stage's attention (its K/V buffers) and the
  // number of patch forwards it ran after the warm-up (for tests).
  const parallel::PipeFusionAttention* pipefusion_attention() const { return pipefusion_.get(); }
  int64_t pipefusion_patch_forwards() const { return patch_forwards_; }
  // The micro-steps (1-based, of the patch pipeline after the warm-up) of
  // this stage's first and last patch forward; 0 when none ran.
  std::pair<int64_t, int64_t> pipefusion_micro_steps() const {
    return {first_micro_step_, last_micro_step_};
  }
  // Test switch: a PipeFusion stage that never refreshes its K/V buffers after
  // the warm-up (the deviation test must catch it). Set before load().
  void set_pipefusion_refresh(bool refresh) { pipefusion_refresh_ = refresh; }

 private:
  int64_t patch_forwards_ = 0, first_micro_step_ = 0, last_micro_step_ = 0;
  bool pipefusion_refresh_ = true;
};

}  // namespace xdit::pipeline
