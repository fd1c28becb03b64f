#include "serve/metrics.h"

#include <sstream>

#include "core/memory.h"

namespace xdit::serve {

namespace {
constexpr std::chrono::seconds kWindow{60};
}

Metrics::Metrics() : start_(Clock::now()) {}

void Metrics::request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::generation(int64_t images, double text_s, double denoise_s, double decode_s,
                         double total_s) {
  std::lock_guard<std::mutex> lock(mu_);
  ++generations_;
  images_ += static_cast<uint64_t>(images);
  text_s_ += text_s;
  denoise_s_ += denoise_s;
  decode_s_ += decode_s;
  total_s_ += total_s;
  recent_.emplace_back(Clock::now(), images);
}

std::string Metrics::prometheus(size_t queue_depth, size_t capacity, size_t running) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  while (!recent_.empty() && now - recent_.front().first > kWindow) recent_.pop_front();
  int64_t last_minute = 0;
  for (const auto& [t, n] : recent_) last_minute += n;
  const double up = std::chrono::duration<double>(now - start_).count();
  const double window = std::min(up, static_cast<double>(kWindow.count()));
  std::ostringstream o;
  o << "# HELP xdit_requests_total HTTP requests answered, by endpoint and status code.\n"
    << "# TYPE xdit_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    o << "xdit_requests_total{endpoint=\"" << key.first << "\",status=\"" << key.second << "\"} "
      << n << "\n";
  o << "# HELP xdit_queue_depth Requests waiting in the queue.\n"
    << "# TYPE xdit_queue_depth gauge\n"
    << "xdit_queue_depth " << queue_depth << "\n"
    << "# HELP xdit_queue_capacity The queue's bound (--max_queue).\n"
    << "# TYPE xdit_queue_capacity gauge\n"
    << "xdit_queue_capacity " << capacity << "\n"
    << "# HELP xdit_running_requests Requests being generated now.\n"
    << "# TYPE xdit_running_requests gauge\n"
    << "xdit_running_requests " << running << "\n"
    << "# HELP xdit_stage_seconds_total Seconds spent per pipeline stage (rank 0's group).\n"
    << "# TYPE xdit_stage_seconds_total counter\n"
    << "xdit_stage_seconds_total{stage=\"text_encoding\"} " << text_s_ << "\n"
    << "xdit_stage_seconds_total{stage=\"denoising\"} " << denoise_s_ << "\n"
    << "xdit_stage_seconds_total{stage=\"decoding\"} " << decode_s_ << "\n"
    << "xdit_stage_seconds_total{stage=\"request\"} " << total_s_ << "\n"
    << "# HELP xdit_generations_total Requests generated.\n"
    << "# TYPE xdit_generations_total counter\n"
    << "xdit_generations_total " << generations_ << "\n"
    << "# HELP xdit_images_total Images generated.\n"
    << "# TYPE xdit_images_total counter\n"
    << "xdit_images_total " << images_ << "\n"
    << "# HELP xdit_images_per_second Images generated per second over the last minute.\n"
    << "# TYPE xdit_images_per_second gauge\n"
    << "xdit_images_per_second " << (window > 0 ? static_cast<double>(last_minute) / window : 0)
    << "\n"
    << "# HELP process_resident_memory_bytes Resident memory of the serving process (rank 0).\n"
    << "# TYPE process_resident_memory_bytes gauge\n"
    << "process_resident_memory_bytes " << current_rss_bytes() << "\n"
    << "# HELP xdit_peak_resident_memory_bytes The most resident memory it has held.\n"
    << "# TYPE xdit_peak_resident_memory_bytes gauge\n"
    << "xdit_peak_resident_memory_bytes " << peak_rss_bytes() << "\n"
    << "# HELP xdit_uptime_seconds Seconds since the server started.\n"
    << "# TYPE xdit_uptime_seconds gauge\n"
    << "xdit_uptime_seconds " << up << "\n";
  return o.str();
}

}  // namespace xdit::serve
