// xdit serve: rank 0's HTTP service (cpp-httplib).
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

#include "app/png_metadata.h"
#include "app/serve.h"
#include "core/error.h"
#include "core/log.h"
#include "io/png.h"
#include "serve/job_queue.h"
#include "serve/metrics.h"
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
        jr.plan = *plans[i];
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
    std::optional<pipeline::Plan> plan;
    try {
      sr = serve::parse_request(e, req.body);
      if (sr.save_disk_path) o_.output_root->check(*sr.save_disk_path);  // under --output_dir
      std::lock_guard<std::mutex> lock(validator_mu_);
      plan.emplace(validator_.plan(sr.image));  // model, size, layout and memory: before the queue
    } catch (const serve::BadRequest& b) {
      return reply_error(res, req.path, b.status(), b.what(), b.field());
    } catch (const Error& err) {
      return reply_error(res, req.path, 400, err.what());
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
    std::vector<std::vector<uint8_t>> pngs;  // one per frame, prompt-major (an image: per prompt)
    for (const auto& rgb : r->rgb)
      pngs.push_back(io::encode_png(r->width, r->height, rgb, png_text(r->plan)));
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
      // Under --output_dir, links refused, written exclusively and renamed
      // into place (serve/output_root.h).
      try {
        body["output"] = o_.output_root->write(*asked.save_disk_path, pngs[0]);
      } catch (const serve::BadRequest& b) {
        return reply_error(res, req.path, b.status(), b.what(), b.field());
      } catch (const Error& err) {
        return reply_error(res, req.path, 500, err.what(), "save_disk_path");
      }
      body["save_to_disk"] = true;
    } else {
      body["output"] = serve::base64_encode(pngs[0]);
      body["save_to_disk"] = false;
    }
    reply_json(res, req.path, 200, body);
  }

  std::map<std::string, std::string> png_text(const pipeline::PlanFields& r) const {
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

int serve_http(const ServeOptions& o, pipeline::Pipeline& pipe, pipeline::Pipeline& validator,
               parallel::Mesh& mesh, const std::string& model_id) {
  Server server(o, pipe, validator, mesh, model_id);
  return server.run();
}

}  // namespace xdit::app
