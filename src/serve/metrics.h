// The service's counters, rendered in Prometheus' text format for
// GET /metrics: requests by endpoint and status, queue depth, seconds per
// pipeline stage, images generated and images per second.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace xdit::serve {

class Metrics {
 public:
  Metrics();
  void request(const std::string& endpoint, int status);
  // One finished generation of `images` images and its stages' seconds.
  void generation(int64_t images, double text_s, double denoise_s, double decode_s, double total_s);
  // The exposition text; `queue_depth`, `capacity`, `running` are gauges of now.
  std::string prometheus(size_t queue_depth, size_t capacity, size_t running) const;

 private:
  using Clock = std::chrono::steady_clock;
  mutable std::mutex mu_;
  Clock::time_point start_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t generations_ = 0, images_ = 0;
  double text_s_ = 0, denoise_s_ = 0, decode_s_ = 0, total_s_ = 0;
  mutable std::deque<std::pair<Clock::time_point, int64_t>> recent_;  // the last minute's images
};

}  // namespace xdit::serve
