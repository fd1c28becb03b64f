// xdit serve: the model loaded once on every rank, an HTTP service on rank 0
// (cpp-httplib), every request run on the whole parallel layout.
//
// Threads and ranks: HTTP threads (rank 0) parse and check a body
// (serve/request_schema.h), check it against the model and the layout on a
// validator pipeline (configs and headers only, no weights), and queue it
// (serve/job_queue.h). The main thread of rank 0 is the only one that talks
// to the other ranks: it takes up to one job per data-parallel group, sends
// the round to every rank (point to point, so idle ranks sleep instead of
// spinning in a collective), and every rank runs its group's request through
// the same Pipeline as `xdit generate`. The groups' images come back to rank
// 0 and the waiting HTTP threads encode and answer them.
#include <arpa/inet.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>
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

#include "app/commands.h"
#include "app/parallel_options.h"
#include "app/png_metadata.h"
#include "app/startup.h"
#include "comm/device_comm.h"
#include "core/error.h"
#include "core/log.h"
#include "core/memory.h"
#include "io/model_ref.h"
#include "io/png.h"
#include "pipeline/distributed.h"
#include "pipeline/pipeline.h"
#include "serve/job_queue.h"
#include "serve/metrics.h"
#include "serve/request_schema.h"
#include "serve/startup_line.h"

namespace xdit::app {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct ServeOptions {
  ParallelOptions par;
  std::string model, dtype = "bf16", host = "127.0.0.1", device = "cpu";
  int port = 6000;
  int max_queue = 16;
  double request_timeout = 600;
  int threads = 0;
  bool openapi = false;
};

// SIGTERM / SIGINT: stop taking requests, finish the running ones, exit 0.
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler sets it");
extern "C" void on_stop_signal(int) {
  g_stop.store(true);
}

void install_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  // A client that hangs up before its answer must not end the process.
  ::signal(SIGPIPE, SIG_IGN);
}

bool loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// Whether `host:port` can be bound now: checked before the weights load so
// that a port in use is one line at start, not after minutes of loading.
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

// Debian's cpp-httplib 0.11 is built with a listen backlog of 5 (its
// CPPHTTPLIB_LISTEN_BACKLOG, fixed in the compiled library): a burst of more
// new connections than that has SYNs dropped and waits the kernel's 1 s
// retransmission (bench serve saw a 1.2 s request in every run). listen()
// again on the bound socket raises the backlog; httplib does not expose the
// socket, so it is found by its port.
void raise_backlog(int port, int backlog) {
  for (int fd = 0; fd < 4096; ++fd) {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    int listening = 0;
    socklen_t ll = sizeof listening;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) continue;
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ll) != 0 || !listening) continue;
    const int p = a.ss_family == AF_INET    ? ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port)
                  : a.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port)
                                            : -1;
    if (p == port) ::listen(fd, backlog);
  }
}

// --- the rounds every rank runs ----------------------------------------------

// Group g of the mesh's data-parallel groups runs requests[g] (none when
// there are fewer); every rank returns every request's result.
std::vector<pipeline::ImageResult> run_round(pipeline::Pipeline& pipe, parallel::Mesh& mesh,
                                             const std::vector<pipeline::ImageRequest>& requests) {
  return pipeline::generate_groups(pipe, mesh, requests, maybe_inject_fault);
}

// Rank 0 → every other rank: one command (a JSON text), point to point.
constexpr int kCommandTag = 7001;
void send_command(comm::Communicator& w, const std::string& text) {
  const uint64_t n = text.size();
  for (int r = 1; r < w.size(); ++r) {
    w.send(&n, sizeof n, comm::Type::kByte, r, kCommandTag);
    w.send(text.data(), n, comm::Type::kByte, r, kCommandTag + 1);
  }
}

