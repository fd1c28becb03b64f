#include "core/memory.h"

#include <fstream>
#include <string>

namespace xdit {

namespace {
size_t status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line))
    if (line.rfind(k, 0) == 0) return std::stoull(line.substr(k.size())) * 1024;
  return 0;
}
}  // namespace

size_t current_rss_bytes() {
  return status_kb("VmRSS");
}
size_t peak_rss_bytes() {
  return status_kb("VmHWM");
}

}  // namespace xdit
