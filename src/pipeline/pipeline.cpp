#include "pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "comm/device_comm.h"
#include "core/block_cache.h"
#include "core/error.h"
#ifdef XDIT_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif
#include "core/log.h"
#include "core/trace.h"
#include "parallel/vae_bands.h"
#include "pipeline/family_util.h"
#include "pipeline/resolution.h"
#include "pipeline/step_hooks.h"

namespace xdit::pipeline {

namespace {
// Bytes of the weights a stage loads, as f32 ("412 MB of weights (as f32)").
std::string stage_weight_bytes(const ModelFamily& family, const models::DiTStage& stage) {
  double bytes = 0;
  for (const auto& [name, shape] : family.weight_specs(stage))
    bytes += static_cast<double>(shape_numel(shape)) * 4.0;
  return human_size(bytes) + " of weights (as f32)";
}

void check_embeds(const Tensor& e, const Tensor& mask, const char* name, int64_t channels) {
  XDIT_CHECK(e.ndim() == 3, name, " must be [batch, tokens, ", channels, "], got ",
             shape_str(e.shape()));
  XDIT_CHECK(e.dim(2) == channels, name, " has hidden size ", e.dim(2),
             " but this model takes text of width ", channels,
             " (embeddings from a different text encoder?)");
  if (mask.defined())
    XDIT_CHECK(mask.ndim() == 2 && mask.dim(0) == e.dim(0) && mask.dim(1) == e.dim(1), name,
               " attention mask must be [", e.dim(0), ", ", e.dim(1), "], got ",
               shape_str(mask.shape()));
}

void check_pooled(const Tensor& p, const char* name, int64_t prompts, int64_t width) {
  XDIT_CHECK(p.defined(), name, " are required by this model (FLUX's pooled CLIP embedding)");
  XDIT_CHECK(p.ndim() == 2 && p.dim(0) == prompts && p.dim(1) == width, name, " must be [", prompts,
             ", ", width, "], got ", shape_str(p.shape()));
}

// Stacks [a; b] along the batch dimension (f32); undefined stays undefined.
Tensor cat_batch(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return a;
  Shape s = a.shape();
  s[0] += b.dim(0);
  Tensor out = Tensor::empty(s);
  Tensor af = a.to(DType::kF32), bf = b.to(DType::kF32);
  std::memcpy(out.data<float>(), af.data<float>(), af.nbytes());
  std::memcpy(out.data<float>() + af.numel(), bf.data<float>(), bf.nbytes());
  return out;
}
Tensor ones_mask(const Tensor& e) {
  Tensor m = Tensor::empty({e.dim(0), e.dim(1)});
  std::fill(m.data<float>(), m.data<float>() + m.numel(), 1.0f);
  return m;
}
Tensor f32(const Tensor& t) {
  return t.defined() ? t.to(DType::kF32) : t;
}
}  // namespace

Pipeline::Pipeline(const std::string& folder, DType dtype) : folder_(folder), dtype_(dtype) {
  family_ = ModelFamily::from_folder(*folder_);
  const std::string sdir = folder_->component("scheduler");
  sched_cfg_ = schedulers::SchedulerConfig::from_json(
      folder_->component_config("scheduler", "scheduler_config.json"),
      sdir + "/scheduler_config.json");
  auto store = std::make_unique<io::WeightStore>(folder_->component("transformer"));
  store->check_shapes(family_->weight_specs({}));  // the config against the headers
  weights_ = std::move(store);
}

Pipeline::Pipeline(std::unique_ptr<ModelFamily> family, const schedulers::SchedulerConfig& sched,
                   std::unique_ptr<io::WeightSource> weights, DType dtype)
    : dtype_(dtype), family_(std::move(family)), sched_cfg_(sched), weights_(std::move(weights)) {}

Pipeline::~Pipeline() = default;

void Pipeline::set_mesh(parallel::Mesh* mesh) {
  mesh_ = mesh;
  runtime_ = std::make_unique<parallel::ParallelRuntime>(mesh_, spec().patch);
}

nn::TensorParallel Pipeline::tensor_parallel() const {
  return mesh_ != nullptr ? nn::TensorParallel::of(*mesh_->model_groups().tp)
                          : nn::TensorParallel{};
}

int Pipeline::text_parallel() const {
  if (mesh_ == nullptr) return 1;
  if (device_.cuda()) return mesh_->config().tensor_parallel_degree;
  return family_->text_parallel_degree(mesh_->config().replica());
}

bool Pipeline::vae_in_bands(int64_t latent_rows) const {
  if (mesh_ == nullptr) return false;
  const auto& pc = mesh_->config();
  if (pc.use_parallel_vae.has_value() || pc.patch_parallel_degree > 1 || device_.cuda())
    return pc.parallel_vae();
  return pc.replica() > 1 && latent_rows >= pc.replica();
}

const io::ModelFolder& Pipeline::folder() const {
  XDIT_CHECK(folder_.has_value(), "this pipeline was built without a model folder");
  return *folder_;
}

int64_t Pipeline::vae_scale_factor() const {
  if (vae_cfg_) return vae_cfg_->scale_factor();
  if (!folder_) return kVaeScaleFactor;
  const std::string cfg = folder_->root() + "/vae/config.json";
  if (std::filesystem::is_regular_file(cfg))
    return models::VaeConfig::from_json(io::read_json_file(cfg), cfg).scale_factor();
  return kVaeScaleFactor;
}

bool Pipeline::uses_cfg(const LatentRequest& r) const {
  return family_->uses_cfg(r.guidance_scale, r.true_cfg_scale, r.negative_embeds.defined());
}

void Pipeline::settle_size(int64_t& height, int64_t& width, const char* hint) const {
  const int64_t vsf = vae_scale_factor(), unit = vsf * spec().patch;
  if (height == 0) height = family_->default_size(vsf);
  if (width == 0) width = family_->default_size(vsf);
  check_size(height, width);
  const int64_t most = family_->max_side(vsf);
  XDIT_CHECK(most == 0 || (height <= most && width <= most), "height ", height, " and width ",
             width, " must be at most ", most, " px for this model (its position table covers ",
             most / unit, " patches of ", unit, " px per side)");
  if (height % unit == 0 && width % unit == 0) return;
  if (family_->floors_size()) {
    const int64_t h = height / unit * unit, w = width / unit * unit;
    XDIT_CHECK(h > 0 && w > 0, "height ", height, " and width ", width, " must be at least ", unit,
               " px (multiples of ", unit, ")");
    XDIT_WARN("height ", height, " and width ", width, " are not multiples of ", unit, ": using ",
              h, "x", w, " as diffusers does (pass multiples of ", unit,
              " to choose the size yourself)");
    height = h;
    width = w;
    return;
  }
  XDIT_FAIL("height ", height, " and width ", width, " must be multiples of ", unit,
            " (VAE factor ", vsf, " x patch size ", spec().patch, ")", hint);
}

void Pipeline::check_mesh(int64_t height, bool cfg) const {
  if (mesh_ == nullptr) return;
  const auto s = spec();
  const auto& pc = mesh_->config();
  pc.validate_request(s.heads, height / vae_scale_factor() / s.patch, cfg,
                      family_->pooled_width() > 0 ? "a negative prompt and --true_cfg_scale > 1"
                                                  : "--guidance_scale > 1");
  family_->check_tensor_parallel(pc.tensor_parallel_degree);
  if (pc.parallel_vae()) pc.vae_rows(height / vae_scale_factor());  // throws when too thin
}

void Pipeline::warn_unused_once(double guidance_scale, double true_cfg_scale,
                                bool has_negative) const {
  if (warned_) return;  // validate runs more than once per request
  family_->warn_unused(guidance_scale, true_cfg_scale, has_negative);
  warned_ = true;
}

void Pipeline::validate(LatentRequest& r) const {
  warn_unused_once(r.guidance_scale, r.true_cfg_scale, r.negative_embeds.defined());
  if (r.num_inference_steps == kDefaultSteps) r.num_inference_steps = family_->default_steps();
  if (r.guidance_scale == kDefaultGuidance) r.guidance_scale = family_->default_guidance();
  settle_size(r.height, r.width, "");
  XDIT_CHECK(r.num_inference_steps >= 0, "num_inference_steps must be >= 0");
  check_steps(r.num_inference_steps);
  check_guidance(r.guidance_scale, r.true_cfg_scale);
  XDIT_CHECK(r.prompt_embeds.defined(), "prompt_embeds are required");
  check_embeds(r.prompt_embeds, r.prompt_mask, "prompt_embeds", family_->text_width());
  const int64_t P = r.prompt_embeds.dim(0);
  const bool pooled = family_->pooled_width() > 0;
  if (pooled) check_pooled(r.pooled_embeds, "pooled_prompt_embeds", P, family_->pooled_width());
  const bool cfg = uses_cfg(r);
  if (cfg) {
    XDIT_CHECK(r.negative_embeds.defined(), "guidance_scale ", r.guidance_scale,
               " > 1 needs negative_prompt_embeds in the embeddings file (or pass "
               "--guidance_scale 1)");
    check_embeds(r.negative_embeds, r.negative_mask, "negative_prompt_embeds",
                 family_->text_width());
    XDIT_CHECK(r.negative_embeds.dim(0) == P && r.negative_embeds.dim(1) == r.prompt_embeds.dim(1),
               "negative_prompt_embeds ", shape_str(r.negative_embeds.shape()),
               " must match prompt_embeds ", shape_str(r.prompt_embeds.shape()));
    if (pooled)
      check_pooled(r.negative_pooled, "negative_pooled_prompt_embeds", P, family_->pooled_width());
  }
  check_mesh(r.height, cfg);
  check_skip_layer_guidance(r.skip_layer_guidance, cfg);
  const int64_t vsf = vae_scale_factor();
  if (r.latents.defined()) {
    const Shape want{P, spec().latent_channels, r.height / vsf, r.width / vsf};
    XDIT_CHECK(r.latents.shape() == want, "latents have shape ", shape_str(r.latents.shape()),
               " but ", r.height, "x", r.width, " px with ", P, " prompt(s) needs ",
               shape_str(want));
  }
  for (const auto& [t, name] : {std::pair{&r.prompt_embeds, "prompt_embeds"},
                                {&r.negative_embeds, "negative_prompt_embeds"},
                                {&r.pooled_embeds, "pooled_prompt_embeds"},
                                {&r.negative_pooled, "negative_pooled_prompt_embeds"},
                                {&r.latents, "latents"}}) {
    const int64_t bad = count_nonfinite(*t);
    XDIT_CHECK(bad == 0, name, " hold ", bad, " NaN/Inf value(s): give finite values");
  }
  MemoryQuery q = memory_query(P, r.height, r.width, cfg);
  q.text_tokens = r.prompt_embeds.dim(1);
  check_request_memory(q);
}

void Pipeline::check_skip_layer_guidance(const SkipLayerGuidance& s, bool cfg) const {
  if (!s.on()) return;
  XDIT_CHECK(family_->skips_layers(),
             "skip-layer guidance (--skip_guidance_layers) is a Stable "
             "Diffusion 3 option; ",
             family_->name(), " does not take it");
  for (const int64_t l : s.layers)
    XDIT_CHECK(l >= 0 && l < spec().blocks, "skip-guidance layer ", l,
               " is outside the model's blocks 0 … ", spec().blocks - 1);
  XDIT_CHECK(std::isfinite(s.scale) && std::isfinite(s.start) && std::isfinite(s.stop) &&
                 s.start >= 0 && s.stop <= 1 && s.start <= s.stop,
             "skip_layer_guidance_scale must be finite and 0 <= start <= stop <= 1, got scale ",
             s.scale, ", start ", s.start, ", stop ", s.stop);
  XDIT_CHECK(mesh_ == nullptr || (mesh_->config().pipefusion_parallel_degree == 1 &&
                                  mesh_->config().patch_parallel_degree == 1),
             "skip-layer guidance does not run with PipeFusion or patch parallelism yet: use "
             "sequence, CFG or data parallelism");
  if (!cfg && !warned_slg_) {
    XDIT_WARN(
        "skip-layer guidance has no effect without classifier-free guidance "
        "(guidance_scale > 1), as in diffusers");
    warned_slg_ = true;
  }
}

void Pipeline::check_size(int64_t height, int64_t width) const {
  XDIT_CHECK(height > 0 && width > 0, "height and width must be positive, got ", height, "x",
             width);
  XDIT_CHECK(height <= kMaxImageSide && width <= kMaxImageSide, "height and width must be at most ",
             kMaxImageSide, " px, got ", height, "x", width);
}

void Pipeline::check_steps(int64_t steps) const {
  if (sched_cfg_.dpm_solver() != nullptr)  // it picks steps among the training timesteps
    XDIT_CHECK(steps <= sched_cfg_.num_train_timesteps(), "num_inference_steps ", steps,
               " exceeds the scheduler's ", sched_cfg_.num_train_timesteps(),
               " training timesteps (num_train_timesteps in scheduler_config.json)");
  // The schedule itself (its checks on the timesteps it makes) costs microseconds.
  if (steps >= 1)
    sched_cfg_.make()->set_timesteps(steps, family_->timestep_hints(sched_cfg_, steps, 64, 64));
}

void Pipeline::check_guidance(double g, double true_cfg) const {
  XDIT_CHECK(std::isfinite(g) && g >= 0, "guidance_scale must be a finite number >= 0, got ", g);
  XDIT_CHECK(std::isfinite(true_cfg) && true_cfg >= 0,
             "true_cfg_scale must be a finite number >= 0, got ", true_cfg);
}

void Pipeline::check_request_memory(const MemoryQuery& q) const {
  MemoryEstimate e = estimate_memory(spec(), family_->parameter_count(), q);
  if (transformer_ || weights_resident_) e.transformer = 0;  // already resident
  if (device_.cuda()) {
    // Everything but the scheduler runs on the GPU: the text encoders (freed
    // before the transformer loads, unless kept), then the transformer with
    // a step's activations, which stays loaded through the VAE's decode.
#ifdef XDIT_HAVE_CUDA
    const auto info = cuda::device_info(device_.index);
    const double run = e.transformer + std::max(e.denoise, e.decode);
    const double need = keep_text_encoder_ ? e.text_encoder + run : std::max(e.text_encoder, run);
    // Ranks of this machine that share the GPU: each checks before any of
    // them allocates, so each needs its share.
    const int sharing =
        mesh_ != nullptr && mesh_->world().size() > 1 ? comm::ranks_on_gpu(device_.index) : 1;
    XDIT_CHECK(
        need * sharing <= static_cast<double>(info.free_bytes), "this request needs about ",
        human_size(need), " on ", device_.str(), " (transformer ", human_size(e.transformer),
        ", denoising ", human_size(e.denoise), ", decoding ", human_size(e.decode),
        ", text encoder ", human_size(e.text_encoder), ")",
        sharing > 1 ? " for each of the " + std::to_string(sharing) + " ranks sharing it" : "",
        " but ", human_size(static_cast<double>(info.free_bytes)), " of ",
        human_size(static_cast<double>(info.total_bytes)), " is free on ", info.name,
        ": use a smaller size, fewer prompts", sharing > 1 ? " or fewer ranks per GPU" : "");
#endif
    e.transformer = e.denoise = e.decode = e.text_encoder = 0;
  }
  check_memory(e, comm::local_process_count());
}

void Pipeline::set_device(Device device) {
  if (device.cuda()) {
    XDIT_CHECK(family_->runs_on_cuda(), "--device ", device.str(), ": the ", family_->name(),
               " pipeline does not run on the CUDA backend yet; use --device cpu");
    XDIT_CHECK(!transformer_, "set_device after the transformer loaded");
    if (mesh_ != nullptr && mesh_->world().size() > 1) {
      // Every rank takes the GPU of its local rank; the mesh's model groups
      // move to device communicators (NCCL, or host-staged where ranks share
      // a GPU), the pipeline's own exchanges stay on the host.
      XDIT_CHECK(device.index == 0, "--device ", device.str(),
                 ": under mpirun each rank takes the GPU of its local rank; use --device cuda "
                 "(CUDA_VISIBLE_DEVICES chooses the GPUs)");
      if (mesh_->device_comm().empty()) {  // the first pipeline on this mesh (serve has two)
        std::string note;
        const comm::RankDevice mine = comm::rank_device(&note);
        if (!note.empty() && mesh_->world().rank() == 0) XDIT_INFO(note);
        mesh_->set_device(mine.device, mine.kind);
      }
      device = mesh_->device();
    }
    check_device(device);
  }
  device_ = device;
}

MemoryQuery Pipeline::memory_query(int64_t prompts, int64_t height, int64_t width, bool cfg) const {
  MemoryQuery q;
  q.prompts = prompts;
  q.run_height = q.out_height = height;
  q.run_width = q.out_width = width;
  q.cfg = cfg;
  q.dtype = dtype_;
  q.vae_scale_factor = vae_scale_factor();
  q.text_streamed = !keep_text_encoder_ && !device_.cuda();
  q.one_shot = one_shot_;
  if (mesh_ != nullptr) {
    const auto& pc = mesh_->config();
    q.data_parallel = pc.data_parallel_degree;
    q.sequence_parallel = pc.sp();
    q.pipeline_stages = pc.pipefusion_parallel_degree;
    q.tensor_parallel = pc.tensor_parallel_degree;
    q.text_parallel = text_parallel();
    q.cfg_parallel = pc.use_cfg_parallel;
    if (vae_in_bands(height / q.vae_scale_factor)) q.vae_bands = pc.replica();
  }
  return q;
}

void Pipeline::load() {
  if (transformer_) return;
  XDIT_CHECK(weights_,
             "this one-shot pipeline released its transformer after its image; make a "
             "new pipeline for another");
  if (!runtime_) runtime_ = std::make_unique<parallel::ParallelRuntime>(mesh_, spec().patch);
  const models::DiTStage stage = runtime_->stage(spec().blocks);
  const size_t before = weights_->loaded().total;
  {
    // On a CUDA device the layers upload their weights as they are made.
    DeviceScope scope(device_);
    transformer_ = family_->make_transformer(*weights_, dtype_, stage);
  }
  if (stage.tp.split())
    XDIT_INFO("tensor parallel rank ", stage.tp.rank, " of ", stage.tp.size, ": loaded ",
              human_size(static_cast<double>(weights_->loaded().total - before)), " of the ",
              human_size(static_cast<double>(weights_->stored_bytes())),
              " transformer weights (as stored; modulation and embeddings whole)");
  // The layers hold converted copies of their (shares of the) weights: the
  // files' mappings go, and with them the pages loading touched (a
  // tensor-parallel rank's strided reads touch most pages of a row-split
  // matrix), so a rank's resident weights are its shares.
  weights_.reset();
  runtime_->set_stale_refresh(stale_refresh_);
  runtime_->attach(*transformer_);
  if (runtime_->pipefusion() != nullptr) {
    // Every stage's blocks and weight bytes, logged by rank 0.
    const std::string line = detail::concat(
        "PipeFusion stage ", mesh_->coord().pp, ": blocks [", stage.block_begin, ", ",
        stage.block_end, ")", stage.first ? " + embeddings" : "",
        stage.last ? " + output layer" : "", ", ", stage_weight_bytes(*family_, stage));
    constexpr size_t kLine = 256;
    std::vector<char> mine(kLine, '\0'), all(kLine * static_cast<size_t>(mesh_->pp_group().size()));
    std::memcpy(mine.data(), line.data(), std::min(line.size(), kLine - 1));
    mesh_->pp_group().allgather(mine.data(), all.data(), kLine, comm::Type::kByte);
    for (int i = 0; i < mesh_->pp_group().size(); ++i)
      XDIT_INFO(std::string(all.data() + i * kLine));
  }
}

void Pipeline::release_transformer() {
  transformer_.reset();
  if (runtime_) runtime_->release();
  release_cached_blocks();  // before the decoder takes its buffers
}

LoopInputs Pipeline::loop_inputs(const LatentRequest& r) const {
  LoopInputs li;
  li.prompts = r.prompt_embeds.dim(0);
  li.cfg = uses_cfg(r);
  li.cfg_scale = family_->cfg_scale(r.guidance_scale, r.true_cfg_scale);
  li.timestep_divisor = spec().timestep_divisor;
  // Under CFG parallel each CFG group runs one half: group 0 the negative
  // prompt, group 1 the prompt; the predictions are all-gathered after.
  li.cfg_split = li.cfg && mesh_ != nullptr && mesh_->config().use_cfg_parallel;
  const int cfg_rank = li.cfg_split ? mesh_->coord().cfg : 0;
  const bool masked = r.prompt_mask.defined() || r.negative_mask.defined();
  const Tensor pmask = !masked                   ? Tensor()
                       : r.prompt_mask.defined() ? r.prompt_mask
                                                 : ones_mask(r.prompt_embeds);
  const Tensor nmask = !masked || !li.cfg          ? Tensor()
                       : r.negative_mask.defined() ? r.negative_mask
                                                   : ones_mask(r.negative_embeds);
  if (li.cfg_split) {
    const bool neg = cfg_rank == 0;
    li.text = f32(neg ? r.negative_embeds : r.prompt_embeds);
    li.mask = f32(neg ? nmask : pmask);
    li.pooled = f32(neg ? r.negative_pooled : r.pooled_embeds);
  } else if (li.cfg) {
    li.text = cat_batch(r.negative_embeds, r.prompt_embeds);
    li.mask = cat_batch(nmask, pmask);
    li.pooled = cat_batch(r.negative_pooled, r.pooled_embeds);
  } else {
    li.text = f32(r.prompt_embeds);
    li.mask = f32(pmask);
    li.pooled = f32(r.pooled_embeds);
  }
  li.batch = (li.cfg && !li.cfg_split) ? 2 * li.prompts : li.prompts;
  // PixArt-α's micro-conditions: the size in pixels and its aspect ratio.
  li.resolution = Tensor::empty({li.batch, 2});
  li.aspect = Tensor::empty({li.batch, 1});
  for (int64_t b = 0; b < li.batch; ++b) {
    li.resolution.data<float>()[2 * b] = static_cast<float>(r.height);
    li.resolution.data<float>()[2 * b + 1] = static_cast<float>(r.width);
    li.aspect.data<float>()[b] =
        static_cast<float>(static_cast<double>(r.height) / static_cast<double>(r.width));
  }
  if (family_->embeds_guidance())
    li.guidance.assign(static_cast<size_t>(li.batch), static_cast<float>(r.guidance_scale));
  return li;
}

LoopInputs Pipeline::skip_inputs(const LatentRequest& r, const LoopInputs& li) const {
  LoopInputs s = li;  // the micro-conditions and divisor; the prompt half only
  s.text = f32(r.prompt_embeds);
  s.mask = Tensor();
  s.pooled = f32(r.pooled_embeds);
  s.batch = s.prompts;
  s.cfg = s.cfg_split = false;
  s.skip_blocks = r.skip_layer_guidance.layers;
  if (!s.guidance.empty()) s.guidance.resize(static_cast<size_t>(s.batch));
  return s;
}

Tensor Pipeline::generate_latents(const LatentRequest& req,
                                  const std::function<void(const StepEvent&)>& on_step,
                                  const std::vector<StepHook*>& hooks) {
  LatentRequest r = req;
  validate(r);
  load();
  const int64_t P = r.prompt_embeds.dim(0);
  const int64_t vsf = vae_scale_factor();
  const int64_t h = r.height / vsf, w = r.width / vsf, C = spec().latent_channels;
  Tensor latents =
      r.latents.defined() ? r.latents.to(DType::kF32) : initial_noise(P, C, h, w, r.seed);
  const auto sched = sched_cfg_.make();
  if (r.num_inference_steps == 0) return latents;
  sched->set_timesteps(r.num_inference_steps,
                       family_->timestep_hints(sched_cfg_, r.num_inference_steps, h, w));
  // latents * init_noise_sigma (1 for DPM-Solver and Flow-Match).
  const LoopInputs li = loop_inputs(r);
  Denoiser d(*transformer_, *runtime_, *sched, li, device_);
  CalibrationHook calibration;
  if (mesh_ != nullptr && mesh_->config().auto_weights && runtime_->pipefusion() == nullptr)
    d.add_hook(&calibration);
  SkipGuidanceHook slg(r.skip_layer_guidance, skip_inputs(r, li));
  if (r.skip_layer_guidance.on()) d.add_hook(&slg);
  for (StepHook* hook : hooks) d.add_hook(hook);
  ProgressHook progress(on_step);
  d.add_hook(&progress);
  Tensor out = d.run(std::move(latents));
  pf_stats_ = d.pipefusion_stats();
  return out;
}

void Pipeline::validate(ImageRequest& r) {
  XDIT_CHECK(!r.prompts.empty(), "at least one prompt is needed");
  if (r.num_inference_steps == kDefaultSteps) r.num_inference_steps = family_->default_steps();
  XDIT_CHECK(r.num_inference_steps >= 1,
             "num_inference_steps must be at least 1 for an image, got ", r.num_inference_steps);
  check_steps(r.num_inference_steps);
  const double given_guidance = r.guidance_scale;
  if (r.guidance_scale == kDefaultGuidance) r.guidance_scale = family_->default_guidance();
  check_guidance(r.guidance_scale, r.true_cfg_scale);
  warn_unused_once(given_guidance, r.true_cfg_scale, r.negative_prompt.has_value());
  // Text side and VAE: configs and weight headers.
  if (!text_opened_) {
    family_->open_text(folder());
    text_opened_ = true;
  }
  if (!vae_cfg_) {
    const std::string dir = folder().component("vae");
    vae_cfg_ = std::make_unique<models::VaeConfig>(models::VaeConfig::from_json(
        folder().component_config("vae", "config.json"), dir + "/config.json"));
    XDIT_CHECK(vae_cfg_->latent_channels == spec().latent_channels, "VAE latent_channels ",
               vae_cfg_->latent_channels, " does not match the transformer's ",
               spec().latent_channels, " latent channels");
    vae_weights_ = std::make_unique<io::WeightStore>(dir);
    vae_weights_->check_shapes(vae_cfg_->decoder_weight_specs());
  }
  if (r.max_sequence_length == 0) r.max_sequence_length = family_->default_max_sequence_length();
  XDIT_CHECK(r.max_sequence_length >= 1, "max_sequence_length must be positive");
  XDIT_CHECK(r.max_sequence_length <= family_->max_sequence_limit(), "max_sequence_length ",
             r.max_sequence_length, " exceeds the ", family_->max_sequence_limit(),
             " tokens this pipeline's T5 accepts");
  const int64_t vsf = vae_scale_factor();
  if (r.height == 0) r.height = family_->default_size(vsf);
  if (r.width == 0) r.width = family_->default_size(vsf);
  check_size(r.height, r.width);
  if (family_->bins_resolution() && r.resolution_binning) {
    std::tie(r.run_height, r.run_width) = classify_height_width_bin(
        r.height, r.width, bin_table_for_sample_size(family_->default_size(1)));
  } else {
    settle_size(r.height, r.width,
                family_->bins_resolution() ? ", or leave resolution binning on" : "");
    r.run_height = r.height;
    r.run_width = r.width;
  }
  // The size the model runs at against the mesh, before any encoding.
  const bool cfg =
      family_->uses_cfg(r.guidance_scale, r.true_cfg_scale, r.negative_prompt.has_value());
  check_mesh(r.run_height, cfg);
  check_skip_layer_guidance(r.skip_layer_guidance, cfg);
  // Everything the request will hold, up to the resized PNGs, against the
  // memory this machine has left.
  MemoryQuery q =
      memory_query(static_cast<int64_t>(r.prompts.size()), r.run_height, r.run_width, cfg);
  q.out_height = r.height;
  q.out_width = r.width;
  q.text_tokens = r.max_sequence_length;
  family_->describe_text(q);
  q.vae = vae_cfg_.get();
  check_request_memory(q);
}

PromptEmbeddings Pipeline::encode_prompts(const ImageRequest& r) {
  XDIT_CHECK(text_opened_, "encode_prompts before validate");
  // PixArt's CFG runs with the negative prompt "" when none is given;
  // FLUX's true CFG needs a given one.
  const bool cfg =
      family_->uses_cfg(r.guidance_scale, r.true_cfg_scale, r.negative_prompt.has_value());
  // T5's share: on the CPU the replica's text group (made on the first call,
  // collective over the replica, all of whose ranks encode these prompts),
  // on a CUDA device the transformer's tensor-parallel group.
  const int d = text_parallel();
  nn::TensorParallel share;  // whole
  if (d > 1)
    share = device_.cuda() ? tensor_parallel() : nn::TensorParallel::of(mesh_->text_group(d));
  family_->set_tensor_parallel(share);
  // Freed after this encoding (one-shot on the CPU): T5 builds a block at a
  // time, holding one block's weights instead of all of them.
  family_->set_text_resident(keep_text_encoder_ || device_.cuda());
  // On a CUDA device the text encoders run there too (the embeddings come
  // back to the host).
  DeviceScope scope(device_);
  return family_->encode(r, cfg, dtype_);
}

Tensor Pipeline::decode_latents(const Tensor& latents) {
  XDIT_CHECK(vae_cfg_, "decode_latents before validate");
  // On a CUDA device the decoder's weights and activations live there; the
  // image comes back to the host.
  DeviceScope scope(device_);
  if (!vae_) vae_ = std::make_unique<models::VaeDecoder>(*vae_cfg_, *vae_weights_, dtype_);
  Tensor image;
  if (vae_in_bands(latents.dim(2))) {
    // Every rank of the replica decodes its band of latent rows; every one
    // returns the whole image.
    const std::vector<int64_t> rows = mesh_->config().vae_rows(latents.dim(2));
    if (!told_vae_bands_)
      XDIT_INFO("VAE decoder in ", rows.size(), " row bands over the ranks of each replica");
    told_vae_bands_ = true;
    parallel::VaeBands bands(*mesh_->model_groups().replica, mesh_->replica_group(), rows);
    image = vae_->decode_latents(latents, &bands);
  } else {
    image = vae_->decode_latents(latents);
  }
  check_finite_output(image, "VAE decoder", "vae");
  return image;
}

ImageResult Pipeline::generate(ImageRequest r,
                               const std::function<void(const StepEvent&)>& on_step) {
  validate(r);
  using Clock = std::chrono::steady_clock;
  auto secs = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  ImageResult out;
  const auto t0 = Clock::now();
  PromptEmbeddings e = encode_prompts(r);
  if (!keep_text_encoder_) {
    family_->release_text();
    release_cached_blocks();  // their buffers go back to the system before the transformer's
  }
  const auto t1 = Clock::now();
  LatentRequest lr;
  lr.prompt_embeds = e.embeds;
  lr.prompt_mask = e.mask;
  lr.pooled_embeds = e.pooled;
  lr.negative_embeds = e.negative_embeds;
  lr.negative_mask = e.negative_mask;
  lr.negative_pooled = e.negative_pooled;
  lr.height = r.run_height;
  lr.width = r.run_width;
  lr.num_inference_steps = r.num_inference_steps;
  lr.guidance_scale = r.guidance_scale;
  lr.true_cfg_scale = r.true_cfg_scale;
  lr.skip_layer_guidance = r.skip_layer_guidance;
  lr.seed = r.seed;
  lr.latents = r.latents;
  Tensor latents = generate_latents(lr, on_step);
  if (one_shot_) release_transformer();
  const auto t2 = Clock::now();
  Tensor image = decode_latents(latents);
  if (family_->bins_resolution() && r.resolution_binning)
    image = resize_and_crop(image, r.height, r.width);
  out.rgb = models::image_to_rgb8(image);
  out.height = image.dim(2);
  out.width = image.dim(3);
  const auto t3 = Clock::now();
  out.text_seconds = secs(t0, t1);
  out.denoise_seconds = secs(t1, t2);
  out.decode_seconds = secs(t2, t3);
  return out;
}

}  // namespace xdit::pipeline
