#include "core/trace.h"

#include <mutex>
#include <sstream>

namespace xdit::trace {

namespace {
bool g_on = false;
int g_rank = 0;
std::mutex g_mu;
std::ostringstream g_events;
bool g_first = true;
const auto g_t0 = std::chrono::steady_clock::now();

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}
}  // namespace

void enable(int rank) {
  g_on = true;
  g_rank = rank;
}

bool enabled() {
  return g_on;
}

std::string events_json() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_events.str();
}

Span::Span(std::string name, const char* category)
    : name_(std::move(name)),
      category_(category),
      start_(std::chrono::steady_clock::now()),
      on_(g_on) {}

Span::~Span() {
  if (!on_) return;
  const auto end = std::chrono::steady_clock::now();
  const auto us = [](auto d) {
    return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  };
  std::lock_guard<std::mutex> lock(g_mu);
  g_events << (g_first ? "" : ",\n") << "{\"name\":\"" << escape(name_) << "\",\"cat\":\""
           << category_ << "\",\"ph\":\"X\",\"pid\":" << g_rank
           << ",\"tid\":0,\"ts\":" << us(start_ - g_t0) << ",\"dur\":" << us(end - start_) << "}";
  g_first = false;
}

}  // namespace xdit::trace
