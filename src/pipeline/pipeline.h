// The text-to-image and text-to-video pipeline every model family runs
// through (the shape of diffusers' PixArt, FLUX.1, SD3, Wan, Z-Image and
// Qwen-Image pipelines): plan → encode the prompts (the family's text side)
// → one denoising loop (transformer, the family's guider, scheduler step) →
// VAE decode → RGB8 frames.
// The loop is the Denoiser's (denoiser.h: the per-step loop or PipeFusion's,
// with step hooks), the parallel methods the ParallelRuntime's
// (parallel/runtime.h), and data parallelism wraps it (distributed.cpp); the
// model behind it is a models::DiT.
//
// Construction reads and checks the transformer and scheduler configs and
// opens their weight files (header checks only); plan() does the same for
// the text encoders and VAE a request needs. Models are built on first use.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "core/tensor.h"
#include "io/model_folder.h"
#include "io/weights.h"
#include "models/dit.h"
#include "nn/lora.h"
#include "nn/lora_side.h"
#include "parallel/config.h"
#include "parallel/pipefusion_attention.h"
#include "parallel/runtime.h"
#include "pipeline/denoiser.h"
#include "pipeline/latent_decoder.h"
#include "pipeline/memory_estimate.h"
#include "pipeline/model_family.h"
#include "pipeline/plan.h"
#include "pipeline/request.h"
#include "pipeline/step_cache.h"
#include "schedulers/scheduler_config.h"

namespace xdit::pipeline {

class Pipeline {
 public:
  static constexpr int64_t kVaeScaleFactor = 8;
  // No side may exceed this (a bound that keeps every size product in 64
  // bits; the memory estimate refuses far smaller sizes on real machines).
  static constexpr int64_t kMaxImageSide = int64_t{1} << 20;
  static constexpr int64_t kMaxFrames = int64_t{1} << 16;  // per prompt, likewise

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
  // Pixels per latent pixel and frames per latent frame: from
  // vae/config.json, {8, 1} without a VAE.
  LatentDecoder::Factors vae_factors() const;
  int64_t vae_scale_factor() const { return vae_factors().spatial; }
  // The token rows (frames × patch rows) a plan's latents make.
  int64_t token_rows(const PlanFields& p) const;
  const schedulers::SchedulerConfig& scheduler_config() const { return sched_cfg_; }
  // PixArt-α 120, PixArt-Σ 300, FLUX 512 (diffusers' defaults). Needs the
  // text side (a plan with prompts opens it).
  int64_t default_max_sequence_length() const { return family_->default_max_sequence_length(); }

  // The one check of a request (plan.h): fills defaults, bins or floors the
  // size, opens the tokenizers' / text encoders' configs (prompts) and the
  // VAE's (images) with their weight headers, and checks everything against
  // the model, the mesh and the memory left; throws a one-line error. Cheap:
  // call before load(). Nothing that runs a plan checks it again.
  Plan plan(const ImageRequest& r, Output out = Output::kImages);
  // Embeddings → latents (or images, through the VAE).
  Plan plan(const LatentRequest& r, Output out = Output::kLatents);
  void load();
  // Runs the denoising loop; returns the final latents [P, C, F, H/f, W/f].
  // A plan with prompts encodes them first. `hooks` run at every step after
  // the pipeline's own (denoiser.h).
  Tensor generate_latents(const Plan& plan,
                          const std::function<void(const StepEvent&)>& on_step = {},
                          const std::vector<StepHook*>& hooks = {});
  // Plans `r`, then runs the plan.
  Tensor generate_latents(const LatentRequest& r,
                          const std::function<void(const StepEvent&)>& on_step = {},
                          const std::vector<StepHook*>& hooks = {}) {
    return generate_latents(plan(r), on_step, hooks);
  }
  // Tokenizes and encodes a plan's prompts (and the negative prompt under CFG).
  PromptEmbeddings encode_prompts(const Plan& plan);
  // Decodes latents [B, C, F, h, w] to frames in [−1, 1], [B·F', 3, H, W]:
  // batch item b's frame f at b·F' + f (an image: [B, 3, H, W]; F' = F for
  // an image VAE, Wan's: 1 + 4·(F − 1)); after a plan with Output::kImages
  // has opened the VAE.
  Tensor decode_latents(const Tensor& latents);
  // The whole pipeline: encode, denoise, decode, resize back from the bin.
  ImageResult generate(const Plan& plan, const std::function<void(const StepEvent&)>& on_step = {});
  ImageResult generate(const ImageRequest& r,
                       const std::function<void(const StepEvent&)>& on_step = {}) {
    return generate(plan(r), on_step);
  }
  // Runs the transformer over the mesh: CFG halves on the two CFG groups,
  // image rows split over the sequence-parallel group (Ulysses / Ring / USP
  // attention), blocks over PipeFusion stages, layers' weights over the
  // tensor-parallel group (the T5 encoder over text_parallel() ranks).
  // nullptr (the default) is the serial run. Set before load() and before
  // the text encoder runs.
  void set_mesh(parallel::Mesh* mesh);
  parallel::Mesh* mesh() const { return mesh_; }

