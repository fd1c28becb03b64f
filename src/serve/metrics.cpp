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
  // A metric's HELP and TYPE lines, and a metric of one unlabelled sample.
  auto header = [&](const char* name, const char* type, const char* help) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  };
  auto single = [&](const char* name, const char* type, const char* help, auto value) {
    header(name, type, help);
    o << name << " " << value << "\n";
  };
  header("xdit_requests_total", "counter", "HTTP requests answered, by endpoint and status code.");
  for (const auto& [key, n] : requests_)
    o << "xdit_requests_total{endpoint=\"" << key.first << "\",status=\"" << key.second << "\"} "
      << n << "\n";
  single("xdit_queue_depth", "gauge", "Requests waiting in the queue.", queue_depth);
  single("xdit_queue_capacity", "gauge", "The queue's bound (--max_queue).", capacity);
  single("xdit_running_requests", "gauge", "Requests being generated now.", running);
  header("xdit_stage_seconds_total", "counter",
         "Seconds spent per pipeline stage (rank 0's group).");
  for (const auto& [stage, sec] :
       {std::pair{"text_encoding", text_s_}, std::pair{"denoising", denoise_s_},
        std::pair{"decoding", decode_s_}, std::pair{"request", total_s_}})
    o << "xdit_stage_seconds_total{stage=\"" << stage << "\"} " << sec << "\n";
  single("xdit_generations_total", "counter", "Requests generated.", generations_);
  single("xdit_images_total", "counter", "Images generated.", images_);
  single("xdit_images_per_second", "gauge", "Images generated per second over the last minute.",
         window > 0 ? static_cast<double>(last_minute) / window : 0);
  single("process_resident_memory_bytes", "gauge",
         "Resident memory of the serving process (rank 0).", current_rss_bytes());
  single("xdit_peak_resident_memory_bytes", "gauge", "The most resident memory it has held.",
         peak_rss_bytes());
  single("xdit_uptime_seconds", "gauge", "Seconds since the server started.", up);
  return o.str();
}

}  // namespace xdit::serve
