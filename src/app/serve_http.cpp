// xdit serve: rank 0's HTTP service (serve/http_server.h: Boost.Beast).
//
// Threads and ranks: HTTP threads (rank 0) parse and check a body
// (serve/request_schema.h), check it against the model and the layout on a
// validator pipeline (configs and headers only, no weights), and queue it
// (serve/job_queue.h). The main thread of rank 0 takes up to one job per
// data-parallel group and runs the round on every rank (serve_ranks.cpp);
// the groups' images come back to rank 0 and the waiting HTTP threads encode
// and answer them.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "app/png_metadata.h"
#include "app/serve.h"
#include "core/error.h"
#include "core/log.h"
#include "io/png.h"
#include "io/video.h"
#include "serve/http_server.h"
#include "serve/job_queue.h"
#include "serve/metrics.h"
#include "serve/private_paths.h"
#include "serve/request_schema.h"
#include "serve/startup_line.h"

namespace xdit::app {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Set by SIGTERM / SIGINT.
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler sets it");
extern "C" void on_stop_signal(int) {
  g_stop.store(true);
}

bool loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// Seconds the answers under way get to be written once the server stops.
constexpr double kStopGraceSeconds = 5;

serve::HttpLimits limits(const ServeOptions& o) {
  serve::HttpLimits l;
  l.header_timeout = o.header_timeout;
  l.body_timeout = o.body_timeout;
  l.max_connections = static_cast<size_t>(o.max_connections);
  l.max_body_bytes = serve::kMaxBodyBytes;
  return l;
}

class Server {
 public:
  Server(const ServeOptions& o, pipeline::Pipeline& pipe, pipeline::Pipeline& validator,
         parallel::Mesh& mesh, const std::string& model_id)
      : o_(o),
        pipe_(pipe),
        validator_(validator),
        mesh_(mesh),
        model_id_(model_id),
        queue_(static_cast<size_t>(o.max_queue)),
        groups_(mesh.config().data_parallel_degree) {
    // An answer names the model's files below its folder, the LoRAs by name.
    private_paths_.add(pipe.folder().root(), "");
    private_paths_.add(o.model, "");
    if (o.lora_root->enabled()) private_paths_.add(o.lora_root->path(), "");
  }