  // LoRA adapters merged into the transformer's weights as it loads
  // (nn/lora.h), each at its scale (diffusers' set_adapters weights). Set
  // before load(); throws one line for a LoRA that does not fit the model
  // (its unmatched modules too, unless ignore_unmatched) before any weight
  // is read. A pipeline made from a WeightSource (not a folder) takes none.
  void set_loras(std::vector<nn::LoraUse> loras, bool ignore_unmatched = false);
  // The transformer's weights from a single-file checkpoint instead of the
  // folder's (the folder's configs and other components still used): a
  // GGUF file of FLUX.1's original layout (docs/quantization.md). Set
  // before set_loras and the load; checked against the config in one line.
  void set_transformer_file(const std::string& path);
  // How the transformer's layers keep weights stored as floats
  // (--weights_dtype: int8, fp8, q8_0; kernels::WeightFormat). Set before load().
  void set_weights_format(kernels::WeightFormat f);
  // Throws one line when the folder holds no transformer weights and no
  // file was given (set_transformer_file): called by load(), and by the
  // front ends before any heavy work.
  void check_transformer_weights() const;
  // "a.safetensors:0.7, b.safetensors:-0.4" (file names), "" when none;
  // with "; N unmatched skipped" where --lora_ignore_unmatched skipped
  // tensors and modules that match nothing (the text encoders' counted once
  // they are open).
  std::string lora_label() const;
  // The largest LoRA file a request's LoRAs may be (--max_lora_bytes).
  void set_max_lora_bytes(size_t max_bytes) { lora_files_.set_max_bytes(max_bytes); }
  // A request's LoRAs (ImageRequest::loras, by path) are checked by plan()
  // — each file read once and kept; refused in one line where it does not
  // fit the model (as set_loras) or adapts more than the transformer — and
  // applied by each run beside the loaded weights, in a low-rank side path
  // per adapted layer (nn/lora_side.h), replacing the previous run's: no
  // weight is reloaded or changed, so a run without is the base model's bit
  // for bit. The layers the last run adapted:
  int request_lora_layers() const { return request_lora_layers_; }
  // Bytes the loaded transformer's linear layers keep of their weights
  // (packed, block-quantized, int8 or fp8).
  size_t linear_weight_bytes() const;
  // The weights in layers with side paths, by component: the transformer's
  // (every PipeFusion stage's, gathered by load()) and the text encoders'
  // built so far. xdit serve hands a loaded pipeline's to the one that
  // checks requests, whose plan() then refuses an adapter of any other
  // weight (an embedding, say) instead of a run failing on every rank.
  std::map<std::string, std::set<std::string>> request_lora_targets() const;
  void set_request_lora_targets(std::map<std::string, std::set<std::string>> targets) {
    lora_targets_ = std::move(targets);
  }

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
  // The loaded transformer (null before load()): block hooks attach here.
  // Wan2.2's two experts: load() loads `transformer`; a run loads
  // `transformer_2` when its first step needs it — after freeing the first
  // under one-shot, else keeping both (a block hook set here follows the
  // run to the other).
  models::DiT* transformer() const { return transformer_.get(); }
  // The experts loaded now (0, 1 or 2; 1 for a model of one transformer once loaded).
  int resident_experts() const { return (transformer_ ? 1 : 0) + (parked_ ? 1 : 0); }
  // load(), and a resident (not one-shot) pipeline of two experts loads the
  // second too (xdit serve: the memory both take is known before the first
  // request, which then loads nothing).
  void load_experts();

  // The weights are held resident by another pipeline of this process
  // (xdit serve's validator checks requests while the serving pipeline
  // runs): the memory check counts the request's activations, not the
  // transformer's weights again.
  void set_weights_resident(bool resident) { weights_resident_ = resident; }

