// The pipeline's checks and defaults, before any weight loads: a request's
// size, steps, guidance, embeddings, mesh and skip-layer guidance against
// the model, and what it needs against the memory this machine has left.
#include <cmath>
#include <filesystem>

#include "comm/device_comm.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "pipeline/pipeline.h"
#include "pipeline/resolution.h"

namespace xdit::pipeline {

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
  warn_unused_once(r.guidance_scale, r.true_cfg_scale, !r.uncond.empty());
  if (r.num_inference_steps == kDefaultSteps) r.num_inference_steps = family_->default_steps();
  if (r.guidance_scale == kDefaultGuidance) r.guidance_scale = family_->default_guidance();
  settle_size(r.height, r.width, "");
  XDIT_CHECK(r.num_inference_steps >= 0, "num_inference_steps must be >= 0");
  check_steps(r.num_inference_steps);
  check_guidance(r.guidance_scale, r.true_cfg_scale);
  const bool cfg = uses_cfg(r);
  family_->check_embeddings({r.cond, r.uncond}, cfg, r.guidance_scale);
  const int64_t P = r.cond.batch();
  check_mesh(r.height, cfg);
  check_skip_layer_guidance(r.skip_layer_guidance, cfg);
  const int64_t vsf = vae_scale_factor();
  if (r.latents.defined()) {
    r.latents = with_frame_axis(r.latents);  // 4-D: one frame
    models::check_latents(spec(), family_->name(), r.latents.shape());
    const Shape want{P, spec().latent_channels, r.latents.dim(2), r.height / vsf, r.width / vsf};
    XDIT_CHECK(r.latents.shape() == want, "latents have shape ", shape_str(r.latents.shape()),
               " but ", r.height, "x", r.width, " px with ", P, " prompt(s) needs ",
               shape_str(want));
  }
  family_->check_embeddings_finite({r.cond, r.uncond});
  const int64_t bad = count_nonfinite(r.latents);
  XDIT_CHECK(bad == 0, "latents hold ", bad, " NaN/Inf value(s): give finite values");
  MemoryQuery q = memory_query(P, r.height, r.width, cfg);
  q.text_tokens = r.cond.at(models::kText).dim(1);
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

}  // namespace xdit::pipeline
