// xdit generate: a diffusers PixArt folder + prompt embeddings → latents.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "app/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "io/safetensors.h"
#include "pipeline/pixart_pipeline.h"

namespace xdit::app {

void set_threads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}

namespace {

struct GenerateOptions {
  std::string model, prompt_embeds, latents, output = "latents.safetensors", output_type = "latent",
                                             dtype = "bf16";
  int64_t height = 0, width = 0, steps = 20;
  double guidance = 4.5;
  uint64_t seed = 42;
  int threads = 0;
};

// Checks that `path` can be created before any heavy work starts.
void check_writable(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  XDIT_CHECK(fs::is_directory(dir), "cannot write ", path, ": folder ", dir.string(),
             " does not exist");
  XDIT_CHECK(!fs::is_directory(p), "cannot write ", path, ": it is a folder");
}

int run_generate(const GenerateOptions& o) {
  set_threads(o.threads);
  XDIT_CHECK(o.output_type == "latent", "--output_type ", o.output_type,
             " is not available yet: this build writes latents (--output_type latent)");
  XDIT_CHECK(!o.prompt_embeds.empty(), "--prompt_embeds FILE.safetensors is required");
  check_writable(o.output);
  const DType dtype = parse_dtype(o.dtype);
  XDIT_CHECK(dtype != DType::kF16, "--dtype f16 is not supported on CPU: use bf16 or f32");

  pipeline::PixArtPipeline pipe(o.model, dtype);
  pipeline::LatentRequest req;
  {
    auto in = io::read_safetensors_f32(o.prompt_embeds);
    auto take = [&](const char* name, bool required) {
      auto it = in.find(name);
      XDIT_CHECK(it != in.end() || !required, o.prompt_embeds, " has no tensor '", name, "'");
      return it == in.end() ? Tensor() : it->second;
    };
    req.prompt_embeds = take("prompt_embeds", true);
    req.prompt_mask = take("prompt_attention_mask", false);
    req.negative_embeds = take("negative_prompt_embeds", false);
    req.negative_mask = take("negative_prompt_attention_mask", false);
  }
  if (!o.latents.empty()) {
    auto in = io::read_safetensors_f32(o.latents);
    auto it = in.find("latents");
    XDIT_CHECK(it != in.end(), o.latents, " has no tensor 'latents'");
    req.latents = it->second;
  }
  req.height = o.height;
  req.width = o.width;
  req.num_inference_steps = o.steps;
  req.guidance_scale = o.guidance;
  req.seed = o.seed;
  pipe.validate(req);  // everything checked before the weights load

  const auto t0 = std::chrono::steady_clock::now();
  pipe.load();
  const auto t1 = std::chrono::steady_clock::now();
  Tensor latents = pipe.generate_latents(req, [](const pipeline::StepEvent& e) {
    XDIT_INFO("step ", e.step, "/", e.total, "  ", e.seconds, " s");
  });
  const auto t2 = std::chrono::steady_clock::now();
  io::write_safetensors(o.output, {{"latents", latents}},
                        {{"seed", std::to_string(o.seed)},
                         {"steps", std::to_string(o.steps)},
                         {"guidance_scale", std::to_string(o.guidance)},
                         {"height", std::to_string(req.height)},
                         {"width", std::to_string(req.width)},
                         {"model", o.model},
                         {"xdit_version", XDIT_VERSION}});
  XDIT_INFO("wrote ", o.output, " ", shape_str(latents.shape()), "  (load ",
            std::chrono::duration<double>(t1 - t0).count(), " s, denoise ",
            std::chrono::duration<double>(t2 - t1).count(), " s)");
  return 0;
}

}  // namespace

std::function<int()> add_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* g = app.add_subcommand("generate", "run the PixArt pipeline");
  g->add_option("--model", o->model, "diffusers PixArt pipeline folder")->required();
  g->add_option("--prompt_embeds,--prompt-embeds", o->prompt_embeds,
                "safetensors with prompt_embeds, prompt_attention_mask and, for CFG, "
                "negative_prompt_embeds, negative_prompt_attention_mask");
  g->add_option("--latents", o->latents,
                "safetensors with initial 'latents' (default: drawn from --seed)");
  g->add_option("--height", o->height, "image height in pixels (default: the model's)");
  g->add_option("--width", o->width, "image width in pixels (default: the model's)");
  g->add_option("--num_inference_steps,--num-inference-steps", o->steps, "denoising steps")
      ->capture_default_str();
  g->add_option("--guidance_scale,--guidance-scale", o->guidance, "classifier-free guidance scale")
      ->capture_default_str();
  g->add_option("--seed", o->seed, "random seed for the initial latents")->capture_default_str();
  g->add_option("--output_type,--output-type", o->output_type, "latent")->capture_default_str();
  g->add_option("--output,-o", o->output, "output file")->capture_default_str();
  g->add_option("--dtype", o->dtype, "compute type: bf16 or f32")->capture_default_str();
  g->add_option("--threads", o->threads, "OpenMP threads (default: all cores)");
  return [o] { return run_generate(*o); };
}

}  // namespace xdit::app
