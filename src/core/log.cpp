#include "core/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace xdit {

namespace {
bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}
}  // namespace

namespace {
int g_rank = 0, g_size = 1;
}

void set_log_rank(int rank, int size) {
  g_rank = rank;
  g_size = size;
}

std::string rank_prefix() {
  return g_size > 1 ? "[rank " + std::to_string(g_rank) + "/" + std::to_string(g_size) + "] " : "";
}

bool log_enabled(LogLevel level) {
  if (g_rank != 0) return false;
  static const bool verbose = env_flag("XDIT_VERBOSE");
  static const bool quiet = env_flag("XDIT_QUIET");
  switch (level) {
    case LogLevel::kDebug:
      return verbose;
    case LogLevel::kInfo:
      return !quiet;
    case LogLevel::kWarn:
      return true;
  }
  return true;
}

void log_line(LogLevel level, const std::string& line) {
  const char* tag = level == LogLevel::kWarn ? "xdit: warning: " : "xdit: ";
  std::fprintf(stderr, "%s%s\n", tag, line.c_str());
}

}  // namespace xdit
