#include "pipeline/pixart_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/block_cache.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/trace.h"
#include "parallel/gather.h"
#include "pipeline/resolution.h"

namespace xdit::pipeline {

namespace {
// Bytes of the weights a stage loads, as f32, from the weights its config
// lists for the stage ("412 MB of weights (as f32)").
std::string stage_weight_bytes(const models::PixArtConfig& cfg, const models::DiTStage& stage) {
  double bytes = 0;
  for (const auto& [name, shape] : cfg.weight_specs(stage))
    bytes += static_cast<double>(shape_numel(shape)) * 4.0;
  return human_size(bytes) + " of weights (as f32)";
}

// Stops the run when a model's output holds NaN/Inf (it would decode to a
// black image); `component` is the model's folder, whose weights are the
// likely cause.
void check_finite_output(const Tensor& t, const char* model, const char* component) {
  const int64_t bad = count_nonfinite(t);
  XDIT_CHECK(bad == 0, "the ", model, " produced ", bad,
             " NaN/Inf value(s); stopped without writing an image. Likely cause: non-finite "
             "weights in ",
             component, "/ (check with xdit info --model DIR --check-weights)");
}
}  // namespace

const std::vector<std::string>& PixArtPipeline::supported_pipelines() {
  static const std::vector<std::string> names{"PixArtAlphaPipeline", "PixArtSigmaPipeline"};
  return names;
}

PixArtPipeline::PixArtPipeline(const std::string& folder, DType dtype)
    : folder_(folder), dtype_(dtype) {
  const std::string cls = folder_->pipeline_class();
  const auto& ok = supported_pipelines();
  if (std::find(ok.begin(), ok.end(), cls) == ok.end()) {
    std::string list;
    for (const auto& n : ok) list += (list.empty() ? "" : ", ") + n;
    XDIT_FAIL(folder_->root(), "/model_index.json names the pipeline \"", cls,
              "\", which xdit does not run; supported pipelines: ", list);
  }
  const std::string tdir = folder_->component("transformer");
  cfg_ = models::PixArtConfig::from_json(folder_->component_config("transformer", "config.json"),
                                         tdir + "/config.json");
  const std::string sdir = folder_->component("scheduler");
  sched_cfg_ = schedulers::SchedulerConfig::from_json(
      folder_->component_config("scheduler", "scheduler_config.json"),
      sdir + "/scheduler_config.json");
  auto store = std::make_unique<io::WeightStore>(tdir);  // maps files, checks headers
  store->check_shapes(cfg_.weight_specs());              // the config against the headers
  weights_ = std::move(store);
}

PixArtPipeline::PixArtPipeline(const models::PixArtConfig& cfg,
                               const schedulers::SchedulerConfig& sched,
                               std::unique_ptr<io::WeightSource> weights, DType dtype)
    : dtype_(dtype), cfg_(cfg), sched_cfg_(sched), weights_(std::move(weights)) {}

PixArtPipeline::~PixArtPipeline() = default;

const io::ModelFolder& PixArtPipeline::folder() const {
  XDIT_CHECK(folder_.has_value(), "this pipeline was built without a model folder");
  return *folder_;
}

namespace {
void check_embeds(const Tensor& e, const Tensor& mask, const char* name, int64_t channels) {
  XDIT_CHECK(e.ndim() == 3, name, " must be [batch, tokens, ", channels, "], got ",
             shape_str(e.shape()));
  XDIT_CHECK(e.dim(2) == channels, name, " has hidden size ", e.dim(2),
             " but this model's caption_channels is ", channels,
             " (embeddings from a different text encoder?)");
  if (mask.defined())
    XDIT_CHECK(mask.ndim() == 2 && mask.dim(0) == e.dim(0) && mask.dim(1) == e.dim(1), name,
               " attention mask must be [", e.dim(0), ", ", e.dim(1), "], got ",
               shape_str(mask.shape()));
}
}  // namespace

int64_t PixArtPipeline::vae_scale_factor() const {
  if (vae_cfg_) return vae_cfg_->scale_factor();
  if (!folder_) return kVaeScaleFactor;
  const std::string cfg = folder_->root() + "/vae/config.json";
  if (std::filesystem::is_regular_file(cfg))
    return models::VaeConfig::from_json(io::read_json_file(cfg), cfg).scale_factor();
  return kVaeScaleFactor;
}

int64_t PixArtPipeline::default_max_sequence_length() const {
  return folder_ && folder_->pipeline_class() == "PixArtSigmaPipeline" ? 300 : 120;
}

void PixArtPipeline::validate(LatentRequest& r) const {
  const int64_t vsf = vae_scale_factor();
  const int64_t unit = vsf * cfg_.patch_size;
  if (r.height == 0) r.height = cfg_.sample_size * vsf;
  if (r.width == 0) r.width = cfg_.sample_size * vsf;
  check_size(r.height, r.width);
  XDIT_CHECK(r.height % unit == 0 && r.width % unit == 0, "height ", r.height, " and width ",
             r.width, " must be multiples of ", unit, " (VAE factor 8 x patch size ",
             cfg_.patch_size, ")");
  XDIT_CHECK(r.num_inference_steps >= 0, "num_inference_steps must be >= 0");
  check_steps(r.num_inference_steps);
  check_guidance(r.guidance_scale);
  XDIT_CHECK(r.prompt_embeds.defined(), "prompt_embeds are required");
  check_embeds(r.prompt_embeds, r.prompt_mask, "prompt_embeds", cfg_.caption_channels);
  const int64_t P = r.prompt_embeds.dim(0);
  if (r.guidance_scale > 1.0) {
    XDIT_CHECK(
        r.negative_embeds.defined(), "guidance_scale ", r.guidance_scale,
        " > 1 needs negative_prompt_embeds in the embeddings file (or pass --guidance_scale 1)");
    check_embeds(r.negative_embeds, r.negative_mask, "negative_prompt_embeds",
                 cfg_.caption_channels);
    XDIT_CHECK(r.negative_embeds.dim(0) == P && r.negative_embeds.dim(1) == r.prompt_embeds.dim(1),
               "negative_prompt_embeds ", shape_str(r.negative_embeds.shape()),
               " must match prompt_embeds ", shape_str(r.prompt_embeds.shape()));
  }
  if (mesh_ != nullptr)
    mesh_->config().validate_request(cfg_.num_attention_heads, r.height / vsf / cfg_.patch_size,
                                     r.guidance_scale);
  if (r.latents.defined()) {
    const Shape want{P, cfg_.in_channels, r.height / vsf, r.width / vsf};
    XDIT_CHECK(r.latents.shape() == want, "latents have shape ", shape_str(r.latents.shape()),
               " but ", r.height, "x", r.width, " px with ", P, " prompt(s) needs ",
               shape_str(want));
  }
  for (const auto& [t, name] : {std::pair{&r.prompt_embeds, "prompt_embeds"},
                                {&r.negative_embeds, "negative_prompt_embeds"},
                                {&r.latents, "latents"}}) {
    const int64_t bad = count_nonfinite(*t);
    XDIT_CHECK(bad == 0, name, " hold ", bad, " NaN/Inf value(s): give finite values");
  }
  MemoryQuery q = memory_query(P, r.height, r.width, r.guidance_scale > 1.0);
  q.text_tokens = r.prompt_embeds.dim(1);
  check_request_memory(q);
}

void PixArtPipeline::check_size(int64_t height, int64_t width) const {
  XDIT_CHECK(height > 0 && width > 0, "height and width must be positive, got ", height, "x",
             width);
  XDIT_CHECK(height <= kMaxImageSide && width <= kMaxImageSide, "height and width must be at most ",
             kMaxImageSide, " px, got ", height, "x", width);
}

void PixArtPipeline::check_steps(int64_t steps) const {
  if (sched_cfg_.dpm_solver() != nullptr)  // it picks steps among the training timesteps
    XDIT_CHECK(steps <= sched_cfg_.num_train_timesteps(), "num_inference_steps ", steps,
               " exceeds the scheduler's ", sched_cfg_.num_train_timesteps(),
               " training timesteps (num_train_timesteps in scheduler_config.json)");
  // The schedule itself (its checks on the timesteps it makes) costs microseconds.
  if (steps >= 1) sched_cfg_.make()->set_timesteps(steps, {});
}

void PixArtPipeline::check_guidance(double g) const {
  XDIT_CHECK(std::isfinite(g) && g >= 0, "guidance_scale must be a finite number >= 0, got ", g);
}

void PixArtPipeline::check_request_memory(const MemoryQuery& q) const {
  MemoryEstimate e = estimate_memory(cfg_, q);
  if (transformer_) e.transformer = 0;  // already resident
  check_memory(e, comm::local_process_count());
}

MemoryQuery PixArtPipeline::memory_query(int64_t prompts, int64_t height, int64_t width,
                                         bool cfg) const {
  MemoryQuery q;
  q.prompts = prompts;
  q.run_height = q.out_height = height;
  q.run_width = q.out_width = width;
  q.cfg = cfg;
  q.dtype = dtype_;
  q.vae_scale_factor = vae_scale_factor();
  if (mesh_ != nullptr) {
    const auto& pc = mesh_->config();
    q.data_parallel = pc.data_parallel_degree;
    q.sequence_parallel = pc.sp();
    q.pipeline_stages = pc.pipefusion_parallel_degree;
    q.cfg_parallel = pc.use_cfg_parallel;
  }
  return q;
}

void PixArtPipeline::load() {
  if (transformer_) return;
  models::DiTStage stage;
  if (mesh_ != nullptr && mesh_->config().pipefusion_parallel_degree > 1) {
    // PipeFusion: this rank keeps only its stage's blocks.
    const auto& pc = mesh_->config();
    pc.validate_pipefusion(cfg_.num_layers);
    const int s = mesh_->coord().pp;
    const auto blocks = pc.stage_blocks(cfg_.num_layers)[static_cast<size_t>(s)];
    stage = {blocks.first, blocks.second, s == 0, s == pc.pipefusion_parallel_degree - 1};
  }
  transformer_ = std::make_unique<models::PixArtTransformer>(cfg_, *weights_, dtype_, stage);
  if (mesh_ != nullptr && mesh_->config().pipefusion_parallel_degree > 1) {
    pipefusion_ = std::make_unique<parallel::PipeFusionAttention>(mesh_->ulysses_group(),
                                                                  mesh_->ring_group());
    pipefusion_->set_refresh(pipefusion_refresh_);
    transformer_->set_attention_backend(pipefusion_.get());
    // Every stage's blocks and weight bytes, logged by rank 0.
    const std::string line =
        detail::concat("PipeFusion stage ", mesh_->coord().pp, ": blocks [", stage.block_begin,
                       ", ", stage.block_end, ")", stage.first ? " + embeddings" : "",
                       stage.last ? " + output layer" : "", ", ", stage_weight_bytes(cfg_, stage));
    constexpr size_t kLine = 256;
    std::vector<char> mine(kLine, '\0'), all(kLine * static_cast<size_t>(mesh_->pp_group().size()));
    std::memcpy(mine.data(), line.data(), std::min(line.size(), kLine - 1));
    mesh_->pp_group().allgather(mine.data(), all.data(), kLine, comm::Type::kByte);
    for (int i = 0; i < mesh_->pp_group().size(); ++i)
      XDIT_INFO(std::string(all.data() + i * kLine));
  } else if (mesh_ != nullptr && mesh_->config().sp() > 1) {
    usp_ = std::make_unique<parallel::UspAttention>(mesh_->ulysses_group(), mesh_->ring_group());
    transformer_->set_attention_backend(usp_.get());
  }
}

namespace {
// Stacks [a; b] along the batch dimension (f32).
Tensor cat_batch(const Tensor& a, const Tensor& b) {
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
}  // namespace

void check_finite_latents(const Tensor& latents, int64_t step, int64_t total) {
  const int64_t bad = count_nonfinite(latents);
  XDIT_CHECK(bad == 0, "the latents hold ", bad, " NaN/Inf value(s) after denoising step ", step,
             " of ", total,
             "; stopped without writing an image. Likely causes: non-finite weights (check with "
             "xdit info --model DIR --check-weights), non-finite prompt embeddings, or a "
             "guidance_scale so large that the noise prediction overflows");
}

Tensor guided_noise(const Tensor& out, int64_t P, int64_t C, bool cfg, double guidance_scale) {
  // CFG: uncond + g·(cond − uncond) with out = [uncond P; cond P]; learned
  // sigma: keep the first C of the out_channels.
  const int64_t oc = out.dim(1), hw = out.dim(2) * out.dim(3), plane = C * hw;
  const float g = static_cast<float>(guidance_scale);
  Tensor noise = Tensor::empty({P, C, out.dim(2), out.dim(3)});
  const float* ob = out.data<float>();
  for (int64_t b = 0; b < P; ++b)
    for (int64_t j = 0; j < plane; ++j) {
      const float cond = ob[(cfg ? P + b : b) * oc * hw + j];
      noise.data<float>()[b * plane + j] =
          cfg ? ob[b * oc * hw + j] + g * (cond - ob[b * oc * hw + j]) : cond;
    }
  return noise;
}

Tensor PixArtPipeline::generate_latents(const LatentRequest& req,
                                        const std::function<void(const StepEvent&)>& on_step) {
  LatentRequest r = req;
  validate(r);
  load();
  const int64_t P = r.prompt_embeds.dim(0);
  const int64_t vsf = vae_scale_factor();
  const int64_t h = r.height / vsf, w = r.width / vsf, C = cfg_.in_channels;
  Tensor latents =
      r.latents.defined() ? r.latents.to(DType::kF32) : TorchGenerator(r.seed).randn({P, C, h, w});
  const auto sched_ptr = sched_cfg_.make();
  schedulers::Scheduler& sched = *sched_ptr;
  if (r.num_inference_steps == 0) return latents;
  sched.set_timesteps(r.num_inference_steps, {});
  // latents * init_noise_sigma (1 for DPM-Solver).

  const bool cfg = r.guidance_scale > 1.0;
  // Under CFG parallel each CFG group runs one half: group 0 the negative
  // prompt, group 1 the prompt; the predictions are all-gathered after.
  const bool cfg_split = cfg && mesh_ != nullptr && mesh_->config().use_cfg_parallel;
  const int cfg_rank = cfg_split ? mesh_->coord().cfg : 0;
  const Tensor pmask = r.prompt_mask.defined() ? r.prompt_mask : ones_mask(r.prompt_embeds);
  const Tensor nmask = !cfg                        ? Tensor()
                       : r.negative_mask.defined() ? r.negative_mask
                                                   : ones_mask(r.negative_embeds);
  Tensor text, mask;
  if (cfg_split) {
    text = (cfg_rank == 0 ? r.negative_embeds : r.prompt_embeds).to(DType::kF32);
    mask = (cfg_rank == 0 ? nmask : pmask).to(DType::kF32);
  } else if (cfg) {
    text = cat_batch(r.negative_embeds, r.prompt_embeds);
    mask = cat_batch(nmask, pmask);
  } else {
    text = r.prompt_embeds.to(DType::kF32);
    mask = pmask.to(DType::kF32);
  }
  const int64_t MB = (cfg && !cfg_split) ? 2 * P : P;
  Tensor resolution = Tensor::empty({MB, 2}), aspect = Tensor::empty({MB, 1});
  for (int64_t b = 0; b < MB; ++b) {
    resolution.data<float>()[2 * b] = static_cast<float>(r.height);
    resolution.data<float>()[2 * b + 1] = static_cast<float>(r.width);
    aspect.data<float>()[b] =
        static_cast<float>(static_cast<double>(r.height) / static_cast<double>(r.width));
  }
  // Sequence parallelism: this rank computes its share of the patch rows.
  const int sp = mesh_ != nullptr ? mesh_->config().sp() : 1;
  const int64_t rows_per_rank = h / cfg_.patch_size / sp;
  const int64_t row0 = mesh_ != nullptr ? mesh_->coord().sp * rows_per_rank : 0;

  if (mesh_ != nullptr && mesh_->config().pipefusion_parallel_degree > 1)
    return pipefusion_loop(latents, sched, text, mask, resolution, aspect, MB, cfg, cfg_split,
                           r.guidance_scale, on_step);
  Tensor model_in = Tensor::empty({MB, C, h, w});
  Tensor noise;
  const int64_t plane = C * h * w;
  const auto& ts = sched.timesteps();
  for (size_t i = 0; i < ts.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t k = 0; k < MB; ++k)
      std::memcpy(model_in.data<float>() + k * plane, latents.data<float>() + (k % P) * plane,
                  plane * 4);
    models::DiTInputs in;
    in.latents = &model_in;
    in.timesteps.assign(static_cast<size_t>(MB), static_cast<float>(ts[i]));
    in.text = &text;
    in.text_mask = &mask;
    in.resolution = &resolution;
    in.aspect_ratio = &aspect;
    if (sp > 1) {
      in.patch_row_begin = row0;
      in.patch_row_end = row0 + rows_per_rank;
    }
    Tensor out;
    {
      trace::Span span("step " + std::to_string(i), "compute");
      out = transformer_->forward(in);  // [MB, out_channels, h (or this rank's rows), w]
    }
    if (sp > 1) out = parallel::gather_rows(mesh_->sp_group(), out);
    if (cfg_split) out = parallel::gather_batch(mesh_->cfg_group(), out);  // [uncond P; cond P]
    noise = guided_noise(out, P, C, cfg, r.guidance_scale);
    sched.step(noise, latents);
    check_finite_latents(latents, static_cast<int64_t>(i) + 1, static_cast<int64_t>(ts.size()));
    if (on_step) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      on_step({static_cast<int64_t>(i) + 1, static_cast<int64_t>(ts.size()), s});
    }
  }
  return latents;
}