  // Each data-parallel replica runs a request of its own, whole (xdit
  // serve's rounds), instead of a share of one batch: a plan then needs no
  // prompt per data-parallel group.
  void set_request_per_replica(bool on) { request_per_replica_ = on; }

  // A service's limits on each request (request.h), refused by plan() with
  // one line naming the flag; none by default.
  void set_request_limits(const RequestLimits& limits) { limits_ = limits; }

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
  // The loop's inputs: the batch's conditioning ([uncond; cond] under CFG,
  // one half under CFG parallel) and the guider, and the prompt half alone
  // (unmasked: a guider's extra pass, SD3's skip-layer call).
  LoopInputs loop_inputs(const PlanFields& r) const;
  // The request's {uncond, cond} conditioning: masks matched, and the
  // family's per-request tensors added to each half.
  std::pair<models::Conditioning, models::Conditioning> halves(const PlanFields& r) const;
  LoopInputs prompt_half_inputs(const PlanFields& r, const LoopInputs& li) const;

  void check_size(int64_t height, int64_t width) const;
  // The request against limits_: steps, and a batch of `prompts` of
  // `frames` frames at height x width px (called with both the run and the
  // written size).
  void check_limits(int64_t steps, int64_t prompts, int64_t frames, int64_t height,
                    int64_t width) const;
  void check_steps(int64_t steps) const;
  // A request's guidance knobs (`asked`: kDefaultGuidance where not given)
  // into `f`: the guider's defaults filled, its checks, the second expert's
  // scale, its warnings about knobs of no effect.
  void settle_guidance(const GuidanceSettings& asked, PlanFields& f) const;
  // What the guider's checks need of the model and the mesh.
  GuidanceLayout guidance_layout() const;
  // The second expert's guidance as asked (kDefaultGuidance: guidance_scale,
  // as diffusers defaults it); −1 for a model of one transformer, which
  // refuses one given.
  double second_guidance(double asked, double guidance_scale) const;
  // Applies the family's default size, and for families that floor sizes
  // (FLUX) floors to the latent grid with a warning; PixArt refuses a size
  // off its grid with `hint`.
  void settle_size(int64_t& height, int64_t& width, const char* hint) const;
  // The size and frame count against the model's positional tables.
  void check_positions(int64_t latent_frames, int64_t height, int64_t width) const;
  // The layout against the model at this size and frame count, and the
  // prompts against the data-parallel groups.
  void check_mesh(int64_t height, int64_t latent_frames, bool cfg, int64_t prompts) const;
  // A request's frame count (0: the family's default) against the model, a
  // video VAE's count rounded as diffusers does, or the frames given latents
  // [P, C, F, h, w] decode to; fills num_frames and latent_frames.
  void settle_frames(int64_t asked, const Tensor& given, PlanFields& f) const;
  // Initial latents against the batch and the run size; the finite check
  // (after the embeddings', as before) returns them in f32.
  void check_latents_shape(const Tensor& latents, int64_t prompts, int64_t height,
                           int64_t width) const;
  static Tensor finite_latents(const Tensor& latents);
  // The VAE's config and weight headers, opened and checked once.
  void open_vae();
  // Loads expert `expert` (0: transformer, 1: transformer_2) into transformer_.
  void load_expert(int expert);
  // One expert's part of a run: steps [begin, end) (at the guider's scale for it).
  struct ExpertPart {
    int64_t begin = 0, end = 0;
    int expert = 0;
  };
  // The run's parts over the scheduler's timesteps `ts` (one for a model of
  // one transformer).
  std::vector<ExpertPart> expert_parts(const std::vector<float>& ts) const;
  // Makes `expert` transformer_: the loaded other swapped in, or loaded.
  void use_expert(int expert);
  // A request's step cache checked against the model, its defaults filled.
  CacheSettings checked_cache(const CacheSettings& c) const;
  // A request's LoRAs opened (kept by path) and checked; applied to the
  // loaded transformer's side paths when they differ from the last run's.
  std::vector<nn::LoraUse> request_lora_uses(const std::vector<LoraRef>& loras);
  std::vector<LoraRef> checked_request_loras(const std::vector<LoraRef>& loras);
  void apply_request_loras(const std::vector<LoraRef>& loras);
  // request_lora_targets()'s transformer part, at load (collective over the
  // PipeFusion stages).
  void note_request_lora_targets();
  // The memory query for a plan's `prompts` images (its frames) at its run
  // size on this mesh.
  MemoryQuery memory_query(int64_t prompts, const PlanFields& f) const;
  // The estimate of `q` against the memory left (weights already loaded not
  // counted again); throws when it cannot fit.
  void check_request_memory(const MemoryQuery& q) const;