// A follower's wait for rank 0's next command: polled with short sleeps,
// so an idle server costs no CPU on the other ranks.
std::string receive_command(comm::Communicator& w) {
  uint64_t n = 0;
  auto req = w.irecv(&n, sizeof n, comm::Type::kByte, 0, kCommandTag);
  while (!req->test()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::string text(n, '\0');
  w.recv(text.data(), n, comm::Type::kByte, 0, kCommandTag + 1);
  return text;
}

int follow(pipeline::Pipeline& pipe, parallel::Mesh& mesh) {
  for (;;) {
    const json cmd = json::parse(receive_command(mesh.world()));
    if (cmd.at("op") == "stop") return 0;
    std::vector<pipeline::ImageRequest> reqs;
    for (const json& r : cmd.at("requests")) reqs.push_back(serve::request_from_json(r));
    run_round(pipe, mesh, reqs);
  }
}

// --- rank 0: HTTP --------------------------------------------------------------

class Server {
 public:
  Server(const ServeOptions& o, pipeline::Pipeline& pipe, pipeline::Pipeline& validator,
         parallel::Mesh& mesh, std::string model_id)
      : o_(o),
        pipe_(pipe),
        validator_(validator),
        mesh_(mesh),
        model_id_(std::move(model_id)),
        queue_(static_cast<size_t>(o.max_queue)),
        groups_(mesh.config().data_parallel_degree) {}

  // Binds, then serves until SIGTERM; returns the exit code.
  int run() {
    httplib::Server svr;
    const size_t threads = static_cast<size_t>(o_.max_queue + groups_ + 8);
    svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    svr.set_payload_max_length(serve::kMaxBodyBytes);
    svr.set_keep_alive_timeout(2);
    svr.set_read_timeout(30);
    svr.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;  // an answer of ours
      const std::string msg =
          res.status == 413 ? "the body is over " + std::to_string(serve::kMaxBodyBytes) +
                                  " bytes: send a smaller request"
          : res.status == 404 ? "no endpoint " + req.method + " " + req.path +
                                    " (POST /generate, POST /v1/images/generations, GET /health, "
                                    "GET /v1/models, GET /metrics)"
                              : "the request could not be read";
      reply_error(res, req.path, res.status, msg);
    });
    svr.set_exception_handler(
        [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
          reply_error(res, req.path, 500, "internal error while answering the request");
        });
    svr.Post("/generate", [this](const httplib::Request& req, httplib::Response& res) {
      post(serve::Endpoint::kGenerate, req, res);
    });
    svr.Post("/v1/images/generations", [this](const httplib::Request& req, httplib::Response& res) {
      post(serve::Endpoint::kImages, req, res);
    });
    svr.Get("/health", [this](const httplib::Request& req, httplib::Response& res) {
      const json body = {{"status", g_stop ? "draining" : "ok"},
                         {"queue_depth", queue_.depth()},
                         {"running", running_.load()},
                         {"model", model_id_},
                         {"ranks", mesh_.world().size()}};
      reply_json(res, req.path, g_stop ? 503 : 200, body);
    });
    svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      const json model = {
          {"id", model_id_}, {"object", "model"}, {"created", started_}, {"owned_by", "xdit"}};
      reply_json(res, req.path, 200, {{"object", "list"}, {"data", json::array({model})}});
    });
    svr.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      metrics_.request(req.path, 200);
      res.set_content(metrics_.prometheus(queue_.depth(), queue_.capacity(), running_.load()),
                      "text/plain; version=0.0.4");
    });

    int port = o_.port;
    if (port == 0) {
      port = svr.bind_to_any_port(o_.host);
      XDIT_CHECK(port > 0, "cannot listen on ", o_.host, " (any port)");
    } else if (!svr.bind_to_port(o_.host, port)) {
      const std::string why = bind_error(o_.host, port);
      XDIT_FAIL(why.empty() ? "cannot listen on " + o_.host + ":" + std::to_string(port) : why);
    }
    raise_backlog(port, 256);
    std::thread http([&] { svr.listen_after_bind(); });
    std::thread drain([&] {  // SIGTERM: queued jobs answered 503 at once
      while (!g_stop && !done_) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (auto& job : queue_.close())
        job->finish(serve::JobResult::error(
            503, "the server is shutting down: the request was not started"));
    });
    // However the loop ends (SIGTERM, or an error that ends the job), the
    // threads are joined before they are destroyed.
    struct Join {
      Server& self;
      httplib::Server& svr;
      std::thread &http, &drain;
      ~Join() {
        self.done_ = true;
        drain.join();
        svr.stop();
        http.join();
      }
    } join{*this, svr, http, drain};
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
    send_command(mesh_.world(), json{{"op", "stop"}}.dump());
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
      std::vector<pipeline::ImageRequest> reqs;
      for (auto& job : jobs) {
        pipeline::ImageRequest r = job->request().image;
        if (Clock::now() > job->deadline()) {
          job->finish(serve::JobResult::error(504, timeout_message()));
          continue;
        }
        try {
          pipe_.validate(r);  // the serving pipeline's word (the validator's already passed)
        } catch (const Error& e) {
          job->finish(serve::JobResult::error(400, e.what()));
          continue;
        }
        runs.push_back(job);
        reqs.push_back(r);
      }
      if (runs.empty()) continue;
      json cmd = {{"op", "run"}, {"requests", json::array()}};
      for (const auto& r : reqs) cmd["requests"].push_back(serve::request_to_json(r));
      send_command(mesh_.world(), cmd.dump());
      running_ = runs.size();
      const auto t0 = Clock::now();
      std::vector<pipeline::ImageResult> results;
      try {
        results = run_round(pipe_, mesh_, reqs);
      } catch (const std::exception& e) {
        // One process: the failure is this request's; answer it and go on.
        // Several: a rank may be inside a collective, so the job ends (main
        // prints the message and aborts every rank).
        for (auto& job : runs) job->finish(serve::JobResult::error(500, e.what()));
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
        jr.request = reqs[i];
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

  void post(serve::Endpoint e, const httplib::Request& req, httplib::Response& res) {
    const auto t0 = Clock::now();
    if (g_stop) return reply_error(res, req.path, 503, "the server is shutting down");
    serve::ServeRequest sr;
    try {
      sr = serve::parse_request(e, req.body);
      if (sr.save_disk_path) {
        std::error_code ec;
        if (!fs::is_directory(*sr.save_disk_path, ec) ||
            ::access(sr.save_disk_path->c_str(), W_OK) != 0)
          throw serve::BadRequest(400, "save_disk_path",
                                  "field 'save_disk_path' must be a folder this server can write "
                                  "into, got '" +
                                      *sr.save_disk_path + "'");
      }
      pipeline::ImageRequest check = sr.image;
      std::lock_guard<std::mutex> lock(validator_mu_);
      validator_.validate(check);  // model, size, layout and memory: before the queue
    } catch (const serve::BadRequest& b) {
      return reply_error(res, req.path, b.status(), b.what(), b.field());
    } catch (const Error& err) {
      return reply_error(res, req.path, 400, err.what());
    }
    auto job = std::make_shared<serve::Job>(
        std::move(sr), t0 + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(o_.request_timeout)));
    switch (queue_.push(job)) {
      case serve::JobQueue::Push::kFull: {
        const double wait =
            std::max(1.0, std::ceil(mean_seconds_.load() * static_cast<double>(queue_.depth() + 1) /
                                    static_cast<double>(groups_)));
        res.set_header("Retry-After", std::to_string(static_cast<int64_t>(wait)));
        return reply_error(res, req.path, 429,
                           "the queue is full (" + std::to_string(queue_.capacity()) +
                               " requests waiting): try again later");
      }
      case serve::JobQueue::Push::kClosed:
        return reply_error(res, req.path, 503, "the server is shutting down");
      case serve::JobQueue::Push::kQueued:
        break;
    }
    std::optional<serve::JobResult> r = job->wait();
    if (!r) return reply_error(res, req.path, 504, timeout_message());
    if (r->status != 200) return reply_error(res, req.path, r->status, r->message, r->field);
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    const serve::ServeRequest& asked = job->request();
    std::vector<std::vector<uint8_t>> pngs;
    for (const auto& rgb : r->rgb)
      pngs.push_back(io::encode_png(r->width, r->height, rgb, png_text(r->request)));
    if (e == serve::Endpoint::kImages) {
      json data = json::array();
      for (const auto& png : pngs) data.push_back({{"b64_json", serve::base64_encode(png)}});
      return reply_json(res, req.path, 200,
                        {{"created", static_cast<int64_t>(std::time(nullptr))}, {"data", data}});
    }
    char took[32];
    std::snprintf(took, sizeof took, "%.2f sec", elapsed);
    json body = {{"message", "Image generated successfully"}, {"elapsed_time", took}};
    if (asked.save_disk_path) {
      const fs::path path =
          fs::path(*asked.save_disk_path) /
          ("xdit_" + std::to_string(std::time(nullptr)) + "_" + std::to_string(::getpid()) + "_" +
           std::to_string(saved_.fetch_add(1)) + ".png");
      // Written beside and renamed into place: never a partial PNG under its
      // name. (Not io::OutputFile: its signal cleanup would take SIGTERM
      // from the server's own handler.)
      const fs::path tmp = path.string() + ".partial";
      std::error_code ec;
      {
        std::ofstream f(tmp, std::ios::binary);
        f.write(reinterpret_cast<const char*>(pngs[0].data()),
                static_cast<std::streamsize>(pngs[0].size()));
        if (!f.good()) ec = std::make_error_code(std::errc::io_error);
      }
      if (!ec) fs::rename(tmp, path, ec);
      if (ec) {
        fs::remove(tmp, ec);
        return reply_error(res, req.path, 500, "cannot write " + path.string(), "save_disk_path");
      }
      body["output"] = path.string();
      body["save_to_disk"] = true;
    } else {
      body["output"] = serve::base64_encode(pngs[0]);
      body["save_to_disk"] = false;
    }
    reply_json(res, req.path, 200, body);
  }

  std::map<std::string, std::string> png_text(const pipeline::ImageRequest& r) const {
    ImageMetadata m;
    m.prompt = r.prompts.empty() ? "" : r.prompts[0];
    m.negative_prompt = r.negative_prompt.value_or("");
    m.seed = r.seed;
    m.steps = r.num_inference_steps;
    m.width = r.width;
    m.height = r.height;
    m.guidance = r.guidance_scale;
    m.model = model_id_;
    m.software_note = "serve";
    return png_metadata(m);
  }

  void reply_json(httplib::Response& res, const std::string& path, int status, const json& body) {
    // Paths outside the API count as one label: a client must not grow the
    // metrics with paths of its choosing.
    static const char* const kPaths[] = {"/generate", "/v1/images/generations", "/health",
                                         "/v1/models", "/metrics"};
    bool known = false;
    for (const char* k : kPaths) known = known || path == k;
    metrics_.request(known ? path : "other", status);
    res.status = status;
    res.set_content(body.dump(), "application/json");
  }
  void reply_error(httplib::Response& res, const std::string& path, int status,
                   const std::string& message, const std::string& field = "") {
    reply_json(res, path, status, serve::error_body(status, message, field));
  }

  using Clock = serve::Clock;
  const ServeOptions& o_;
  pipeline::Pipeline& pipe_;
  pipeline::Pipeline& validator_;
  std::mutex validator_mu_;
  parallel::Mesh& mesh_;
  const std::string model_id_;
  serve::JobQueue queue_;
  serve::Metrics metrics_;
  const int groups_;
  const int64_t started_ = static_cast<int64_t>(std::time(nullptr));
  std::atomic<size_t> running_{0};
  std::atomic<double> mean_seconds_{0};
  std::atomic<uint64_t> saved_{0};
  std::atomic<bool> done_{false};
  size_t served_ = 0;
};