void PixArtPipeline::validate(ImageRequest& r) {
  XDIT_CHECK(!r.prompts.empty(), "at least one prompt is needed");
  XDIT_CHECK(r.num_inference_steps >= 1,
             "num_inference_steps must be at least 1 for an image, got ", r.num_inference_steps);
  check_steps(r.num_inference_steps);
  check_guidance(r.guidance_scale);
  // Text side: tokenizer/spiece.model, text_encoder/config.json and weights.
  if (!tokenizer_)
    tokenizer_ = std::make_unique<tokenizers::T5Tokenizer>(folder().component("tokenizer"));
  if (!t5_cfg_) {
    const std::string dir = folder().component("text_encoder");
    t5_cfg_ = std::make_unique<models::T5Config>(models::T5Config::from_json(
        folder().component_config("text_encoder", "config.json"), dir + "/config.json"));
    XDIT_CHECK(t5_cfg_->d_model == cfg_.caption_channels, "text encoder width ", t5_cfg_->d_model,
               " does not match the transformer's caption_channels ", cfg_.caption_channels);
    t5_weights_ = std::make_unique<io::WeightStore>(dir);
    t5_weights_->check_shapes(t5_cfg_->weight_specs(
        t5_weights_->has("shared.weight") ? "shared.weight" : "encoder.embed_tokens.weight"));
  }
  if (!vae_cfg_) {
    const std::string dir = folder().component("vae");
    vae_cfg_ = std::make_unique<models::VaeConfig>(models::VaeConfig::from_json(
        folder().component_config("vae", "config.json"), dir + "/config.json"));
    XDIT_CHECK(vae_cfg_->latent_channels == cfg_.in_channels, "VAE latent_channels ",
               vae_cfg_->latent_channels, " does not match the transformer's in_channels ",
               cfg_.in_channels);
    vae_weights_ = std::make_unique<io::WeightStore>(dir);
    vae_weights_->check_shapes(vae_cfg_->decoder_weight_specs());
  }
  if (r.max_sequence_length == 0) r.max_sequence_length = default_max_sequence_length();
  XDIT_CHECK(r.max_sequence_length >= 1, "max_sequence_length must be positive");
  XDIT_CHECK(r.max_sequence_length <= tokenizer_->model_max_length(), "max_sequence_length ",
             r.max_sequence_length, " exceeds the ", tokenizer_->model_max_length(),
             " tokens this text encoder accepts (model_max_length of its tokenizer)");
  const int64_t vsf = vae_scale_factor();
  if (r.height == 0) r.height = cfg_.sample_size * vsf;
  if (r.width == 0) r.width = cfg_.sample_size * vsf;
  check_size(r.height, r.width);
  r.run_height = r.height;
  r.run_width = r.width;
  if (r.resolution_binning) {
    std::tie(r.run_height, r.run_width) =
        classify_height_width_bin(r.height, r.width, bin_table_for_sample_size(cfg_.sample_size));
  } else {
    const int64_t unit = vsf * cfg_.patch_size;
    XDIT_CHECK(r.height % unit == 0 && r.width % unit == 0, "height ", r.height, " and width ",
               r.width, " must be multiples of ", unit, " (VAE factor ", vsf, " x patch size ",
               cfg_.patch_size, "), or leave resolution binning on");
  }
  // The size the model runs at against the mesh, before any encoding.
  if (mesh_ != nullptr)
    mesh_->config().validate_request(cfg_.num_attention_heads, r.run_height / vsf / cfg_.patch_size,
                                     r.guidance_scale);
  // Everything the request will hold, up to the resized PNGs, against the
  // memory this machine has left.
  MemoryQuery q = memory_query(static_cast<int64_t>(r.prompts.size()), r.run_height, r.run_width,
                               r.guidance_scale > 1.0);
  q.out_height = r.height;
  q.out_width = r.width;
  q.text_tokens = r.max_sequence_length;
  q.t5 = t5_cfg_.get();
  q.vae = vae_cfg_.get();
  check_request_memory(q);
}

