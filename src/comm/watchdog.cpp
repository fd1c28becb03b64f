#include "comm/watchdog.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "io/file.h"

namespace xdit::comm {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<double> g_timeout{0.0};
// The call in progress (nullptr: none) and when it began.
std::atomic<const char*> g_op{nullptr};
std::atomic<int64_t> g_since_ns{0};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// Checks the call in progress a few times per timeout (at least once a
// second); the thread lives as long as the process.
void watch() {
  for (;;) {
    const double limit = g_timeout.load();
    const double poll = limit > 0 ? std::min(1.0, limit / 4) : 1.0;
    std::this_thread::sleep_for(std::chrono::duration<double>(poll));
    const char* op = g_op.load();
    if (limit <= 0 || op == nullptr) continue;
    const double waited = static_cast<double>(now_ns() - g_since_ns.load()) * 1e-9;
    if (waited < limit || g_op.load() != op) continue;
    // One line, then the exit that makes mpirun end the job. MPI_Abort is
    // not called: MPI runs FUNNELED, so only the main thread may call it.
    const std::string line = "xdit: error: " + rank_prefix() + op + " made no progress for " +
                             std::to_string(static_cast<long long>(waited)) +
                             " s (--comm_timeout " + std::to_string(static_cast<long long>(limit)) +
                             " s): another rank is stopped, hung or far behind; ending the job\n";
    if (::write(STDERR_FILENO, line.data(), line.size()) < 0) {
      // nothing more to do: the exit says it
    }
    io::remove_temporaries();  // _Exit runs no destructor: no partial output stays
    std::_Exit(1);
  }
}

}  // namespace

void set_comm_timeout(double seconds) {
  XDIT_CHECK(std::isfinite(seconds) && seconds >= 0 && seconds <= 7 * 24 * 3600.0,
             "--comm_timeout must be from 0 (off) to 604800 seconds (a week), got ", seconds);
  g_timeout.store(seconds);
  static std::once_flag started;
  if (seconds > 0) std::call_once(started, [] { std::thread(watch).detach(); });
}

double comm_timeout() {
  return g_timeout.load();
}

WatchedCall::WatchedCall(const char* op) {
  g_since_ns.store(now_ns());
  g_op.store(op);
}

WatchedCall::~WatchedCall() {
  g_op.store(nullptr);
}

}  // namespace xdit::comm