int run_serve(ServeOptions& o) {
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
  // Each waiting request holds one of the HTTP threads (cpp-httplib's model).
  XDIT_CHECK(o.max_queue >= 1 && o.max_queue <= 1024, "--max_queue must be 1 … 1024, got ",
             o.max_queue);
  XDIT_CHECK(std::isfinite(o.request_timeout) && o.request_timeout > 0,
             "--request_timeout must be a positive number of seconds, got ", o.request_timeout);
  XDIT_CHECK(o.port >= 0 && o.port <= 65535, "--port must be 0 … 65535, got ", o.port);
  const JobStart job = start_job(o.threads, o.device, o.par);
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
    XDIT_WARN("no --model given: serving the built-in tiny PixArt model (random weights)");
  }
  const io::ModelRef model = io::resolve_model(o.model);
  pipeline::Pipeline pipe(model.folder, dtype);
  pipe.set_mesh(&mesh);
  pipe.set_device(device);
  pipe.set_keep_text_encoder(true);  // resident: encoders stay loaded between requests
  // The model's default request against this layout, before the weights load.
  pipeline::ImageRequest probe;
  probe.prompts = {"probe"};
  try {
    pipe.validate(probe);
  } catch (const Error& e) {
    XDIT_FAIL("this model cannot serve its default request (", probe.width, "x", probe.height,
              ") on this parallel layout: ", e.what());
  }
  pipe.load();
  pipe.set_weights_resident(true);
  w.barrier();  // every rank loaded: only now does rank 0 listen
  if (w.rank() != 0) return follow(pipe, mesh);
  pipeline::Pipeline validator(model.folder, dtype);  // configs and headers: checks requests
  validator.set_mesh(&mesh);
  validator.set_device(device);  // requests' memory is checked against the GPU's
  validator.set_weights_resident(true);
  const std::string id = model.from_cache() ? model.id : fs::path(model.folder).filename().string();
  Server server(o, pipe, validator, mesh, id);
  return server.run();
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
  s->add_option("--dtype", o->dtype, "compute type: bf16 or f32")->capture_default_str();
  s->add_option("--device", o->device, "cpu, or cuda[:N] (a CUDA build on a machine with a GPU)")
      ->capture_default_str();
  s->add_option("--threads", o->threads,
                "OpenMP threads per process (default: the cores, shared among local ranks)")
      ->check(thread_count());
  s->add_flag("--openapi", o->openapi, "print the service's OpenAPI document and exit");
  add_parallel_options(s, o->par);
  return [o] { return run_serve(*o); };
}

}  // namespace xdit::app