PromptEmbeddings PixArtPipeline::encode_prompts(const ImageRequest& r) {
  XDIT_CHECK(tokenizer_ && t5_cfg_, "encode_prompts before validate");
  if (!t5_) t5_ = std::make_unique<models::T5Encoder>(*t5_cfg_, *t5_weights_, dtype_);
  const int64_t L = r.max_sequence_length;
  auto encode = [&](const std::vector<std::string>& texts, bool warn) {
    const int64_t n = static_cast<int64_t>(texts.size());
    std::vector<int32_t> ids;
    std::vector<uint8_t> mask;
    for (const auto& text : texts) {
      tokenizers::Tokens t = tokenizer_->encode(tokenizers::lower_strip(text), L);
      if (warn && t.truncated()) {
        // As diffusers: say what was cut.
        tokenizers::Tokens all = tokenizer_->encode(tokenizers::lower_strip(text), t.untruncated);
        std::vector<int32_t> cut(all.ids.begin() + (L - 1), all.ids.end() - 1);
        XDIT_WARN("the prompt is longer than ", L, " tokens; this part was truncated: \"",
                  tokenizer_->decode(cut), "\"");
      }
      ids.insert(ids.end(), t.ids.begin(), t.ids.end());
      mask.insert(mask.end(), t.mask.begin(), t.mask.end());
    }
    Tensor m = Tensor::empty({n, L});
    for (size_t i = 0; i < mask.size(); ++i) m.data<float>()[i] = mask[i];
    Tensor embeds = t5_->encode(ids, mask, n, L);
    check_finite_output(embeds, "text encoder", "text_encoder");
    return std::make_pair(embeds, m);
  };
  PromptEmbeddings e;
  std::tie(e.embeds, e.mask) = encode(r.prompts, true);
  if (r.guidance_scale > 1.0)
    std::tie(e.negative_embeds, e.negative_mask) =
        encode(std::vector<std::string>(r.prompts.size(), r.negative_prompt), false);
  return e;
}

