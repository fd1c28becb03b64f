#include "core/memory.h"

#include <sys/resource.h>

#include <fstream>
#include <limits>
#include <string>

namespace xdit {

namespace {
size_t status_kb(const char* file, const char* key) {
  std::ifstream f(file);
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line))
    if (line.rfind(k, 0) == 0) return std::stoull(line.substr(k.size())) * 1024;
  return 0;
}

// The first number in a file ("max" or a missing file reads as 0).
size_t file_number(const char* path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s.empty() || s[0] < '0' || s[0] > '9') return 0;
  return std::stoull(s);
}
}  // namespace

size_t current_rss_bytes() {
  return status_kb("/proc/self/status", "VmRSS");
}
size_t peak_rss_bytes() {
  return status_kb("/proc/self/status", "VmHWM");
}

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

size_t available_memory_bytes(std::string* source) {
  size_t best = std::numeric_limits<size_t>::max();
  std::string why;
  auto consider = [&](size_t v, const char* what) {
    if (v > 0 && v < best) best = v, why = what;
  };
  consider(status_kb("/proc/meminfo", "MemAvailable"), "MemAvailable in /proc/meminfo");
  // cgroup v2, then v1 (a container's limit can be far below the machine's).
  for (const auto& [limit, usage] :
       {std::pair{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
        {"/sys/fs/cgroup/memory/memory.limit_in_bytes",
         "/sys/fs/cgroup/memory/memory.usage_in_bytes"}}) {
    const size_t l = file_number(limit), u = file_number(usage);
    if (l > 0 && l < (size_t{1} << 60)) consider(l > u ? l - u : 1, "the cgroup memory limit");
  }
  rlimit r{};
  if (::getrlimit(RLIMIT_AS, &r) == 0 && r.rlim_cur != RLIM_INFINITY) {
    const size_t vm = status_kb("/proc/self/status", "VmSize");
    consider(r.rlim_cur > vm ? r.rlim_cur - vm : 1, "the address-space limit (ulimit -v)");
  }
  if (best == std::numeric_limits<size_t>::max()) return 0;
  if (source != nullptr) *source = why;
  return best;
}

}  // namespace xdit
