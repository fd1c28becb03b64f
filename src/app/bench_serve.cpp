// xdit bench serve: a load benchmark of `xdit serve`. Starts the server
// (this binary) on a free loopback port, sends a mix of requests from
// several clients (both endpoints, sizes, steps, n, and 10% malformed
// bodies), and reports throughput, latency percentiles and the server's
// resident memory after the warm-up and at the end (it must not grow).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "app/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "serve/startup_line.h"

namespace xdit::app {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The server: this binary's `serve` in a child process (under mpirun when
// ranks > 1).
struct ServerProcess {
  pid_t pid = -1;         // the child (mpirun, or the server itself)
  pid_t server_pid = -1;  // the serving process (rank 0): SIGTERM goes there
  int port = 0;
};

ServerProcess start_server(const std::vector<std::string>& args, int ranks,
                           const std::string& log) {
  ServerProcess s;
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::vector<std::string> argv;
  if (ranks > 1 && ::geteuid() == 0) {  // OpenMPI refuses root unless both are set (as launch)
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  if (ranks > 1)
    argv = {"mpirun", "-np", std::to_string(ranks), "--oversubscribe", "--bind-to", "none"};
  argv.insert(argv.end(), {exe, "serve", "--port", "0"});
  argv.insert(argv.end(), args.begin(), args.end());
  s.pid = ::fork();
  XDIT_CHECK(s.pid >= 0, "cannot start the server: fork failed");
  if (s.pid == 0) {
    if (std::freopen(log.c_str(), "w", stderr) == nullptr) ::_exit(127);
    std::vector<char*> a;
    for (auto& x : argv) a.push_back(x.data());
    a.push_back(nullptr);
    ::execvp(a[0], a.data());
    ::_exit(127);
  }
  const auto until = Clock::now() + std::chrono::seconds(300);
  while (Clock::now() < until) {
    const std::string text = read_all(log);
    if (serve::parse_startup_line(text, &s.port, &s.server_pid)) return s;
    int status = 0;
    if (::waitpid(s.pid, &status, WNOHANG) == s.pid)
      XDIT_FAIL("the server ended before listening: ", text);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(s.pid, SIGKILL);
  XDIT_FAIL("the server did not start listening within 300 s");
}

// Request k of the mix: {path, body, malformed}.
struct Planned {
  std::string path, body;
  bool malformed = false;
};
Planned plan(int k) {
  if (k % 10 == 3) {  // 10% malformed, several classes
    static const char* bad[] = {R"({"prompt": 7})", R"({"prompt": "x", "height": -8})",
                                "{\"prompt\"", R"({"prompt": "x", "unknown": 1})",
                                R"({"num_inference_steps": 2})"};
    return {"/generate", bad[(k / 10) % 5], true};
  }
  const int64_t sizes[] = {64, 96, 128};
  const int64_t h = sizes[k % 3], w = sizes[(k / 3) % 3];
  const int steps = 1 + k % 3;
  if (k % 2 == 0)
    return {"/generate",
            json{{"prompt", "load " + std::to_string(k)},
                 {"seed", k},
                 {"height", h},
                 {"width", w},
                 {"num_inference_steps", steps}}
                .dump(),
            false};
  return {"/v1/images/generations",
          json{{"prompt", "load " + std::to_string(k)},
               {"seed", k},
               {"n", 1 + (k / 2) % 2},
               {"size", std::to_string(w) + "x" + std::to_string(h)},
               {"num_inference_steps", steps}}
              .dump(),
          false};
}

struct Tally {
  std::mutex mu;
  std::vector<double> latencies;  // good requests, seconds
  int ok = 0, bad_400 = 0, other = 0, images = 0;
};

void run_requests(int port, int first, int count, int clients, Tally& t) {
  std::atomic<int> next{first};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&] {
      httplib::Client cli("127.0.0.1", port);
      cli.set_read_timeout(600, 0);
      for (int k; (k = next++) < first + count;) {
        const Planned p = plan(k);
        const auto t0 = Clock::now();
        auto res = cli.Post(p.path.c_str(), p.body, "application/json");
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        std::lock_guard<std::mutex> lock(t.mu);
        if (!res) {
          t.other++;
          continue;
        }
        if (p.malformed) {
          (res->status == 400 ? t.bad_400 : t.other)++;
          continue;
        }
        if (res->status != 200) {
          t.other++;
          continue;
        }
        t.ok++;
        t.latencies.push_back(s);
        const json body = json::parse(res->body, nullptr, false);
        t.images += body.contains("data") ? static_cast<int>(body["data"].size()) : 1;
      }
    });
  for (auto& th : threads) th.join();
}

// A gauge from the server's /metrics.
double metric(int port, const std::string& name) {
  httplib::Client cli("127.0.0.1", port);
  auto res = cli.Get("/metrics");
  XDIT_CHECK(res && res->status == 200, "the server's /metrics did not answer");
  std::istringstream lines(res->body);
  for (std::string l; std::getline(lines, l);)
    if (l.rfind(name + " ", 0) == 0) return std::stod(l.substr(name.size() + 1));
  XDIT_FAIL("no ", name, " in /metrics");
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  return v[i];
}

}  // namespace

