// Process memory figures from /proc (Linux).
#pragma once

#include <cstddef>
#include <string>

namespace xdit {

size_t current_rss_bytes();  // VmRSS
size_t peak_rss_bytes();     // VmHWM
// Sets VmHWM back to VmRSS (writes 5 to /proc/self/clear_refs, Linux 4.0+),
// so that peak_rss_bytes() measures from now; false where it cannot.
bool reset_peak_rss();

// Memory this process can still use: the smallest of MemAvailable
// (/proc/meminfo), the cgroup's limit less its usage, and RLIMIT_AS less the
// current size. 0 when none can be read. `source` (optional) names which
// limit bound it, for messages.
size_t available_memory_bytes(std::string* source = nullptr);

}  // namespace xdit