  std::optional<io::ModelFolder> folder_;
  DType dtype_;
  std::unique_ptr<ModelFamily> family_;
  schedulers::SchedulerConfig sched_cfg_;
  std::unique_ptr<io::WeightSource> weights_;  // until load() has built the transformer
  kernels::WeightFormat weights_format_ = kernels::WeightFormat::kCompute;
  bool transformer_file_needed_ = false;  // the folder holds no transformer weights
  // With LoRAs: the folder's weights, which weights_ (nn::LoraWeights) reads.
  std::unique_ptr<io::WeightSource> lora_base_;
  std::string lora_label_;
  int64_t lora_skipped_ = 0;  // set_loras' unmatched tensors and modules skipped
  // The transformer's linear layers as loaded (each with its side path),
  // the request LoRAs' files by path, and the LoRAs the side paths hold.
  nn::LinearRegistry layers_;
  nn::LoraFileCache lora_files_;                               // a request's LoRAs, in memory
  std::optional<std::vector<LoraRef>> applied_request_loras_;  // none: unknown (a failure)
  int request_lora_layers_ = 0;
  std::map<std::string, Shape> model_shapes_;  // the transformer's weights, kept by load()
  std::map<std::string, std::set<std::string>> lora_targets_;  // request_lora_targets()
  std::unique_ptr<models::DiT> transformer_;
  // Wan2.2: transformer_2's weights until that expert loads; which expert
  // transformer_ is, and the other one while both stay loaded.
  std::unique_ptr<io::WeightSource> weights_2_;
  int expert_ = 0, parked_expert_ = 0;
  std::unique_ptr<models::DiT> parked_;
  bool stage_blocks_measured_ = false;  // --attn_layer_num_for_pp auto, once
  // The VAE, opened by a plan with Output::kImages, built on first use;
  // its factors as read from its config before that.
  std::unique_ptr<LatentDecoder> decoder_;
  mutable std::optional<LatentDecoder::Factors> factors_;
  bool text_opened_ = false;
  bool told_vae_bands_ = false;  // the decoder's bands logged once
  bool keep_text_encoder_ = false;
  bool one_shot_ = false;
  bool weights_resident_ = false;
  Device device_;
  bool request_per_replica_ = false;
  RequestLimits limits_;
  parallel::Mesh* mesh_ = nullptr;
  // The parallel methods: made by set_mesh, its backend attached by load().
  std::unique_ptr<parallel::ParallelRuntime> runtime_;

 public:
  // After a PipeFusion run: this stage's attention (its K/V buffers) and the
  // number of patch forwards it ran after the warm-up (for tests).
  const parallel::PipeFusionAttention* pipefusion_attention() const {
    return runtime_ ? runtime_->pipefusion() : nullptr;
  }
  int64_t pipefusion_patch_forwards() const { return pf_stats_.patch_forwards; }
  // The micro-steps (1-based, of the patch pipeline after the warm-up) of
  // this stage's first and last patch forward; 0 when none ran.
  std::pair<int64_t, int64_t> pipefusion_micro_steps() const {
    return {pf_stats_.first_micro_step, pf_stats_.last_micro_step};
  }
  // Test switch: a stale-K/V method (a PipeFusion stage or a DistriFusion
  // band) that never refreshes its K/V after the warm-up (the deviation
  // tests must catch it). Set before load().
  void set_stale_kv_refresh(bool refresh) { stale_refresh_ = refresh; }

 private:
  PipeFusionStats pf_stats_;
  bool stale_refresh_ = true;

 public:
  // The last run's step cache and what it did on this rank (an empty label
  // without one).
  struct CacheReport {
    std::string label;
    CacheStats stats;
  };
  const CacheReport& cache_report() const { return cache_report_; }
  // "fbcache threshold 0.05: 6 of 10 steps in full, 34 of 57 blocks run",
  // or "" (the last run had no cache).
  std::string cache_summary() const;

 private:
  // Where a run's step cache sits and whom it agrees with.
  CacheSetup cache_setup(const PlanFields& r) const;
  // One expert's part of a run (denoise_run.cpp), its cache's counts added to `report`.
  Tensor run_part(const PlanFields& r, LoopInputs li, schedulers::Scheduler& sched,
                  const ExpertPart& part, Tensor latents, const std::vector<StepHook*>& hooks,
                  CacheReport& report, ProgressHook progress);
  CacheReport cache_report_;
};

}  // namespace xdit::pipeline
