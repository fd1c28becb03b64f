// xdit generate: a diffusers folder of any family xdit runs (PixArt-α/Σ,
// FLUX.1, SD3/3.5, Wan2.1/2.2, Z-Image, Qwen-Image) + prompts → PNG images,
// MP4 videos or latents; or prompt embeddings → latents / images.
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "app/cache_options.h"
#include "app/commands.h"
#include "app/frame_writer.h"
#include "app/lora_options.h"
#include "app/parallel_options.h"
#include "app/png_metadata.h"
#include "app/rank_agreement.h"
#include "app/startup.h"
#include "app/weight_options.h"
#include "comm/communicator.h"
#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "core/memory.h"
#include "core/rng.h"
#include "core/trace.h"
#include "io/file.h"
#include "io/model_ref.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "models/vae.h"
#include "parallel/config.h"
#include "pipeline/distributed.h"
#include "pipeline/pipeline.h"

namespace xdit::app {

namespace fs = std::filesystem;

std::string default_model_dir() {
  // The tiny model that ships with the project: next to the binary when
  // installed, else in the source tree it was built from.
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  for (const fs::path& p : {exe.parent_path() / "../share/xdit/models" / kDefaultModel,
                            exe.parent_path() / "../models" / kDefaultModel,
                            fs::path(XDIT_SOURCE_MODELS) / kDefaultModel})
    if (fs::is_directory(p)) return fs::weakly_canonical(p).string();
  XDIT_FAIL("no --model given and the built-in demo model ", kDefaultModel,
            " was not found (looked next to the binary and in ", XDIT_SOURCE_MODELS, ")");
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 10 ? "%.2f s" : "%.1f s", s);
  return buf;
}

int max_threads() {
  return 4 * std::max(1, omp_get_num_procs());
}

CLI::Validator thread_count() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        int n = 0;
        const int hi = max_threads();
        if (!CLI::detail::lexical_cast(v, n) || n < 1 || n > hi)
          return "must be 1 … " + std::to_string(hi) + " (4 x the " + std::to_string(hi / 4) +
                 " cores this process may use), got " + v;
        return {};
      },
      "1 … 4 x cores");
}

CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        double x = 0;
        if (!CLI::detail::lexical_cast(v, x) || !std::isfinite(x))
          return "must be a finite number, got " + v;
        return {};
      },
      "finite");
}

CLI::Validator at_least(int64_t lo, const std::string& note) {
  return CLI::Validator(
      [lo, note](std::string& v) -> std::string {
        int64_t n = 0;
        if (!CLI::detail::lexical_cast(v, n) || n < lo)
          return "must be an integer of at least " + std::to_string(lo) +
                 (note.empty() ? "" : " " + note) + ", got " + v;
        return {};
      },
      ">= " + std::to_string(lo));
}

namespace {

struct GenerateOptions {
  ParallelOptions par;
  std::string trace;
  std::string model, prompt_embeds, latents, output, output_type = "pil", dtype = "bf16";
  WeightOptions weights;  // --transformer, --weights_dtype
  std::optional<std::string> negative_prompt;
  std::vector<std::string> prompts;
  // Steps and guidance: the model's defaults until given (resolved by validate).
  int64_t height = 0, width = 0, steps = pipeline::kDefaultSteps, max_sequence_length = 0;
  int64_t num_frames = 0;  // the model's default
  int fps = 0;             // the model's default
  double guidance = pipeline::kDefaultGuidance, true_cfg = pipeline::kDefaultGuidance;
  double cfg_truncation = 1.0, cfg_normalization = 0.0;  // Z-Image
  double guidance_2 = pipeline::kDefaultGuidance;
  pipeline::SkipLayerGuidance slg;  // SD3
  CacheOptions cache;
  LoraOptions lora;
  std::string device = "cpu";
  std::string seed_text = "42";
  uint64_t seed = 42;
  int threads = 0;
  bool no_binning = false;
};

// One line per step; on a terminal, a bar redrawn in place.
class Progress {
 public:
  void operator()(const pipeline::StepEvent& e) {
    if (!log_enabled(LogLevel::kInfo)) return;
    total_s_ += e.seconds;
    const double per = total_s_ / static_cast<double>(e.step);
    const double eta = per * static_cast<double>(e.total - e.step);
    const int width = 24, done = static_cast<int>(width * e.step / e.total);
    std::string bar(static_cast<size_t>(done), '#');
    bar.resize(width, '.');
    if (tty_) {
      std::fprintf(stderr, "\r[%s] %lld/%lld  %.2f s/step  ETA %.0f s   ", bar.c_str(),
                   static_cast<long long>(e.step), static_cast<long long>(e.total), per, eta);
      if (e.step == e.total) std::fprintf(stderr, "\n");
    } else {
      std::fprintf(stderr, "xdit: step %lld/%lld  %.2f s/step  ETA %.0f s\n",
                   static_cast<long long>(e.step), static_cast<long long>(e.total), per, eta);
    }
  }