Tensor PixArtPipeline::decode_latents(const Tensor& latents) {
  XDIT_CHECK(vae_cfg_, "decode_latents before validate");
  if (!vae_) vae_ = std::make_unique<models::VaeDecoder>(*vae_cfg_, *vae_weights_, dtype_);
  Tensor image = vae_->decode_latents(latents);
  check_finite_output(image, "VAE decoder", "vae");
  return image;
}

ImageResult PixArtPipeline::generate(ImageRequest r,
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
    t5_.reset();
    release_cached_blocks();  // its buffers go back to the system before the transformer's
  }
  const auto t1 = Clock::now();
  LatentRequest lr;
  lr.prompt_embeds = e.embeds;
  lr.prompt_mask = e.mask;
  lr.negative_embeds = e.negative_embeds;
  lr.negative_mask = e.negative_mask;
  lr.height = r.run_height;
  lr.width = r.run_width;
  lr.num_inference_steps = r.num_inference_steps;
  lr.guidance_scale = r.guidance_scale;
  lr.seed = r.seed;
  lr.latents = r.latents;
  Tensor latents = generate_latents(lr, on_step);
  const auto t2 = Clock::now();
  Tensor image = decode_latents(latents);
  if (r.resolution_binning) image = resize_and_crop(image, r.height, r.width);
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