int run_bench_serve(const std::string& model, int requests, int clients, int threads, int ranks,
                    const std::vector<std::string>& serve_args) {
  XDIT_CHECK(requests >= 20, "--requests must be at least 20 (a tenth is the warm-up)");
  XDIT_CHECK(clients >= 1, "--clients must be at least 1");
  const std::string m = model.empty() ? default_model_dir() : model;
  const std::string log =
      (fs::temp_directory_path() / ("xdit_bench_serve_" + std::to_string(::getpid()) + ".log"))
          .string();
  std::vector<std::string> args = {"--model", m, "--max_queue", std::to_string(2 * clients)};
  if (threads > 0) args.insert(args.end(), {"--threads", std::to_string(threads)});
  args.insert(args.end(), serve_args.begin(), serve_args.end());
  ServerProcess s = start_server(args, ranks, log);
  const int warm = requests / 10;
  Tally t;
  run_requests(s.port, 0, warm, clients, t);
  const double rss_warm = metric(s.port, "process_resident_memory_bytes");
  // The timed requests in nine parts, the server's RSS read after each.
  Tally timed;
  std::vector<double> rss;
  double wall = 0;
  for (int part = 0; part < 9; ++part) {
    const int b = warm + (requests - warm) * part / 9,
              e = warm + (requests - warm) * (part + 1) / 9;
    const auto t0 = Clock::now();
    run_requests(s.port, b, e - b, clients, timed);
    wall += std::chrono::duration<double>(Clock::now() - t0).count();
    rss.push_back(metric(s.port, "process_resident_memory_bytes"));
  }
  const double rss_end = rss.back();
  const double rss_max = *std::max_element(rss.begin(), rss.end());
  const double rss_peak = metric(s.port, "xdit_peak_resident_memory_bytes");
  ::kill(s.server_pid, SIGTERM);
  int status = 0;
  ::waitpid(s.pid, &status, 0);
  const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  fs::remove(log);

  const int n = requests - warm;
  const double growth = rss_warm > 0 ? rss_end / rss_warm - 1 : 0;
  std::string layout;
  for (const auto& a : serve_args) layout += " " + a;
  std::cout << std::fixed << std::setprecision(3) << "xdit bench serve: " << m << ", " << ranks
            << " process" << (ranks == 1 ? "" : "es") << layout << ", " << clients << " clients, "
            << requests << " requests (" << warm << " warm-up, then timed), 10% malformed\n"
            << "  timed requests   " << n << ": " << timed.ok << " images answered 200, "
            << timed.bad_400 << " malformed answered 400, " << timed.other << " other\n"
            << "  throughput       " << std::setprecision(1) << timed.ok / wall << " requests/s, "
            << timed.images / wall << " images/s (" << std::setprecision(2) << wall << " s)\n"
            << "  latency (200s)   p50 " << std::setprecision(3) << percentile(timed.latencies, 0.5)
            << " s, p99 " << percentile(timed.latencies, 0.99) << " s, max "
            << percentile(timed.latencies, 1.0) << " s\n"
            << "  server RSS       " << std::setprecision(1) << rss_warm / 1e6
            << " MB after the warm-up; after each ninth of the timed requests:";
  for (const double r : rss) std::cout << " " << r / 1e6;
  std::cout << " MB (end " << std::showpos << 100 * growth << std::noshowpos << " %, most "
            << rss_max / 1e6 << " MB), peak " << rss_peak / 1e6 << " MB\n"
            << "  shutdown         " << (clean ? "SIGTERM, exit 0" : "NOT clean") << "\n";
  if (rss_max > 1.10 * rss_warm)
    std::cout << "  ! resident memory grew by more than 10% after the warm-up\n";
  return timed.other == 0 && clean ? 0 : 1;
}

}  // namespace xdit::app
