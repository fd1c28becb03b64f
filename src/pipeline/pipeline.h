// The text-to-image pipeline every model family runs through (diffusers'
// PixArtAlphaPipeline / PixArtSigmaPipeline / FluxPipeline): validate →
// encode the prompts (the family's text side) → one denoising loop
// (transformer, classifier-free guidance, scheduler step) → VAE decode → RGB8.
// The loop is the same for the serial run, sequence parallelism, CFG
// parallel and PipeFusion (pipefusion.cpp), and data parallelism wraps it
// (distributed.cpp); the model behind it is a models::DiT.
//
// Construction reads and checks the transformer and scheduler configs and
// opens their weight files (header checks only); validate() does the same for
// the text encoders and VAE a request needs. Models are built on first use.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "io/model_folder.h"
#include "io/weights.h"
#include "models/dit.h"
#include "models/vae.h"
#include "parallel/config.h"
#include "parallel/patch_attention.h"
#include "parallel/pipefusion_attention.h"
#include "parallel/usp_attention.h"
#include "pipeline/memory_estimate.h"
#include "pipeline/model_family.h"
#include "pipeline/request.h"
#include "schedulers/scheduler_config.h"

namespace xdit::pipeline {

// The noise prediction from the transformer output [(2)P, out_channels, h, w]:
// classifier-free guidance (when cfg, out = [uncond; cond]) and the first C
// channels (PixArt's learned sigma).
Tensor guided_noise(const Tensor& out, int64_t P, int64_t C, bool cfg, double guidance_scale);

// Stops the run (throws one line naming the step and the likely causes) when
// the latents hold NaN or Inf after denoising step `step` of `total`: such
// latents decode to a black image.
void check_finite_latents(const Tensor& latents, int64_t step, int64_t total);

// The initial latents as diffusers draws them: torch.randn([P, C, h, w]) from
// a CPU generator seeded with `seed` (FLUX packs them inside the model).
Tensor initial_noise(int64_t prompts, int64_t channels, int64_t latent_h, int64_t latent_w,
                     uint64_t seed);

class Pipeline {
 public:
  static constexpr int64_t kVaeScaleFactor = 8;
  // No side may exceed this (a bound that keeps every size product in 64
  // bits; the memory estimate refuses far smaller sizes on real machines).
  static constexpr int64_t kMaxImageSide = int64_t{1} << 20;

  Pipeline(const std::string& folder, DType dtype);
  // A transformer-only pipeline (prompt embeddings → latents) from a family,
  // a scheduler config and any weight source — the benchmarks' random models.
  Pipeline(std::unique_ptr<ModelFamily> family, const schedulers::SchedulerConfig& sched,
           std::unique_ptr<io::WeightSource> weights, DType dtype);
  ~Pipeline();

  const ModelFamily& family() const { return *family_; }
  models::DiTSpec spec() const { return family_->spec(); }
  int64_t text_width() const { return family_->text_width(); }
  const io::ModelFolder& folder() const;
  // Pixels per latent pixel: from vae/config.json, 8 without a VAE.
  int64_t vae_scale_factor() const;
  const schedulers::SchedulerConfig& scheduler_config() const { return sched_cfg_; }
  // PixArt-α 120, PixArt-Σ 300, FLUX 512 (diffusers' defaults). Needs the
  // text side (validate(ImageRequest) opens it).
  int64_t default_max_sequence_length() const { return family_->default_max_sequence_length(); }

  // Fills defaults (size, steps, guidance) and checks the request against
  // the model; throws a one-line error. Cheap: call before load().
  void validate(LatentRequest& r) const;
  // Fills defaults, bins or floors the size, opens tokenizers / text
  // encoders / VAE configs and weight headers, and checks everything. Cheap.
  void validate(ImageRequest& r);
  void load();
  // Runs the denoising loop; returns the final latents [P, C, H/f, W/f].
  Tensor generate_latents(const LatentRequest& r,
                          const std::function<void(const StepEvent&)>& on_step = {});
  // Tokenizes and encodes prompts (and the negative prompt under CFG).
  PromptEmbeddings encode_prompts(const ImageRequest& r);
  // Decodes latents to images in [−1, 1], [B, 3, H, W].
  Tensor decode_latents(const Tensor& latents);
  // The whole pipeline.
  ImageResult generate(ImageRequest r, const std::function<void(const StepEvent&)>& on_step = {});
  // Runs the transformer over the mesh: CFG halves on the two CFG groups,
  // image rows split over the sequence-parallel group (Ulysses / Ring / USP
  // attention), blocks over PipeFusion stages, layers' weights over the
  // tensor-parallel group (the T5 encoder over text_parallel() ranks).
  // nullptr (the default) is the serial run. Set before load() and before
  // the text encoder runs.
  void set_mesh(parallel::Mesh* mesh);
  parallel::Mesh* mesh() const { return mesh_; }

