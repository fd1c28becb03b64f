// Minimal logging to stderr. XDIT_VERBOSE=1 enables debug lines (kernel choices,
// primitive creation); info lines always print unless XDIT_QUIET=1.
#pragma once

#include <string>

#include "core/error.h"

namespace xdit {

enum class LogLevel { kDebug, kInfo, kWarn };

bool log_enabled(LogLevel level);
void log_line(LogLevel level, const std::string& line);
// In a multi-rank job only rank 0 prints info and warnings (set once at start).
void set_log_rank(int rank, int size);
// "" in a single-process run, "[rank 3/4] " otherwise: prefixes error lines.
std::string rank_prefix();

}  // namespace xdit

#define XDIT_LOG(level, ...)                                                                      \
  do {                                                                                            \
    if (::xdit::log_enabled(level)) ::xdit::log_line(level, ::xdit::detail::concat(__VA_ARGS__)); \
  } while (0)
#define XDIT_DEBUG(...) XDIT_LOG(::xdit::LogLevel::kDebug, __VA_ARGS__)
#define XDIT_INFO(...) XDIT_LOG(::xdit::LogLevel::kInfo, __VA_ARGS__)
#define XDIT_WARN(...) XDIT_LOG(::xdit::LogLevel::kWarn, __VA_ARGS__)
