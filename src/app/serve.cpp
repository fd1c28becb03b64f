// xdit serve: the model loaded once on every rank, an HTTP service on rank 0
// (serve_http.cpp), every request run on the whole parallel layout
// (serve_ranks.cpp). This file: the flags and the start-up.
#include <malloc.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "app/commands.h"
#include "app/lora_options.h"
#include "app/parallel_options.h"
#include "app/rank_agreement.h"
#include "app/serve.h"
#include "app/startup.h"
#include "core/error.h"
#include "core/log.h"
#include "io/model_ref.h"
#include "pipeline/pipeline.h"
#include "serve/lora_dir.h"
#include "serve/output_root.h"
#include "serve/request_schema.h"

namespace xdit::app {

namespace fs = std::filesystem;

namespace {

constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600;  // a week

void check_limits(const pipeline::RequestLimits& l) {
  const std::pair<const char*, int64_t> flags[] = {{"--max_pixels", l.max_pixels},
                                                   {"--max_steps", l.max_steps},
                                                   {"--max_frames", l.max_frames},
                                                   {"--max_batch", l.max_batch}};
  for (const auto& [flag, v] : flags)
    XDIT_CHECK(v >= 0, flag, " must be 0 (no limit) or more, got ", v);
}

// A request at the limits (the largest square within --max_pixels, the most
// images and steps) against this machine's memory: one line when it cannot
// fit, since such requests will then be refused by the memory check.
void warn_if_limits_cannot_fit(pipeline::Pipeline& validator, const pipeline::RequestLimits& l) {
  if (l.max_pixels == 0 && l.max_batch == 0) return;
  pipeline::ImageRequest r;
  r.prompts.assign(static_cast<size_t>(std::max<int64_t>(1, l.max_batch)), "limits");
  const int64_t unit = 64;  // a multiple of every family's latent grid
  if (l.max_pixels > 0) {
    const auto side = static_cast<int64_t>(std::sqrt(static_cast<double>(l.max_pixels)));
    const int64_t most = validator.family().max_side(validator.vae_scale_factor());
    r.height = r.width =
        std::max<int64_t>(unit, std::min(most > 0 ? most : side, side) / unit * unit);
  }
  r.resolution_binning = false;
  try {
    validator.plan(r);
  } catch (const Error& e) {
    XDIT_WARN("a request at the limits (", r.prompts.size(), " image(s) of ", r.width, "x",
              r.height, " px) is refused on this machine: ", e.what(),
              " — lower --max_pixels or --max_batch to what it serves");
  }
}

int run_serve(ServeOptions& o, const CLI::App& command) {
  if (o.openapi) {
    if (world().rank() == 0) std::printf("%s\n", serve::openapi().dump(2).c_str());
    return 0;
  }
  install_signals();
  // Two malloc arenas: with one per HTTP thread (glibc's default), the
  // fragments of each thread's PNG and JSON buffers stay with the process and
  // its resident memory creeps up with the requests (bench serve on FLUX
  // tiny: +3 % per 1000 requests). Measured there: 2 arenas flat at the same
  // throughput; 1 arena flat but 25 % slower (the compute threads and the
  // HTTP threads then share one lock). A user's MALLOC_ARENA_MAX still wins.
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) ::mallopt(M_ARENA_MAX, 2);
  // Each waiting request holds one of the HTTP workers (a request waiting for its round).
  XDIT_CHECK(o.max_queue >= 1 && o.max_queue <= 1024, "--max_queue must be 1 … 1024, got ",
             o.max_queue);
  // Bounded: a deadline of now + 1e308 s overflows the clock (every request
  // would time out at once).
  XDIT_CHECK(std::isfinite(o.request_timeout) && o.request_timeout > 0 &&
                 o.request_timeout <= kMaxTimeoutSeconds,
             "--request_timeout must be a positive number of seconds up to ", kMaxTimeoutSeconds,
             ", got ", o.request_timeout);
  for (const auto& [flag, v] :
       {std::pair<const char*, double>{"--header_timeout", o.header_timeout},
        {"--body_timeout", o.body_timeout}})
    XDIT_CHECK(std::isfinite(v) && v >= 0.01 && v <= 3600, flag,
               " must be 0.01 … 3600 seconds, got ", v);
  XDIT_CHECK(o.max_connections >= 1 && o.max_connections <= 4096,
             "--max_connections must be 1 … 4096, got ", o.max_connections);
  if (!o.api_key_file.empty()) o.api_key = read_api_key(o.api_key_file);
  XDIT_CHECK(o.port >= 0 && o.port <= 65535, "--port must be 0 … 65535, got ", o.port);
  check_limits(o.limits);
  if (!o.output_dir.empty() && world().rank() == 0)
    o.output_root = std::make_shared<serve::OutputRoot>(o.output_dir);
  if (!o.lora_dir.empty()) o.lora_root = std::make_shared<serve::LoraDir>(o.lora_dir);
  const JobStart job = start_job(command, o.threads, o.device, o.par);
  comm::Communicator& w = *job.world;
  const Device& device = job.device;
  parallel::Mesh& mesh = *job.mesh;
  if (w.rank() == 0 && o.port != 0) {
    const std::string err = bind_error(o.host, o.port);
    XDIT_CHECK(err.empty(), err);
  }
  const DType dtype = parse_compute_dtype(o.dtype);
  if (o.model.empty()) {
    o.model = default_model_dir();
    XDIT_WARN("no --model given: serving the built-in demo model ", kDefaultModel,
              " (coloured shapes from captions such as \"", kDefaultPrompt, "\")");
  }
  const io::ModelRef model = io::resolve_model(o.model);
  check_files_agree(w, model.folder);
  pipeline::Pipeline pipe(model.folder, dtype);
  pipe.set_mesh(&mesh);
  pipe.set_device(device);
  o.weights.apply(pipe, device);
  pipe.set_keep_text_encoder(true);           // resident: encoders stay loaded between requests
  pipe.set_request_per_replica(true);         // a round gives each replica a request of its own
  pipe.set_max_lora_bytes(o.max_lora_bytes);  // (every rank reads a request's LoRAs)
  // The model's default request planned on this layout before the weights
  // load: the server refuses to start where it could serve nothing (and
  // the serving pipeline opens its text side and VAE).
  pipeline::ImageRequest fallback;
  fallback.prompts = {"the default request"};
  std::optional<pipeline::Plan> first;
  try {
    first = pipe.plan(fallback);
  } catch (const Error& e) {
    const int64_t vsf = pipe.vae_scale_factor();
    XDIT_FAIL("this model cannot serve its default request (", pipe.family().default_width(vsf),
              "x", pipe.family().default_height(vsf), ") on this parallel layout: ", e.what());
  }
  pipe.load_experts();  // (Wan2.2: both, before any request)
  pipe.set_weights_resident(true);
  // The resident text encoders built now, not by the first request: their
  // layers, like the transformer's, are known to the checks of requests'
  // LoRAs (request_lora_targets).
  if (first->has_prompts()) pipe.encode_prompts(*first);
  w.barrier();  // every rank loaded: only now does rank 0 listen
  if (w.rank() != 0) return follow(pipe, mesh);
  pipeline::Pipeline validator(model.folder, dtype);  // configs and headers: checks requests
  validator.set_mesh(&mesh);
  validator.set_device(device);  // requests' memory is checked against the GPU's
  validator.set_weights_resident(true);
  validator.set_request_per_replica(true);
  validator.set_request_limits(o.limits);  // over a limit: 400 before the queue
  validator.set_request_lora_targets(pipe.request_lora_targets());  // side paths only
  validator.set_max_lora_bytes(o.max_lora_bytes);
  warn_if_limits_cannot_fit(validator, o.limits);
  const std::string id = model.from_cache() ? model.id : fs::path(model.folder).filename().string();
  return serve_http(o, pipe, validator, mesh, id);
}

}  // namespace

