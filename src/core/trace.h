// A Chrome-trace timeline (chrome://tracing, Perfetto): complete events with
// a name, a category, the rank as the process and a start/duration in µs.
// Off unless enabled; a Span costs one clock read when off.
#pragma once

#include <chrono>
#include <string>

namespace xdit::trace {

void enable(int rank);
bool enabled();
// This rank's events as comma-separated JSON objects (no brackets).
std::string events_json();

class Span {
 public:
  Span(std::string name, const char* category);
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  std::string name_;
  const char* category_;
  std::chrono::steady_clock::time_point start_;
  bool on_;
};

}  // namespace xdit::trace
