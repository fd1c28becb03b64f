// The planner (plan.h): a request's defaults and every check before any
// weight loads — size, steps, guidance, embeddings, mesh and skip-layer
// guidance against the model, and what it needs against the memory this
// machine has left — done once, into an immutable Plan.
#include <cmath>
#include <filesystem>

#include "comm/device_comm.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "models/original_checkpoint.h"
#include "pipeline/pipeline.h"
#include "pipeline/resolution.h"

namespace xdit::pipeline {

void Pipeline::settle_size(int64_t& height, int64_t& width, const char* hint) const {
  const int64_t vsf = vae_scale_factor(), unit = vsf * spec().patch;
  if (height == 0) height = family_->default_height(vsf);
  if (width == 0) width = family_->default_width(vsf);
  check_size(height, width);
  const int64_t most = family_->max_side(vsf);
  XDIT_CHECK(most == 0 || (height <= most && width <= most), "height ", height, " and width ",
             width, " must be at most ", most, " px for this model (its position table covers ",
             most / unit, " patches of ", unit, " px per side)");
  if (const int64_t m = family_->size_multiple(); m > 0)
    XDIT_CHECK(height % m == 0 && width % m == 0, "height ", height, " and width ", width,
               " must be multiples of ", m, " for ", family_->name(), " (as diffusers checks)",
               hint);
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

void Pipeline::check_positions(int64_t latent_frames, int64_t height, int64_t width) const {
  const models::DiTSpec s = spec();
  const int64_t unit = vae_scale_factor() * s.patch;
  const int64_t rows = height / unit, cols = width / unit;
  XDIT_CHECK(s.max_frames == 0 || latent_frames <= s.max_frames, family_->name(),
             "'s positional table covers ", s.max_frames, " latent frames; ", latent_frames,
             " latent frames asked for: ask for fewer frames");
  XDIT_CHECK((s.max_patch_rows == 0 || rows <= s.max_patch_rows) &&
                 (s.max_patch_cols == 0 || cols <= s.max_patch_cols),
             family_->name(), "'s positional table covers ", s.max_patch_rows, " x ",
             s.max_patch_cols, " patches; ", height, "x", width, " px is ", rows, " x ", cols,
             " patches of ", unit, " px: ask for a smaller size");
}

void Pipeline::check_mesh(int64_t height, int64_t latent_frames, bool cfg, int64_t prompts) const {
  if (mesh_ == nullptr) return;
  const auto s = spec();
  const auto& pc = mesh_->config();
  // A batch split over the data-parallel groups needs a prompt for each; a
  // server's round gives each group a request of its own instead.
  if (!request_per_replica_) pc.validate_prompts(static_cast<size_t>(prompts));
  // Token rows: frames × patch rows, the unit of every row split.
  pc.validate_request(s.heads, latent_frames * (height / vae_scale_factor() / s.patch), cfg,
                      family_->guider().requirement());
  // A text encoder that cannot split over the tensor-parallel degree runs
  // whole on each rank (text_parallel, with a note as it encodes); only the
  // transformer's split is a condition of the layout.
  if (pc.parallel_vae()) pc.vae_rows(height / vae_scale_factor());  // throws when too thin
}

void Pipeline::settle_frames(int64_t asked, const Tensor& given, PlanFields& f) const {
  const LatentDecoder::Factors factors = vae_factors();
  const int64_t tf = factors.temporal;
  if (given.defined()) {  // [P, C, F, h, w]: F latent frames
    f.latent_frames = given.dim(2);
    f.num_frames = 1 + tf * (f.latent_frames - 1);
    XDIT_CHECK(asked == 0 || asked == f.num_frames, "num_frames ", asked,
               " does not match the given latents' ", f.latent_frames, " latent frames (",
               f.num_frames, " frames)");
    return;
  }
  int64_t n = asked == 0 ? family_->default_frames() : asked;
  XDIT_CHECK(n >= 1, "num_frames must be at least 1, got ", n);
  XDIT_CHECK(n == 1 || spec().video, family_->name(), " makes images: num_frames must be 1, got ",
             n);
  XDIT_CHECK(n <= kMaxFrames, "num_frames must be at most ", kMaxFrames, ", got ", n);
  if (tf > 1 && n % tf != 1) {
    const int64_t rounded = n / tf * tf + 1;
    XDIT_WARN("num_frames ", n, ": num_frames - 1 must be divisible by ", tf, "; using ", rounded,
              " as diffusers does");
    n = rounded;
  }
  f.num_frames = n;
  f.latent_frames = (n - 1) / tf + 1;
}

Plan Pipeline::plan(const LatentRequest& r, Output out) {
  PlanFields f;
  f.cond = r.cond;
  f.uncond = r.uncond;
  f.num_inference_steps =
      r.num_inference_steps == kDefaultSteps ? family_->default_steps() : r.num_inference_steps;
  f.skip_layer_guidance = r.skip_layer_guidance;
  f.cache = checked_cache(r.cache);
  f.loras = checked_request_loras(r.loras);
  f.seed = r.seed;
  f.output = out;
  f.height = r.height;
  f.width = r.width;
  settle_size(f.height, f.width, "");
  f.run_height = f.height;
  f.run_width = f.width;
  XDIT_CHECK(f.num_inference_steps >= 0, "num_inference_steps must be >= 0");
  check_steps(f.num_inference_steps);
  settle_guidance({r.guidance_scale,
                   r.guidance_scale_2,
                   r.true_cfg_scale,
                   r.cfg_truncation,
                   r.cfg_normalization,
                   {},
                   !r.uncond.empty()},
                  f);
  f.cfg = family_->guider().two_predictions(f.guidance());
  family_->check_embeddings({f.cond, f.uncond}, f.cfg, f.guidance_scale);
  const int64_t P = f.cond.batch();
  const Tensor given = with_frame_axis(r.latents);  // 4-D: one frame
  if (given.defined()) models::check_latents(spec(), family_->name(), given.shape());
  if (out == Output::kImages) open_vae();
  settle_frames(r.num_frames, given, f);
  check_limits(f.num_inference_steps, P, f.num_frames, f.height, f.width);
  check_positions(f.latent_frames, f.run_height, f.run_width);
  check_mesh(f.run_height, f.latent_frames, f.cfg, P);
  family_->guider().check_passes(f.guidance(), f.cfg, guidance_layout());
  check_latents_shape(given, P, f.run_height, f.run_width);
  family_->check_embeddings_finite({f.cond, f.uncond});
  f.latents = finite_latents(given);
  MemoryQuery q = memory_query(P, f);
  q.text_tokens = f.cond.at(models::kText).dim(1);
  for (const models::Conditioning* c : {&f.cond, &f.uncond})
    for (const auto& [name, t] : c->tensors())
      q.input_bytes += 4.0 * static_cast<double>(t.numel());
  if (given.defined()) q.input_bytes += 4.0 * static_cast<double>(given.numel());
  if (out == Output::kImages) decoder_->describe(q);
  check_request_memory(q);
  return Plan(std::move(f));
}

void Pipeline::check_latents_shape(const Tensor& latents, int64_t prompts, int64_t height,
                                   int64_t width) const {
  if (!latents.defined()) return;
  const int64_t vsf = vae_scale_factor();
  models::check_latents(spec(), family_->name(), latents.shape());
  const Shape want{prompts, spec().latent_channels, latents.dim(2), height / vsf, width / vsf};
  XDIT_CHECK(latents.shape() == want, "latents have shape ", shape_str(latents.shape()), " but ",
             height, "x", width, " px with ", prompts, " prompt(s) needs ", shape_str(want));
}

Tensor Pipeline::finite_latents(const Tensor& latents) {
  if (!latents.defined()) return latents;
  const int64_t bad = count_nonfinite(latents);
  XDIT_CHECK(bad == 0, "latents hold ", bad, " NaN/Inf value(s): give finite values");
  return latents.to(DType::kF32);
}

void Pipeline::open_vae() {
  if (decoder_) return;
  const ModelFamily::ComponentKind kind = family_->vae_kind();
  decoder_ = LatentDecoder::open(folder(), kind, family_->component(kind), spec().latent_channels);
}

CacheSettings Pipeline::checked_cache(const CacheSettings& c) const {
  c.validate();
  if (!c.on()) return c;
  XDIT_CHECK(spec().blocks >= 2, "--cache ", c.name(),
             " needs a transformer of two blocks or more, ", family_->name(), " has ",
             spec().blocks);
  return c.resolved();
}

void Pipeline::check_size(int64_t height, int64_t width) const {
  XDIT_CHECK(height > 0 && width > 0, "height and width must be positive, got ", height, "x",
             width);
  XDIT_CHECK(height <= kMaxImageSide && width <= kMaxImageSide, "height and width must be at most ",
             kMaxImageSide, " px, got ", height, "x", width);
}

void Pipeline::check_limits(int64_t steps, int64_t prompts, int64_t frames, int64_t height,
                            int64_t width) const {
  const RequestLimits& l = limits_;
  XDIT_CHECK(l.max_steps == 0 || steps <= l.max_steps, "num_inference_steps ", steps,
             " is over this server's limit of ", l.max_steps, " (--max_steps)");
  XDIT_CHECK(l.max_batch == 0 || prompts <= l.max_batch, prompts,
             " images in one request are over this server's limit of ", l.max_batch,
             " (--max_batch)");
  XDIT_CHECK(l.max_frames == 0 || frames <= l.max_frames, frames,
             " frames per image are over this server's limit of ", l.max_frames, " (--max_frames)");
  // (Sides are at most kMaxImageSide once checked; before that, bounded here
  // in double so that no product overflows.)
  const double pixels = static_cast<double>(height) * static_cast<double>(width);
  XDIT_CHECK(l.max_pixels == 0 || pixels <= static_cast<double>(l.max_pixels), width, "x", height,
             " px is over this server's limit of ", l.max_pixels, " pixels (--max_pixels)");
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

void Pipeline::settle_guidance(const GuidanceSettings& asked, PlanFields& f) const {
  const Guider& guider = family_->guider();
  const GuidanceSettings s = guider.resolved(asked);
  f.guidance_scale = s.guidance_scale;
  f.true_cfg_scale = s.true_cfg_scale;
  f.cfg_truncation = asked.cfg_truncation;
  f.cfg_normalization = asked.cfg_normalization;
  guider.check(f.guidance(), guidance_layout());
  f.guidance_scale_2 = second_guidance(asked.guidance_scale_2, f.guidance_scale);
  guider.warn_unused(asked);
}

GuidanceLayout Pipeline::guidance_layout() const {
  GuidanceLayout l;
  l.model = family_->name();
  l.blocks = spec().blocks;
  l.pipefusion = mesh_ != nullptr && mesh_->config().pipefusion_parallel_degree > 1;
  l.patch_parallel = mesh_ != nullptr && mesh_->config().patch_parallel_degree > 1;
  return l;
}

double Pipeline::second_guidance(double asked, double guidance_scale) const {
  const bool experts = family_->boundary_ratio() > 0;
  if (asked == kDefaultGuidance) return experts ? guidance_scale : -1;
  XDIT_CHECK(experts,
             "guidance_scale_2 is the second expert's guidance (Wan2.2's "
             "transformer_2); ",
             family_->name(), " has one transformer");
  XDIT_CHECK(std::isfinite(asked) && asked >= 0,
             "guidance_scale_2 must be a finite number >= 0, got ", asked);
  return asked;
}

void Pipeline::check_request_memory(const MemoryQuery& q) const {
  MemoryEstimate e = estimate_memory(spec(), family_->parameter_count(), q);
  // Wan2.2's two experts both stay loaded, unless one-shot frees the first
  // before the second loads; those already resident are not counted again.
  const int experts = family_->boundary_ratio() > 0 && !one_shot_ ? 2 : 1;
  const int resident = weights_resident_ ? experts : std::min(experts, resident_experts());
  e.transformer *= experts - resident;
  if (device_.cuda()) {
    // Everything but the scheduler runs on the GPU: the text encoders (freed
    // before the transformer loads, unless kept), then the transformer with
    // a step's activations, which stays loaded through the VAE's decode.
#ifdef XDIT_HAVE_CUDA
    const auto info = device_memory(device_.index);
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

MemoryQuery Pipeline::memory_query(int64_t prompts, const PlanFields& f) const {
  const int64_t height = f.run_height;
  MemoryQuery q;
  q.prompts = prompts;
  q.run_height = height;
  q.run_width = f.run_width;
  q.out_height = f.height;
  q.out_width = f.width;
  q.frames = f.num_frames;
  q.latent_frames = f.latent_frames;
  q.cfg = f.cfg;
  q.dtype = dtype_;
  // Quantized layers: int8 / fp8 keep a byte a weight (and a scale a row),
  // q8_0 34 bytes a 32; a single-file checkpoint's matrices keep their
  // stored bytes.
  if (weights_format_ != kernels::WeightFormat::kCompute)
    q.transformer_bytes_per_parameter =
        weights_format_ == kernels::WeightFormat::kQ8_0 ? 34.0 / 32.0 : 1.0;
  else if (dynamic_cast<const models::OriginalCheckpointWeights*>(weights_.get()) != nullptr &&
           family_->parameter_count() > 0)
    q.transformer_bytes_per_parameter = static_cast<double>(weights_->stored_bytes()) /
                                        static_cast<double>(family_->parameter_count());
  q.vae_scale_factor = vae_scale_factor();
  q.text_streamed = !keep_text_encoder_ && !device_.cuda();
  q.one_shot = one_shot_;
  if (mesh_ != nullptr) {
    const auto& pc = mesh_->config();
    q.data_parallel = pc.data_parallel_degree;
    q.sequence_parallel = pc.row_split_degree();
    q.pipeline_stages = pc.pipefusion_parallel_degree;
    q.tensor_parallel = pc.tensor_parallel_degree;
    q.text_parallel = text_parallel();
    q.cfg_parallel = pc.use_cfg_parallel;
    if (vae_in_bands(height / q.vae_scale_factor)) q.vae_bands = pc.replica();
  }
  return q;
}

Plan Pipeline::plan(const ImageRequest& r, Output out) {
  XDIT_CHECK(!r.prompts.empty(), "at least one prompt is needed");
  PlanFields f;
  f.prompts = r.prompts;
  f.negative_prompt = r.negative_prompt;
  f.num_inference_steps =
      r.num_inference_steps == kDefaultSteps ? family_->default_steps() : r.num_inference_steps;
  if (out == Output::kImages)
    XDIT_CHECK(f.num_inference_steps >= 1,
               "num_inference_steps must be at least 1 for an image, got ", f.num_inference_steps);
  else  // the latents of 0 steps are the initial noise
    XDIT_CHECK(f.num_inference_steps >= 0, "num_inference_steps must be >= 0");
  const Tensor given = with_frame_axis(r.latents);  // 4-D: one frame
  if (given.defined()) models::check_latents(spec(), family_->name(), given.shape());
  settle_frames(r.num_frames, given, f);
  const int64_t vsf = vae_scale_factor();
  f.height = r.height == 0 ? family_->default_height(vsf) : r.height;
  f.width = r.width == 0 ? family_->default_width(vsf) : r.width;
  // A service's limits first: a request over them costs nothing more.
  check_limits(f.num_inference_steps, static_cast<int64_t>(f.prompts.size()), f.num_frames,
               f.height, f.width);
  check_steps(f.num_inference_steps);
  settle_guidance({r.guidance_scale,
                   r.guidance_scale_2,
                   r.true_cfg_scale,
                   r.cfg_truncation,
                   r.cfg_normalization,
                   {},
                   r.negative_prompt.has_value()},
                  f);
  // Text side and VAE: configs and weight headers.
  if (!text_opened_) {
    family_->open_text(folder());
    text_opened_ = true;
  }
  if (out == Output::kImages) open_vae();
  f.max_sequence_length =
      r.max_sequence_length == 0 ? family_->default_max_sequence_length() : r.max_sequence_length;
  XDIT_CHECK(f.max_sequence_length >= 1, "max_sequence_length must be positive");
  XDIT_CHECK(f.max_sequence_length <= family_->max_sequence_limit(), "max_sequence_length ",
             f.max_sequence_length, " exceeds the ", family_->max_sequence_limit(),
             " tokens this pipeline's T5 accepts");
  check_size(f.height, f.width);
  if (family_->bins_resolution() && r.resolution_binning) {
    std::tie(f.run_height, f.run_width) = classify_height_width_bin(
        f.height, f.width, bin_table_for_sample_size(family_->default_height(1)));
    f.resize_back = true;
  } else {
    settle_size(f.height, f.width,
                family_->bins_resolution() ? ", or leave resolution binning on" : "");
    f.run_height = f.height;
    f.run_width = f.width;
  }
  check_limits(f.num_inference_steps, static_cast<int64_t>(f.prompts.size()), f.num_frames,
               f.run_height, f.run_width);
  f.skip_layer_guidance = r.skip_layer_guidance;
  f.cache = checked_cache(r.cache);
  f.loras = checked_request_loras(r.loras);
  f.seed = r.seed;
  f.output = out;
  // The size the model runs at against the mesh, before any encoding.
  f.cfg = family_->guider().two_predictions(f.guidance());
  const auto P = static_cast<int64_t>(f.prompts.size());
  check_positions(f.latent_frames, f.run_height, f.run_width);
  check_mesh(f.run_height, f.latent_frames, f.cfg, P);
  family_->guider().check_passes(f.guidance(), f.cfg, guidance_layout());
  check_latents_shape(given, P, f.run_height, f.run_width);
  f.latents = finite_latents(given);
  // Everything the request will hold, up to the resized PNGs, against the
  // memory this machine has left.
  MemoryQuery q = memory_query(P, f);
  q.text_tokens = f.max_sequence_length;
  family_->describe_text(q);
  if (out == Output::kImages) decoder_->describe(q);
  check_request_memory(q);
  return Plan(std::move(f));
}

}  // namespace xdit::pipeline