  // Binds, then serves until SIGTERM; returns the exit code.
  int run() {
    using serve::HttpRequest;
    using serve::HttpResponse;
    std::vector<serve::Route> routes;
    routes.push_back({"POST", "/generate", true, false, [this](const HttpRequest& req) {
                        return post(serve::Endpoint::kGenerate, req);
                      }});
    routes.push_back(
        {"POST", "/v1/images/generations", true, false,
         [this](const HttpRequest& req) { return post(serve::Endpoint::kImages, req); }});
    routes.push_back({"GET", "/health", false, true, [this](const HttpRequest&) {
                        const json body = {{"status", g_stop ? "draining" : "ok"},
                                           {"queue_depth", queue_.depth()},
                                           {"running", running_.load()},
                                           {"model", model_id_},
                                           {"ranks", mesh_.world().size()}};
                        return serve::json_response(g_stop ? 503 : 200, body);
                      }});
    routes.push_back(
        {"GET", "/v1/models", false, false, [this](const HttpRequest&) {
           const json model = {
               {"id", model_id_}, {"object", "model"}, {"created", started_}, {"owned_by", "xdit"}};
           return serve::json_response(200, {{"object", "list"}, {"data", json::array({model})}});
         }});
    routes.push_back({"GET", "/metrics", false, false, [this](const HttpRequest&) {
                        HttpResponse r;
                        r.content_type = "text/plain; version=0.0.4";
                        r.body =
                            metrics_.prometheus(queue_.depth(), queue_.capacity(), running_.load());
                        return r;
                      }});
    // Each request waiting for its generation holds a worker: the queue's
    // capacity plus the running round, and a few more that answer the rest
    // (a 400 or 429 never waits behind the queue). Slow clients hold none:
    // a connection is read and written on the I/O thread.
    const size_t workers = static_cast<size_t>(o_.max_queue + groups_ + 4);
    serve::HttpServer svr(limits(o_), std::move(routes), o_.api_key, workers,
                          [this](const std::string& path, int status) { count(path, status); });
    int port = 0;
    try {
      port = svr.bind(o_.host, o_.port);
    } catch (const Error&) {
      const std::string why = o_.port == 0 ? "" : bind_error(o_.host, o_.port);
      if (!why.empty()) XDIT_FAIL(why);  // the probe's words: who has the port
      throw;
    }
    svr.start();
    std::thread drain([&] {  // SIGTERM: queued jobs answered 503 at once
      while (!g_stop && !done_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (auto& job : queue_.close())
        job->finish(serve::JobResult::error(
            503, "the server is shutting down: the request was not started"));
    });
    // However the loop ends (SIGTERM, or an error that ends the job), every
    // job has its answer before the HTTP server stops (its workers wait on
    // them), and the answers under way get a bounded grace to be written.
    struct Join {
      Server& self;
      serve::HttpServer& svr;
      std::thread& drain;
      ~Join() {
        self.done_ = true;
        drain.join();
        svr.stop(kStopGraceSeconds);
      }
    } join{*this, svr, drain};
    // The start-up line, printed even under XDIT_QUIET: where the service is
    // and who can reach it.
    serve::Startup line;
    line.model = model_id_;
    line.host = o_.host;
    line.port = port;
    line.loopback = loopback(o_.host);
    line.groups = groups_;
    line.max_queue = o_.max_queue;
    line.request_timeout = o_.request_timeout;
    line.pid = static_cast<int>(::getpid());
    std::fprintf(stderr, "%s\n", serve::startup_line(line).c_str());
    std::fflush(stderr);
    serve_loop();
    send_stop(mesh_.world());
    std::fprintf(stderr, "xdit: stopped: %zu request%s served\n", served_, served_ == 1 ? "" : "s");
    return 0;
  }

 private:
  // The main thread: rounds of up to one job per data-parallel group.
  void serve_loop() {
    while (!g_stop) {
      auto jobs = queue_.take(static_cast<size_t>(groups_), std::chrono::milliseconds(100));
      if (jobs.empty()) continue;
      std::vector<std::shared_ptr<serve::Job>> runs;
      std::vector<pipeline::Plan> plans;  // checked on the HTTP thread, before the queue
      for (auto& job : jobs) {
        if (Clock::now() > job->deadline()) {
          job->finish(serve::JobResult::error(504, timeout_message()));
          continue;
        }
        runs.push_back(job);
        plans.push_back(*job->plan());
      }
      if (runs.empty()) continue;
      send_round(mesh_.world(), plans);
      running_ = runs.size();
      const auto t0 = Clock::now();
      std::vector<pipeline::ImageResult> results;
      try {
        results = run_round(pipe_, mesh_, plans);
      } catch (const std::exception& e) {
        // One process: the failure is this request's; answer it and go on.
        // Several: a rank may be inside a collective, so the job ends (main
        // prints the message and aborts every rank).
        // The log has the whole message; the answer no path of the server's.
        XDIT_WARN("a request failed: ", e.what());
        for (auto& job : runs)
          job->finish(serve::JobResult::error(500, private_paths_.shown(e.what())));
        if (mesh_.world().size() > 1) throw;  // (the clients have their 500 first)
        running_ = 0;
        continue;
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      for (size_t i = 0; i < runs.size(); ++i) {
        pipeline::ImageResult& g = results[i];
        metrics_.generation(static_cast<int64_t>(g.rgb.size()), g.text_seconds, g.denoise_seconds,
                            g.decode_seconds, s);
        serve::JobResult jr;
        jr.status = 200;
        jr.width = g.width;
        jr.height = g.height;
        jr.rgb = std::move(g.rgb);
        jr.seconds = s;
        jr.plan = *plans[i];
        jr.cache = g.cache;
        // Here, on the thread that runs the rounds: --patch_weights dynamic
        // changes the mesh's weights during the next one.
        jr.parallel =
            parallel_label(mesh_.config(), jr.plan.num_inference_steps, pipe_.token_rows(jr.plan));
        runs[i]->finish(std::move(jr));
      }
      running_ = 0;
      served_ += runs.size();
      mean_seconds_ = mean_seconds_ == 0 ? s : 0.8 * mean_seconds_ + 0.2 * s;
    }
  }

  std::string timeout_message() const {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "the request did not finish within --request_timeout %g s (queued or running)",
                  o_.request_timeout);
    return buf;
  }

  serve::HttpResponse post(serve::Endpoint e, const serve::HttpRequest& req) {
    const auto t0 = Clock::now();
    if (g_stop) return serve::error_response(503, "the server is shutting down");
    serve::ServeRequest sr;
    std::optional<pipeline::Plan> plan;
    try {
      sr = serve::parse_request_body(e, req.body);
      if (sr.save_disk_path) o_.output_root->check(*sr.save_disk_path);  // under --output_dir
      std::vector<std::string> names;                                    // files of --lora_dir
      for (const auto& l : sr.loras) names.push_back(l.name);
      const std::vector<std::string> files = o_.lora_root->resolve_all(names);
      for (size_t i = 0; i < files.size(); ++i)
        sr.image.loras.push_back({files[i], sr.loras[i].scale, sr.loras[i].ignore_unmatched});
      std::lock_guard<std::mutex> lock(validator_mu_);
      plan.emplace(validator_.plan(sr.image));  // model, size, layout and memory: before the queue
      if ((*plan)->num_frames > 1 && e == serve::Endpoint::kGenerate)
        XDIT_CHECK(!io::h264_encoder().empty(),
                   "this server's FFmpeg has no H.264 encoder for a video answer: ask for "
                   "num_frames 1, or use /v1/images/generations (a PNG per frame)");
    } catch (const serve::BadRequest& b) {
      return serve::error_response(b.status(), b.what(), b.field());
    } catch (const Error& err) {
      return serve::error_response(400, private_paths_.shown(err.what()));
    }
    auto job =
        std::make_shared<serve::Job>(std::move(sr),
                                     t0 + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(o_.request_timeout)),
                                     std::move(plan));
    switch (queue_.push(job)) {
      case serve::JobQueue::Push::kFull: {
        const double wait =
            std::max(1.0, std::ceil(mean_seconds_.load() * static_cast<double>(queue_.depth() + 1) /
                                    static_cast<double>(groups_)));
        serve::HttpResponse r =
            serve::error_response(429, "the queue is full (" + std::to_string(queue_.capacity()) +
                                           " requests waiting): try again later");
        r.headers.emplace_back("Retry-After", std::to_string(static_cast<int64_t>(wait)));
        return r;
      }
      case serve::JobQueue::Push::kClosed:
        return serve::error_response(503, "the server is shutting down");
      case serve::JobQueue::Push::kQueued:
        break;
    }
    std::optional<serve::JobResult> r = job->wait();
    if (!r) return serve::error_response(504, timeout_message());
    if (r->status != 200) return serve::error_response(r->status, r->message, r->field);
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    const serve::ServeRequest& asked = job->request();
    // A video (several frames) on /generate is answered as one H.264 MP4;
    // otherwise a PNG per frame, prompt-major (an image: per prompt).
    const bool video = e == serve::Endpoint::kGenerate && r->plan.num_frames > 1;
    std::vector<std::vector<uint8_t>> pngs;
    if (!video)
      for (const auto& rgb : r->rgb)
        pngs.push_back(
            io::encode_png(r->width, r->height, rgb, png_text(r->plan, r->parallel, r->cache)));
    if (e == serve::Endpoint::kImages) {
      json data = json::array();
      for (const auto& png : pngs) data.push_back({{"b64_json", serve::base64_encode(png)}});
      json body = {{"created", static_cast<int64_t>(std::time(nullptr))}, {"data", data}};
      if (!r->cache.empty()) body["cache"] = r->cache;  // beside OpenAI's fields
      if (!r->plan.loras.empty()) body["lora"] = pipeline::lora_list_label(r->plan.loras);
      return serve::json_response(200, body);
    }
    char took[32];
    std::snprintf(took, sizeof took, "%.2f sec", elapsed);
    std::vector<uint8_t> file;
    if (!video) {
      file = pngs[0];
    } else {
      const int fps = validator_.family().default_fps();
      auto meta = png_text(r->plan, r->parallel, r->cache);
      meta["frames"] = std::to_string(r->rgb.size());
      meta["fps"] = std::to_string(fps);
      try {
        file = io::encode_mp4(r->rgb, r->width, r->height, fps, meta);
      } catch (const Error& err) {
        return serve::error_response(500, err.what());
      }
    }
    json body = {
        {"message", video ? "Video generated successfully" : "Image generated successfully"},
        {"elapsed_time", took},
        {"parallel", r->parallel},
        {"num_frames", r->plan.num_frames},
        {"format", video ? "mp4" : "png"}};
    if (!r->cache.empty()) body["cache"] = r->cache;
    // The LoRAs as applied, with what ignore_unmatched skipped.
    if (!r->plan.loras.empty()) body["lora"] = pipeline::lora_list_label(r->plan.loras);
    if (asked.save_disk_path) {
      // Under --output_dir, links refused, written exclusively and renamed
      // into place (serve/output_root.h).
      try {
        body["output"] =
            o_.output_root->write(*asked.save_disk_path, file, video ? ".mp4" : ".png");
      } catch (const serve::BadRequest& b) {
        return serve::error_response(b.status(), b.what(), b.field());
      } catch (const Error& err) {
        return serve::error_response(500, err.what(), "save_disk_path");
      }
      body["save_to_disk"] = true;
    } else {
      body["output"] = serve::base64_encode(file);
      body["save_to_disk"] = false;
    }
    return serve::json_response(200, body);
  }

