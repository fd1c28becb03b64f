// Running `xdit serve` from tests: the process (directly or under mpirun)
// with its stderr in a file, the port it printed in its start-up line, an
// HTTP client on loopback, and the images of its answers decoded.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "cli_util.h"
#include "io/png.h"
#include "serve/startup_line.h"

namespace xdit::test {

// A TCP connection to 127.0.0.1:port (raw, for clients that misbehave):
// the socket, or -1 when it could not be made or connected.
inline int loopback_connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// RFC 4648 base64 → bytes (the tests' reading of the service's images).
inline std::vector<uint8_t> base64_decode(const std::string& s) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::vector<uint8_t> out;
  uint32_t acc = 0;
  int bits = 0;
  for (const char c : s) {
    if (c == '=') break;
    const int v = value(c);
    if (v < 0) ADD_FAILURE() << "not base64: '" << c << "'";
    acc = (acc << 6) | static_cast<uint32_t>(v & 63);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>((acc >> bits) & 0xff));
    }
  }
  return out;
}

inline io::PngImage png_of_base64(const std::string& b64) {
  const std::vector<uint8_t> bytes = base64_decode(b64);
  return io::decode_png(bytes.data(), bytes.size(), "a served image");
}

inline int max_pixel_diff(const io::PngImage& a, const io::PngImage& b) {
  EXPECT_EQ(a.width, b.width);
  EXPECT_EQ(a.height, b.height);
  if (a.rgb.size() != b.rgb.size()) return 256;
  int worst = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<int>(a.rgb[i]) - b.rgb[i]));
  return worst;
}

// The environment every test run of xdit gets.
inline std::string xdit_env() {
  return "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
         "XDIT_QUIET=1 ";
}

#ifdef MPIEXEC
inline std::string mpirun_prefix(int np) {
  return std::string(MPIEXEC) + " -np " + std::to_string(np) +
         " --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none ";
}
#endif

class ServeProcess {
 public:
  // Starts `xdit serve [--port 0] ARGS` (on `np` ranks under mpirun when np > 0)
  // and waits for its start-up line (or its end).
  ServeProcess(const std::string& args, const std::filesystem::path& dir, int np = 0,
               const std::string& env = "")
      : err_((dir / ("serve_" + std::to_string(counter()++) + ".log")).string()) {
    std::string cmd = xdit_env() + env + " timeout 300 ";
#ifdef MPIEXEC
    if (np > 0) cmd += mpirun_prefix(np);
#else
    EXPECT_EQ(np, 0) << "this test binary has no MPIEXEC";
#endif
    // --port 0 (any free port) unless ARGS names one.
    const std::string port = args.find("--port ") == std::string::npos ? "--port 0 " : "";
    cmd += std::string("'") + XDIT_BINARY + "' serve " + port + args;
    proc_ = spawn_command(cmd, err_);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < until) {
      int pid = 0;
      if (serve::parse_startup_line(read_text(err_), &port_, &pid)) {
        server_pid_ = pid;
        return;
      }
      int status = 0;
      if (::waitpid(proc_.pid, &status, WNOHANG) == proc_.pid) {
        exited_ = true;
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~ServeProcess() {
    if (!exited_) {
      ::kill(proc_.pid, SIGKILL);
      ::waitpid(proc_.pid, nullptr, 0);
    }
  }

  bool listening() const {
    return port_ > 0;
  }
  int port() const {
    return port_;
  }
  // The serving process (rank 0).
  pid_t pid() const {
    return server_pid_;
  }
  std::string log() const {
    return read_text(err_);
  }
  // When it ended before listening: its exit status.
  bool exited() const {
    return exited_;
  }
  int exit_code() const {
    return code_;
  }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(120, 0);
    c.set_write_timeout(60, 0);
    c.set_connection_timeout(10, 0);
    return c;
  }

  // Waits for the job to end by itself.
  CommandResult wait() {
    if (exited_) return {code_, 0, log()};
    exited_ = true;
    return wait_command(proc_);
  }

  // Sends `sig` to the serving process (rank 0, the pid of its start-up
  // line) and waits for the whole job's end.
  CommandResult stop(int sig = SIGTERM) {
    if (exited_) return {code_, 0, log()};
    ::kill(server_pid_ > 0 ? server_pid_ : proc_.pid, sig);
    exited_ = true;
    return wait_command(proc_);
  }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::string err_;
  Spawned proc_;
  int port_ = 0;
  pid_t server_pid_ = 0;
  bool exited_ = false;
  int code_ = 0;
};

// POSTs `body` as JSON; the status and the parsed body (null when none).
struct Reply {
  int status = 0;
  nlohmann::json body;
  std::string retry_after;
};
inline Reply post_json(httplib::Client& c, const std::string& path, const std::string& body) {
  Reply r;
  auto res = c.Post(path.c_str(), body, "application/json");
  if (!res) return r;  // status 0: no answer
  r.status = res->status;
  r.body = nlohmann::json::parse(res->body, nullptr, false);
  if (res->has_header("Retry-After")) r.retry_after = res->get_header_value("Retry-After");
  return r;
}

// The fixture of the serve tests: a fresh folder, and `xdit generate` for
// the images the service must equal.
class ServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_test_dir("xdit_serve_");
    // A client still writing a body the server refused (413 at the header)
    // gets EPIPE, not a signal that ends the test.
    ::signal(SIGPIPE, SIG_IGN);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }

  // `xdit generate ARGS -o NAME` (one process) → its PNG; several prompts
  // write NAME_0.png, NAME_1.png, ... and return nothing.
  io::PngImage generate(const std::string& args, const std::string& name) const {
    const auto r = run_command(
        xdit_env() + "'" + XDIT_BINARY + "' generate " + args + " -o '" + path(name) + "'",
        path("generate.log"));
    EXPECT_EQ(r.code, 0) << r.err;
    return std::filesystem::exists(path(name)) ? io::read_png(path(name)) : io::PngImage{};
  }

  std::filesystem::path dir_;
};

}  // namespace xdit::test