  // generate() frees the text encoders after encoding (bounding peak memory
  // to the larger of them and transformer + VAE) unless asked to keep them.
  void set_keep_text_encoder(bool keep) { keep_text_encoder_ = keep; }

  // One image run per process (xdit generate): generate() frees the
  // transformer and the parallel attention's buffers once the latents are
  // final, before the VAE decodes, so the peak is the larger of the two
  // phases instead of their sum; a later load() is refused.
  // release_transformer() does it by hand (a caller that decodes itself).
  void set_one_shot(bool one_shot) { one_shot_ = one_shot; }
  void release_transformer();

  // The weights are held resident by another pipeline of this process
  // (xdit serve's validator checks requests while the serving pipeline
  // runs): the memory check counts the request's activations, not the
  // transformer's weights again.
  void set_weights_resident(bool resident) { weights_resident_ = resident; }

  // Where the pipeline runs: the CPU (default) or a CUDA device (text
  // encoders, transformer and VAE; the scheduler step stays on the CPU).
  // Set after set_mesh and before load(). Under a multi-rank mesh every rank
  // takes the GPU of its local rank (`device` must be cuda / cuda:0) and the
  // mesh's model groups move to device communicators (collective: every
  // rank calls it). Throws one line for a family without a CUDA path, or
  // where there is no GPU.
  void set_device(Device device);
  Device device() const { return device_; }

  // Whether a request uses classifier-free guidance (the family decides).
  bool uses_cfg(const LatentRequest& r) const;

 private:
  // The mesh's tensor-parallel shares over its model group (none without a mesh).
  nn::TensorParallel tensor_parallel() const;
  // The ranks the T5 encoder splits over: on the CPU as many ranks of the
  // replica as its heads and feed-forward units allow (every rank of a
  // replica encodes the same prompts, so one copy of T5 per replica, each
  // rank holding and computing its share); on a CUDA device the
  // transformer's tensor-parallel group. 1 without a mesh.
  int text_parallel() const;
  // Whether the VAE decodes `latent_rows` rows in bands over the replica
  // (parallel::VaeBands): as asked (--use_parallel_vae, on by default under
  // patch parallelism); unasked, on the CPU wherever the replica has
  // several ranks and the latent a row for each of them, since each rank
  // would otherwise decode the whole image on shared cores (a CUDA rank has
  // its own GPU: whole, as in xDiT).
  bool vae_in_bands(int64_t latent_rows) const;
  // What every transformer call of one denoising run shares: the batch's
  // conditioning ([uncond; cond] under CFG, one half under CFG parallel).
  struct LoopInputs {
    Tensor text, mask, pooled, resolution, aspect;
    std::vector<float> guidance;       // embedded guidance per batch item, or empty
    std::vector<int64_t> skip_blocks;  // SD3's skip-layer guidance call
    int64_t prompts = 0, batch = 0;
    bool cfg = false, cfg_split = false;
    double cfg_scale = 1.0, timestep_divisor = 1.0;
    // The transformer's inputs for patch rows [r0, r1) (0, 0: all) at timestep t.
    models::DiTInputs at(const Tensor& latents, double t, int64_t r0, int64_t r1) const;
  };
  LoopInputs loop_inputs(const LatentRequest& r) const;
  // The one guidance path: the SP group's shares of patch rows [r0, r1) and
  // the CFG halves gathered, then guidance and the learned-sigma split.
  // `gathered`, when given, receives the whole output before guidance.
  Tensor noise_prediction(Tensor out, const LoopInputs& li, int64_t r0, int64_t r1,
                          Tensor* gathered = nullptr);
  // The SP group's shares of patch rows [r0, r1) gathered (and the CFG halves
  // when `cfg_halves`).
  Tensor gather_output(Tensor out, bool cfg_halves, int64_t r0, int64_t r1);
  // SD3's skip-layer guidance: the prompt-only inputs of the skipping call,
  // whether step i of n takes it, and noise += scale · (cond − skipped).
  LoopInputs skip_inputs(const LatentRequest& r, const LoopInputs& li) const;
  static bool skips_at(const SkipLayerGuidance& s, int64_t i, int64_t n);
  void add_skip_guidance(Tensor& noise, const Tensor& gathered, const Tensor& skipped,
                         const LoopInputs& li, double scale) const;
  // The one row split: the patch rows [begin, end) this rank computes of
  // [r0, r1) (its SP share, uneven when they do not divide), told to the
  // attention backend before the calls that compute them.
  std::pair<int64_t, int64_t> my_rows(int64_t r0, int64_t r1);
  // --patch_weights auto: one calibration step over `rows` patch rows at
  // timestep t sets the mesh's weights (parallel/calibrate.h) and logs them.
  void calibrate(const LoopInputs& li, const Tensor& model_in, double t, int64_t rows,
                 const std::function<void()>& fill_model_in);
  int64_t grid_width_ = 0;  // patch columns of the current request