 private:
  bool tty_ = ::isatty(2) != 0;
  double total_s_ = 0;
};

// The PNG text of one image: the values the run used (the plan's, defaults
// resolved) and how it ran (`o`).
std::map<std::string, std::string> png_text(const pipeline::PlanFields& p, const GenerateOptions& o,
                                            const std::string& prompt, const io::ModelRef& model,
                                            const pipeline::Pipeline& pipe,
                                            const parallel::ParallelConfig& layout,
                                            const std::string& cache) {
  ImageMetadata m;
  m.prompt = prompt;
  m.negative_prompt = o.negative_prompt.value_or("");
  m.seed = p.seed;
  m.steps = p.num_inference_steps;
  m.width = p.width;
  m.height = p.height;
  m.max_sequence_length = p.max_sequence_length;
  m.guidance = p.guidance_scale;
  m.guidance_2 = p.guidance_scale_2;
  m.cfg_truncation = p.cfg_truncation;
  m.cfg_normalization = p.cfg_normalization;
  m.true_cfg = p.true_cfg_scale;
  m.slg = p.skip_layer_guidance;
  m.model = model.from_cache() ? model.id : model.folder;
  m.model_revision = model.commit;  // empty (left out) for a folder
  m.model_folder = model.from_cache() ? model.folder : "";
  m.pipeline = pipe.family().name() + " (" + pipe.folder().pipeline_class() + ")";
  m.dtype = o.dtype;
  m.parallel = parallel_label(layout, p.num_inference_steps, pipe.token_rows(p));
  m.cache = cache;
  m.lora = p.loras.empty() ? pipe.lora_label() : pipeline::lora_list_label(p.loras);
  return png_metadata(m);
}

// Every rank's trace events into one Chrome-trace file, written by rank 0
// into the output it reserved at the start (`out`, null on other ranks).
void write_trace(comm::Communicator& w, io::OutputFile* out, const std::string& parallel) {
  std::string all;
  for (int r = 0; r < w.size(); ++r) {
    std::string mine = r == w.rank() ? trace::events_json() : std::string();
    uint64_t n = mine.size();
    w.broadcast(&n, sizeof n, comm::Type::kByte, r);
    mine.resize(n);
    w.broadcast(mine.data(), n, comm::Type::kByte, r);
    if (!mine.empty()) all += (all.empty() ? "" : ",\n") + mine;
  }
  if (out != nullptr)
    out->commit([&](std::ostream& f) {
      f << "{\"otherData\": " << nlohmann::json{{"parallel", parallel}}.dump()
        << ",\n\"traceEvents\": [\n"
        << all << "\n]}\n";
    });
}

// An input safetensors file (--latents, --prompt_embeds): a regular file of
// at most kMaxInputBytes (from fstat, before anything is read), its header
// checked; tensors are read only when taken, as zero-copy views that the
// planner checks (shape first) before any conversion.
constexpr size_t kMaxInputBytes = size_t{2} << 30;

io::SafeTensorsFile open_input(const std::string& path, const char* flag) {
  io::check_side_file(path, kMaxInputBytes, std::string(flag) + " file");
  return io::SafeTensorsFile(path);
}

Tensor take_input(const io::SafeTensorsFile& f, const std::string& name, bool required,
                  const char* flag) {
  XDIT_CHECK(f.contains(name) || !required, f.path(), " (", flag, ") has no tensor '", name, "'");
  return f.contains(name) ? f.get(name) : Tensor();
}

int run_generate(GenerateOptions o, const CLI::App& command) {
  // An empty -o would silently be the default name.
  XDIT_CHECK(command.get_option("--output")->count() == 0 || !o.output.empty(),
             "-o/--output is empty: give a file name (or leave the flag out for the default)");
  const JobStart job = start_job(command, o.threads, o.device, o.par);
  o.seed = parse_torch_seed(o.seed_text);
  comm::Communicator& w = *job.world;
  const Device& device = job.device;
  parallel::Mesh& mesh = *job.mesh;
  if (o.par.config.use_parallel_vae.value_or(false) && !o.par.config.parallel_vae() &&
      w.rank() == 0)
    XDIT_WARN(
        "--use_parallel_vae has no effect here: each data-parallel replica has one rank, "
        "which decodes the whole image");
  const bool writer = w.rank() == 0;  // one rank writes files
  // Outputs are reserved before any work (checked, temporary file created)
  // and renamed into place at the end; an error anywhere removes them.
  std::optional<io::OutputFile> trace_out;
  if (!o.trace.empty()) {
    if (writer) trace_out.emplace(o.trace);
    trace::enable(w.rank());
  }
  struct TraceAtEnd {  // written when generation returns normally
    comm::Communicator& w;
    bool on;
    io::OutputFile* out;
    std::string parallel;  // the layout's label, once the steps are known
    ~TraceAtEnd() {
      if (on && std::uncaught_exceptions() == 0) write_trace(w, out, parallel);
    }
  } trace_at_end{w, !o.trace.empty(), trace_out ? &*trace_out : nullptr, ""};
  XDIT_CHECK(o.output_type == "pil" || o.output_type == "png" || o.output_type == "latent",
             "--output_type must be pil (PNG files) or latent (a safetensors file), got '",
             o.output_type, "'");
  const bool latent_out = o.output_type == "latent";
  if (o.output.empty()) o.output = latent_out ? "latents.safetensors" : "xdit.png";
  check_output_extension(o.output, latent_out);
  if (is_mp4_path(o.output)) o.output = mp4_or_png_frames(o.output);
  const bool mp4 = is_mp4_path(o.output);
  const DType dtype = parse_compute_dtype(o.dtype);
  XDIT_CHECK(o.prompt_embeds.empty() || o.prompts.empty(),
             "pass either --prompt or --prompt_embeds, not both");
  if (o.model.empty()) {
    o.model = default_model_dir();
    if (o.prompts.empty() && o.prompt_embeds.empty()) o.prompts = {kDefaultPrompt};
    XDIT_WARN("no --model given: using the built-in demo model ", kDefaultModel,
              " (coloured shapes from captions such as \"", kDefaultPrompt,
              "\"; tools/demo_model/README.md); pass --model with a diffusers folder of "
              "PixArt-α/Σ, FLUX.1, SD3/3.5, Wan2.1/2.2, Z-Image or Qwen-Image for other "
              "pictures");
  }
  XDIT_CHECK(!o.prompt_embeds.empty() || !o.prompts.empty(),
             "nothing to generate: pass --prompt \"...\"");
  std::vector<io::OutputFile> outputs;
  auto reserve = [&](size_t n) {
    if (writer)
      for (const auto& p : io::output_paths(o.output, n)) outputs.emplace_back(p);
  };
  if (latent_out)
    reserve(1);
  else if (!o.prompts.empty())
    reserve(o.prompts.size());

  const io::ModelRef model = io::resolve_model(o.model);  // a folder, or an id in the HF cache
  if (model.from_cache()) XDIT_INFO("model ", model.describe());
  check_files_agree(w, model.folder,
                    {{"--latents file", o.latents}, {"--prompt_embeds file", o.prompt_embeds}});
  pipeline::Pipeline pipe(model.folder, dtype);  // the family from model_index.json
  const int fps = o.fps > 0 ? o.fps : pipe.family().default_fps();
  pipe.set_mesh(&mesh);
  pipe.set_device(device);  // the transformer on a GPU; refuses what has no CUDA path yet
  pipe.set_one_shot(true);  // one run: the transformer goes before the VAE decodes
  o.weights.apply(pipe, device);
  // The LoRAs checked against the model's weight headers before any loads.
  // Or kept beside them (--lora_mode side), as the request's, checked by plan().
  std::vector<pipeline::LoraRef> side_loras;
  if (!o.lora.specs.empty() && !o.lora.side())
    pipe.set_loras(o.lora.uses(), o.lora.ignore_unmatched);
  if (o.lora.side()) {
    pipe.set_max_lora_bytes(o.lora.max_bytes);
    side_loras = o.lora.refs();
    // Text-encoder side paths need the encoders built whole (resident).
    for (const pipeline::LoraRef& l : side_loras)
      if (nn::LoraFile(l.path).components() != std::vector<std::string>{"transformer"})
        pipe.set_keep_text_encoder(true);
  }
  using Clock = std::chrono::steady_clock;
  auto secs = [](Clock::time_point a) {
    return std::chrono::duration<double>(Clock::now() - a).count();
  };
  Progress bar;
  auto progress = [&](const pipeline::StepEvent& e) {
    maybe_inject_fault(e);
    bar(e);
  };

  // The request, checked once (pipeline/plan.h) before any weight loads.
  pipeline::ImageRequest r;
  r.prompts = o.prompts;
  r.negative_prompt = o.negative_prompt;
  r.height = o.height;
  r.width = o.width;
  r.num_frames = o.num_frames;
  r.num_inference_steps = o.steps;
  r.guidance_scale = o.guidance;
  r.guidance_scale_2 = o.guidance_2;
  r.true_cfg_scale = o.true_cfg;
  r.cfg_truncation = o.cfg_truncation;
  r.cfg_normalization = o.cfg_normalization;
  r.skip_layer_guidance = o.slg;
  r.cache = o.cache.settings();
  r.seed = o.seed;
  r.max_sequence_length = o.max_sequence_length;
  r.loras = side_loras;
  if (!o.latents.empty())  // [P, C, F, h, w], or [P, C, h, w]: one frame
    r.latents = take_input(open_input(o.latents, "--latents"), "latents", true, "--latents");
  const pipeline::Output output =
      latent_out ? pipeline::Output::kLatents : pipeline::Output::kImages;
  if (!o.prompts.empty() && o.latents.empty() && !latent_out) {
    r.resolution_binning = !o.no_binning;
    const pipeline::Plan plan = pipe.plan(r, output);
    XDIT_INFO(pipe.family().name(), ": ", plan->num_inference_steps, " steps, guidance_scale ",
              plan->guidance_scale,
              plan->guidance_scale_2 >= 0
                  ? ", guidance_scale_2 " + detail::concat(plan->guidance_scale_2)
                  : std::string(),
              ", max_sequence_length ", plan->max_sequence_length, " (T5 tokens)");
    if (mp4) check_mp4_size(o.output, plan->width, plan->height);
    trace_at_end.parallel = parallel_label(o.par.config, plan->num_inference_steps);
    if (!o.par.config.serial()) XDIT_INFO("parallel: ", trace_at_end.parallel);
    if (plan->resize_back)
      XDIT_INFO("resolution binning: generating at ", plan->run_width, "x", plan->run_height,
                ", resized to ", plan->width, "x", plan->height,
                " (--no_resolution_binning to turn off)");
    pipeline::ImageResult res = pipeline::generate_distributed(pipe, mesh, plan, progress);
    // The layout as it ran (the weights --patch_weights auto / dynamic chose).
    trace_at_end.parallel =
        parallel_label(mesh.config(), plan->num_inference_steps, pipe.token_rows(*plan));
    const auto paths =
        io::output_paths(o.output, res.rgb.size() / res.frames, mp4 ? 1 : res.frames);
    if (writer)
      write_frames(outputs, o.output, res, fps, [&](size_t i) {
        return png_text(*plan, o, o.prompts[i], model, pipe, mesh.config(), res.cache);
      });
    XDIT_INFO("text encoding ", seconds(res.text_seconds), ", denoising ",
              seconds(res.denoise_seconds), ", decoding ", seconds(res.decode_seconds),
              ", peak memory ", human_size(static_cast<double>(peak_rss_bytes())), " -> ",
              paths.size() == 1 ? paths[0] : paths[0] + " ... " + paths.back());
    return 0;
  }

  // Latent path: embeddings from a file or from the prompts (encoded whole,
  // then shared), latents out (or decoded here).
  std::optional<pipeline::Plan> planned;
  if (!o.prompt_embeds.empty()) {
    pipeline::LatentRequest req;
    const io::SafeTensorsFile in = open_input(o.prompt_embeds, "--prompt_embeds");
    auto take = [&](const std::string& name, bool required) {
      const Tensor t = take_input(in, name, required, "--prompt_embeds");
      return t.defined() ? t.to(DType::kF32) : t;
    };
    // The file's tensors by the family's names; the model checks them.
    for (const auto& n : pipe.family().embedding_names()) {
      req.cond.set(n.conditioning, take(n.file, n.required));
      req.uncond.set(n.conditioning, take(std::string("negative_") + n.file, false));
    }
    req.latents = r.latents;
    req.height = r.height;
    req.width = r.width;
    req.num_frames = r.num_frames;
    req.num_inference_steps = r.num_inference_steps;
    req.guidance_scale = r.guidance_scale;
    req.guidance_scale_2 = r.guidance_scale_2;
    req.true_cfg_scale = r.true_cfg_scale;
    req.cfg_truncation = r.cfg_truncation;
    req.cfg_normalization = r.cfg_normalization;
    req.skip_layer_guidance = r.skip_layer_guidance;
    req.cache = r.cache;
    req.seed = r.seed;
    req.loras = r.loras;
    planned.emplace(pipe.plan(req, output));
    if (!latent_out) reserve(static_cast<size_t>(planned->batch()));
  } else {
    r.resolution_binning = false;
    planned.emplace(pipe.plan(r, output));
    XDIT_INFO(pipe.family().name(), ": max_sequence_length ", (*planned)->max_sequence_length,
              " (T5 tokens)");
  }
  const pipeline::Plan& plan = *planned;
  if (mp4) check_mp4_size(o.output, plan->width, plan->height);
  trace_at_end.parallel = parallel_label(o.par.config, plan->num_inference_steps);
  if (!o.par.config.serial()) XDIT_INFO("parallel: ", trace_at_end.parallel);
  const auto t0 = Clock::now();
  const pipeline::Plan encoded =
      plan.has_prompts() ? plan.with_embeddings(pipe.encode_prompts(plan)) : plan;
  const double text_s = plan.has_prompts() ? secs(t0) : 0;
  const auto t1 = Clock::now();
  pipe.load();
  Tensor latents = pipeline::generate_latents_distributed(pipe, mesh, encoded, progress);
  const double denoise_s = secs(t1);
  trace_at_end.parallel =  // as it ran
      parallel_label(mesh.config(), plan->num_inference_steps, pipe.token_rows(*plan));
  if (latent_out) {
    if (!writer) return 0;
    // One frame is written [P, C, h, w], as latents were before they had frames.
    const Tensor saved =
        latents.dim(2) == 1
            ? latents.reshape({latents.dim(0), latents.dim(1), latents.dim(3), latents.dim(4)})
            : latents;
    std::map<std::string, std::string> meta{
        {"seed", std::to_string(plan->seed)},
        {"steps", std::to_string(plan->num_inference_steps)},
        {"guidance_scale", std::to_string(plan->guidance_scale)},
        {"height", std::to_string(plan->height)},
        {"width", std::to_string(plan->width)},
        {"model", model.from_cache() ? model.id : model.folder},
        {"model_revision", model.commit},
        {"parallel", trace_at_end.parallel},
        {"cache", pipe.cache_summary()},
        {"lora", plan->loras.empty() ? pipe.lora_label() : pipeline::lora_list_label(plan->loras)},
        {"xdit_version", XDIT_VERSION}};
    if (plan->guidance_scale_2 >= 0)  // Wan2.2's second expert
      meta["guidance_scale_2"] = std::to_string(plan->guidance_scale_2);
    io::write_safetensors(outputs.at(0), {{"latents", saved}}, meta);
    XDIT_INFO("text encoding ", seconds(text_s), ", denoising ", seconds(denoise_s),
              ", peak memory ", human_size(static_cast<double>(peak_rss_bytes())), " -> ", o.output,
              " ", shape_str(saved.shape()));
    return 0;
  }
  const auto t2 = Clock::now();
  pipe.release_transformer();
  pipeline::ImageResult res;
  res.rgb = models::image_to_rgb8(pipe.decode_latents(latents));  // prompt-major frames
  res.frames = static_cast<int64_t>(res.rgb.size()) / latents.dim(0);
  res.width = plan->width;
  res.height = plan->height;
  res.cache = pipe.cache_summary();
  const auto paths = io::output_paths(o.output, res.rgb.size() / res.frames, mp4 ? 1 : res.frames);
  if (!writer) return 0;
  write_frames(outputs, o.output, res, fps, [&](size_t i) {
    return png_text(*plan, o, o.prompts.empty() ? "(prompt embeddings)" : o.prompts[i], model, pipe,
                    mesh.config(), res.cache);
  });
  XDIT_INFO("text encoding ", seconds(text_s), ", denoising ", seconds(denoise_s), ", decoding ",
            seconds(secs(t2)), ", peak memory ", human_size(static_cast<double>(peak_rss_bytes())),
            " -> ", paths[0]);
  return 0;
}

}  // namespace

