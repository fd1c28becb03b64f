#include "serve/job_queue.h"

namespace xdit::serve {

void Job::finish(JobResult r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (result_) return;
    result_ = std::move(r);
  }
  cv_.notify_all();
}

std::optional<JobResult> Job::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_until(lock, deadline_, [&] { return result_.has_value(); })) {
    abandoned_ = true;
    return std::nullopt;
  }
  return std::move(*result_);
}

bool Job::abandoned() const {
  std::lock_guard<std::mutex> lock(mu_);
  return abandoned_;
}

JobQueue::Push JobQueue::push(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return Push::kClosed;
    if (jobs_.size() >= capacity_) return Push::kFull;
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
  return Push::kQueued;
}

std::vector<std::shared_ptr<Job>> JobQueue::take(size_t max, std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<Job>> out;
  const auto until = Clock::now() + wait;
  while (out.empty()) {
    while (!jobs_.empty() && out.size() < max) {
      std::shared_ptr<Job> j = std::move(jobs_.front());
      jobs_.pop_front();
      if (!j->abandoned()) out.push_back(std::move(j));
    }
    if (!out.empty() || closed_) break;
    if (cv_.wait_until(lock, until) == std::cv_status::timeout && jobs_.empty()) break;
  }
  return out;
}

std::vector<std::shared_ptr<Job>> JobQueue::close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  std::vector<std::shared_ptr<Job>> left(jobs_.begin(), jobs_.end());
  jobs_.clear();
  cv_.notify_all();
  return left;
}

size_t JobQueue::depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

bool JobQueue::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

void JobQueue::wake() {
  cv_.notify_all();
}

}  // namespace xdit::serve