  void check_size(int64_t height, int64_t width) const;
  void check_steps(int64_t steps) const;
  void check_guidance(double guidance_scale, double true_cfg_scale) const;
  // Applies the family's default size, and for families that floor sizes
  // (FLUX) floors to the latent grid with a warning; PixArt refuses a size
  // off its grid with `hint`.
  void settle_size(int64_t& height, int64_t& width, const char* hint) const;
  void check_mesh(int64_t height, bool cfg) const;
  void check_skip_layer_guidance(const SkipLayerGuidance& s, bool cfg) const;
  // The family's warnings about fields with no effect, on the request as
  // given (guidance_scale before defaults), once per pipeline.
  void warn_unused_once(double guidance_scale, double true_cfg_scale, bool has_negative) const;
  // The memory query for `prompts` images at height x width px on this mesh.
  MemoryQuery memory_query(int64_t prompts, int64_t height, int64_t width, bool cfg) const;
  // The estimate of `q` against the memory left (weights already loaded not
  // counted again); throws when it cannot fit.
  void check_request_memory(const MemoryQuery& q) const;
  // PipeFusion's patch pipeline over the mesh's stages (pipeline/pipefusion.cpp).
  Tensor pipefusion_loop(Tensor latents, schedulers::Scheduler& sched, const LoopInputs& li,
                         const std::function<void(const StepEvent&)>& on_step);

  std::optional<io::ModelFolder> folder_;
  DType dtype_;
  std::unique_ptr<ModelFamily> family_;
  schedulers::SchedulerConfig sched_cfg_;
  std::unique_ptr<io::WeightSource> weights_;  // until load() has built the transformer
  std::unique_ptr<models::DiT> transformer_;
  // The VAE, opened by validate(ImageRequest), built on first use.
  std::unique_ptr<models::VaeConfig> vae_cfg_;
  std::unique_ptr<io::WeightStore> vae_weights_;
  std::unique_ptr<models::VaeDecoder> vae_;
  bool text_opened_ = false;
  bool told_vae_bands_ = false;  // the decoder's bands logged once
  bool keep_text_encoder_ = false;
  bool one_shot_ = false;
  bool weights_resident_ = false;
  Device device_;
  mutable bool warned_ = false;  // the family's warnings about unused fields, once
  mutable bool warned_slg_ = false;
  parallel::Mesh* mesh_ = nullptr;
  std::unique_ptr<parallel::UspAttention> usp_;
  std::unique_ptr<parallel::PipeFusionAttention> pipefusion_;
  std::unique_ptr<parallel::PatchAttention> patch_;
  // The parallel attention backend in use, or null (serial).
  nn::AttentionBackend* parallel_backend() const;

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
  // Test switch: a PipeFusion stage (or a DistriFusion band) that never
  // refreshes its stale K/V after the warm-up (the deviation tests must catch
  // it). Set before load().
  void set_pipefusion_refresh(bool refresh) { pipefusion_refresh_ = refresh; }

 private:
  int64_t patch_forwards_ = 0, first_micro_step_ = 0, last_micro_step_ = 0;
  bool pipefusion_refresh_ = true;
};

}  // namespace xdit::pipeline