  std::map<std::string, std::string> png_text(const pipeline::PlanFields& r,
                                              const std::string& parallel,
                                              const std::string& cache) const {
    ImageMetadata m;
    m.prompt = r.prompts.empty() ? "" : r.prompts[0];
    m.negative_prompt = r.negative_prompt.value_or("");
    m.seed = r.seed;
    m.steps = r.num_inference_steps;
    m.width = r.width;
    m.height = r.height;
    m.guidance = r.guidance_scale;
    m.guidance_2 = r.guidance_scale_2;
    m.true_cfg = r.true_cfg_scale;
    m.cfg_truncation = r.cfg_truncation;
    m.cfg_normalization = r.cfg_normalization;
    m.model = model_id_;
    m.parallel = parallel;
    m.cache = cache;
    m.lora = pipeline::lora_list_label(r.loras);  // as `xdit generate --lora` labels them
    m.software_note = "serve";
    return png_metadata(m);
  }

  // Every answer, the HTTP layer's refusals included. Paths outside the API
  // count as one label: a client must not grow the metrics with paths of
  // its choosing.
  void count(const std::string& path, int status) {
    static const char* const kPaths[] = {"/generate", "/v1/images/generations", "/health",
                                         "/v1/models", "/metrics"};
    bool known = false;
    for (const char* k : kPaths) known = known || path == k;
    metrics_.request(known ? path : "other", status);
  }

