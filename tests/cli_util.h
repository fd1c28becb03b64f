// Running the xdit binary from tests: a shell command line with its stderr
// captured, its exit status or signal, and what it cost (wall and CPU time,
// peak memory, from wait4's rusage of the process itself: the command is
// exec'd by the shell, not forked).
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace xdit::test {

struct CommandResult {
  int code = -1;    // exit status, or 128 + signal
  int signal = 0;   // the signal that ended it, 0 when it exited
  std::string err;  // what it wrote to stderr
  double wall_seconds = 0, cpu_seconds = 0;
  double max_rss_mb = 0;
};

// A command running in the background.
struct Spawned {
  pid_t pid = -1;
  std::string err_file;
  std::chrono::steady_clock::time_point start;
};

// Starts `sh -c "exec COMMAND 2>ERR_FILE"` (stdout to /dev/null).
inline Spawned spawn_command(const std::string& command, const std::string& err_file) {
  Spawned s{-1, err_file, std::chrono::steady_clock::now()};
  const std::string line = "exec " + command + " >/dev/null 2>'" + err_file + "'";
  s.pid = ::fork();
  if (s.pid == 0) {
    // Default dispositions, whatever the test runner inherited (a runner
    // started in the background may ignore SIGINT, and exec keeps that).
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
    ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return s;
}

inline CommandResult wait_command(const Spawned& s) {
  CommandResult r;
  int status = 0;
  rusage ru{};
  ::wait4(s.pid, &status, 0, &ru);
  r.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - s.start).count();
  r.cpu_seconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                  1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  r.max_rss_mb = static_cast<double>(ru.ru_maxrss) / 1024.0;
  if (WIFEXITED(status)) {
    r.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
    r.code = 128 + r.signal;
  }
  std::ifstream in(s.err_file);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  return r;
}

inline CommandResult run_command(const std::string& command, const std::string& err_file) {
  return wait_command(spawn_command(command, err_file));
}

// A fresh folder per test under the system's temporary folder, removed after.
// The JSON objects of a file of one per line (a bench's --json rows),
// other lines skipped.
inline std::vector<nlohmann::json> json_lines(const std::filesystem::path& file) {
  std::vector<nlohmann::json> rows;
  std::ifstream lines(file);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] == '{') rows.push_back(nlohmann::json::parse(line));
  return rows;
}

inline std::filesystem::path make_test_dir(const std::string& prefix) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() /
      (prefix + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// Writes a NaN over the first value of the f32 tensor `tensor`, in whichever
// safetensors file of `folder` holds it (a damaged model for the tests).
// Returns false when no file holds it.
inline bool poison_f32(const std::filesystem::path& folder, const std::string& tensor) {
  for (const auto& e : std::filesystem::directory_iterator(folder)) {
    if (e.path().extension() != ".safetensors") continue;
    size_t begin = 0;
    {
      io::SafeTensorsFile f(e.path().string());
      if (!f.contains(tensor) || f.entries().at(tensor).dtype != "F32") continue;
      begin = f.entries().at(tensor).begin;
    }
    std::fstream io(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    uint64_t header = 0;
    io.read(reinterpret_cast<char*>(&header), 8);
    io.seekp(static_cast<std::streamoff>(8 + header + begin));
    const float nan = __builtin_nanf("");
    io.write(reinterpret_cast<const char*>(&nan), 4);
    return io.good();
  }
  return false;
}

}  // namespace xdit::test