std::function<int()> add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* s = app.add_subcommand(
      "serve",
      "load a model once and serve it over HTTP (xDiT's POST /generate, OpenAI's POST "
      "/v1/images/generations); under mpirun every request runs on all ranks");
  s->add_option("--model", o->model,
                "diffusers PixArt-α/Σ, FLUX.1 or SD3/3.5 pipeline folder, or a Hugging Face repo "
                "id in the local cache (default: the built-in tiny model)");
  s->add_option("--host", o->host,
                "address to listen on; the default serves this machine only, 0.0.0.0 every "
                "interface")
      ->capture_default_str();
  s->add_option("--port", o->port, "TCP port (0: any free port, printed at start)")
      ->capture_default_str();
  s->add_option("--max_queue,--max-queue", o->max_queue,
                "requests that may wait; more are answered 429 with Retry-After")
      ->capture_default_str();
  s->add_option("--request_timeout,--request-timeout", o->request_timeout,
                "seconds a request may take, queued and running; later it is answered 504")
      ->capture_default_str();
  s->add_option("--header_timeout,--header-timeout", o->header_timeout,
                "seconds a connection has to send a request's line and headers (and to send "
                "the next one on a kept-alive connection); later it is answered 408 and closed")
      ->capture_default_str();
  s->add_option("--body_timeout,--body-timeout", o->body_timeout,
                "seconds a connection has to send a request's body, and to read the answer")
      ->capture_default_str();
  s->add_option("--max_connections,--max-connections", o->max_connections,
                "connections open at once (apart from --max_queue); more are answered 503")
      ->capture_default_str();
  s->add_option("--api_key_file,--api-key-file", o->api_key_file,
                "a file whose first line is the key every request but GET /health must send as "
                "'Authorization: Bearer <key>' (compared in constant time)");
  s->add_option("--dtype", o->dtype, "compute type: bf16 or f32")->capture_default_str();
  o->weights.add_to(s);
  s->add_option("--device", o->device, "cpu, or cuda[:N] (a CUDA build on a machine with a GPU)")
      ->capture_default_str();
  s->add_option("--threads", o->threads,
                "OpenMP threads per process (default: the cores, shared among local ranks)")
      ->check(thread_count());
  s->add_option("--output_dir,--output-dir", o->output_dir,
                "the only folder the service writes into: a request's save_disk_path is a "
                "folder relative to it (default: none, save_disk_path is refused)");
  s->add_option("--lora_dir,--lora-dir", o->lora_dir,
                "the folder of the LoRAs a request may name (`loras`: file names in it, "
                "applied to that request only; default: none, `loras` is refused)");
  add_max_lora_bytes(s, o->max_lora_bytes);
  s->add_option("--max_pixels,--max-pixels", o->limits.max_pixels,
                "largest width x height of a request, run or written (0: no limit)")
      ->capture_default_str();
  s->add_option("--max_steps,--max-steps", o->limits.max_steps,
                "most denoising steps of a request (0: no limit)")
      ->capture_default_str();
  s->add_option("--max_frames,--max-frames", o->limits.max_frames,
                "most frames per image of a request (0: no limit)")
      ->capture_default_str();
  s->add_option("--max_batch,--max-batch", o->limits.max_batch,
                "most images of one request (OpenAI's n; 0: no limit)")
      ->capture_default_str();
  s->add_flag("--openapi", o->openapi, "print the service's OpenAPI document and exit");
  add_parallel_options(s, o->par);
  return [o, s] { return run_serve(*o, *s); };
}

}  // namespace xdit::app