  using Clock = serve::Clock;
  const ServeOptions& o_;
  pipeline::Pipeline& pipe_;
  pipeline::Pipeline& validator_;
  std::mutex validator_mu_;
  parallel::Mesh& mesh_;
  const std::string model_id_;
  serve::PrivatePaths private_paths_;
  serve::JobQueue queue_;
  serve::Metrics metrics_;
  const int groups_;
  const int64_t started_ = static_cast<int64_t>(std::time(nullptr));
  std::atomic<size_t> running_{0};
  std::atomic<double> mean_seconds_{0};
  std::atomic<bool> done_{false};
  size_t served_ = 0;
};

}  // namespace

void install_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  // A client that hangs up before its answer must not end the process.
  ::signal(SIGPIPE, SIG_IGN);
}

std::string bind_error(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) return std::string("cannot resolve --host ") + host + ": " + ::gai_strerror(rc);
  std::string err;
  const int fd = ::socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd < 0) {
    err = std::string("cannot open a socket: ") + std::strerror(errno);
  } else {
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0) {
      const int e = errno;
      err = "cannot listen on " + host + ":" + std::to_string(port) + ": " + std::strerror(e) +
            (e == EADDRINUSE ? " (another process has it: pass a free --port, or stop that one)"
                             : "");
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return err;
}

std::string read_api_key(const std::string& path) {
  struct stat st {};
  XDIT_CHECK(::stat(path.c_str(), &st) == 0, "--api_key_file ", path, ": ", std::strerror(errno));
  XDIT_CHECK(S_ISREG(st.st_mode), "--api_key_file ", path, " must be a regular file");
  XDIT_CHECK(st.st_size <= 4096, "--api_key_file ", path, " holds ", st.st_size,
             " bytes; a key file holds one line of at most 4096");
  std::ifstream in(path, std::ios::binary);
  XDIT_CHECK(in.good(), "--api_key_file ", path, ": cannot be read");
  std::string key;
  std::getline(in, key);
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!key.empty() && blank(key.back())) key.pop_back();
  size_t first = 0;
  while (first < key.size() && blank(key[first])) ++first;
  key.erase(0, first);
  XDIT_CHECK(!key.empty(), "--api_key_file ", path, " is empty: write the key on its first line");
  for (const char c : key)
    XDIT_CHECK(c > ' ' && c < 127, "--api_key_file ", path,
               ": the key must be printable ASCII without blanks (as an Authorization header "
               "carries it)");
  return key;
}

int serve_http(const ServeOptions& o, pipeline::Pipeline& pipe, pipeline::Pipeline& validator,
               parallel::Mesh& mesh, const std::string& model_id) {
  Server server(o, pipe, validator, mesh, model_id);
  return server.run();
}

}  // namespace xdit::app