std::function<int()> add_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* g =
      app.add_subcommand("generate",
                         "run a diffusion transformer pipeline (PixArt-α/Σ, FLUX.1, SD3/3.5, "
                         "Wan2.1/2.2, Z-Image, Qwen-Image): prompts to PNG images or MP4 videos");
  g->add_option("--model", o->model,
                "diffusers pipeline folder (PixArt-α/Σ, FLUX.1, SD3/3.5, Wan2.1/2.2, Z-Image, "
                "Qwen-Image), or a Hugging Face repo id "
                "ORG/NAME[@REVISION] in the local cache (default: the built-in demo model, "
                "models/demo-shapes)");
  o->weights.add_to(g);
  g->add_option("--prompt", o->prompts,
                "prompt; repeat for a batch (one image each); without --model it defaults to "
                "the demo model's \"a large red circle on the left on a blue background\"")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  g->add_option("--negative_prompt,--negative-prompt", o->negative_prompt,
                "negative prompt (CFG models: default empty; FLUX.1, Qwen-Image: turns on true "
                "CFG with --true_cfg_scale > 1)");
  g->add_option(
      "--prompt_embeds,--prompt-embeds", o->prompt_embeds,
      "instead of --prompt: safetensors with prompt_embeds, prompt_attention_mask (PixArt, "
      "Z-Image, Qwen-Image), pooled_prompt_embeds (FLUX.1, SD3) and, for CFG, the "
      "negative_ ones");
  g->add_option("--latents", o->latents,
                "safetensors with initial 'latents' (default: drawn from --seed)");
  g->add_option("--height", o->height, "image height in pixels (default: the model's)");
  g->add_option("--width", o->width, "image width in pixels (default: the model's)");
  g->add_option("--fps", o->fps,
                "frames per second of an .mp4 output (default: the model's, Wan 16)")
      ->check(at_least(1, ""));
  g->add_option("--num_frames,--num-frames", o->num_frames,
                "video frames per prompt (default: the model's, Wan 81; Wan takes 4k + 1 and "
                "rounds others down to one, as diffusers does; image models 1)")
      ->check(at_least(1, ""));
  g->add_option("--num_inference_steps,--num-inference-steps", o->steps,
                "denoising steps (default: the model's: PixArt 20, FLUX.1 [dev] and SD3 28, "
                "[schnell] 4, Wan and Qwen-Image 50, Z-Image 9)")
      ->check(at_least(0, "(0: the initial noise, with --output_type latent)"));
  g->add_option("--guidance_scale,--guidance-scale", o->guidance,
                "PixArt, SD3, Wan: classifier-free guidance scale (default 4.5, 7, 5); Z-Image: "
                "CFG at 1 + this when > 0 (default 0); FLUX.1 [dev]: the embedded guidance "
                "(default 3.5)")
      ->check(finite_number());
  g->add_option("--guidance_scale_2,--guidance-scale-2", o->guidance_2,
                "Wan2.2: the second expert's (transformer_2's) guidance scale (default: "
                "--guidance_scale)")
      ->check(finite_number());
  g->add_option("--true_cfg_scale,--true-cfg-scale", o->true_cfg,
                "FLUX, Qwen-Image: classifier-free guidance with --negative_prompt when > 1 "
                "(default: the model's, FLUX 1, Qwen-Image 4)")
      ->check(finite_number());
  g->add_option("--cfg_truncation,--cfg-truncation", o->cfg_truncation,
                "Z-Image: classifier-free guidance off at the steps whose (1000 - t) / 1000 "
                "exceeds this (<= 1; default 1: never)")
      ->check(finite_number());
  g->add_option("--cfg_normalization,--cfg-normalization", o->cfg_normalization,
                "Z-Image: cap each image's guided prediction's norm at this many times its "
                "conditional prediction's (default 0: off; diffusers' True is 1)")
      ->check(finite_number());
  g->add_option("--skip_guidance_layers,--skip-guidance-layers", o->slg.layers,
                "SD3: skip-layer guidance on these blocks, e.g. 7,8,9 (SD3.5-medium's)")
      ->delimiter(',');
  g->add_option("--skip_layer_guidance_scale,--skip-layer-guidance-scale", o->slg.scale,
                "SD3: the skip-layer guidance scale")
      ->check(finite_number())
      ->capture_default_str();
  g->add_option("--skip_layer_guidance_start,--skip-layer-guidance-start", o->slg.start,
                "SD3: skip-layer guidance from this fraction of the steps")
      ->check(finite_number())
      ->capture_default_str();
  g->add_option("--skip_layer_guidance_stop,--skip-layer-guidance-stop", o->slg.stop,
                "SD3: skip-layer guidance until this fraction of the steps")
      ->check(finite_number())
      ->capture_default_str();
  g->add_option("--seed", o->seed_text,
                "seed of the initial noise, as torch.manual_seed takes it: -2^63 … 2^64-1 "
                "(a negative seed wraps to 2^64 + seed, as in torch)")
      ->capture_default_str();
  g->add_flag("--no_resolution_binning,--no-resolution-binning", o->no_binning,
              "generate at the requested size instead of the nearest aspect-ratio bin");
  g->add_option("--max_sequence_length,--max-sequence-length", o->max_sequence_length,
                "text tokens (default 120 for PixArt-α, 300 for PixArt-Σ, 512 for FLUX.1, Wan "
                "and Qwen-Image, 256 for SD3, 512 for Z-Image)")
      ->check(at_least(1, ""));
  g->add_option("--output_type,--output-type", o->output_type, "pil (PNG) or latent")
      ->capture_default_str();
  g->add_option("--output,-o", o->output,
                "output file (default xdit.png, or latents.safetensors); "
                "several prompts write NAME_0.png, NAME_1.png, ...");
  g->add_option("--dtype", o->dtype, "compute type: bf16 or f32")->capture_default_str();
  g->add_option("--device", o->device, "cpu, or cuda[:N] (a CUDA build on a machine with a GPU)")
      ->capture_default_str();
  g->add_option(
      "--trace", o->trace,
      "write a Chrome-trace JSON timeline (each rank's compute, sends and receives) to FILE");
  g->add_option("--threads", o->threads,
                "OpenMP threads per process, 1 … 4 x cores (default: the cores, shared among "
                "local ranks)")
      ->check(thread_count());
  add_parallel_options(g, o->par);
  add_cache_options(g, o->cache);
  add_lora_options(g, o->lora);
  return [o, g] { return run_generate(*o, *g); };
}

}  // namespace xdit::app
