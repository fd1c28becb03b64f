// Process memory figures from /proc (Linux).
#pragma once

#include <cstddef>

namespace xdit {

size_t current_rss_bytes();  // VmRSS
size_t peak_rss_bytes();     // VmHWM

}  // namespace xdit
