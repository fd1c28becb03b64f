// The service's bounded FIFO: HTTP threads push jobs and wait for their
// answer; the serving loop (the main thread of rank 0, the only one that
// talks to the other ranks) takes up to one job per data-parallel group at
// a time. A job whose client stopped waiting (its timeout passed) is
// skipped; a full queue refuses at once (429), a closed one too (503).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/plan.h"
#include "serve/request_schema.h"

namespace xdit::serve {

using Clock = std::chrono::steady_clock;

// What a job's client gets back.
struct JobResult {
  int status = 500;
  std::string message;  // the error's one line (status != 200)
  std::string field;    // the field at fault, when there is one
  int64_t width = 0, height = 0;
  std::vector<std::vector<uint8_t>> rgb;  // status 200: one image per prompt
  double seconds = 0;                     // the generation's
  pipeline::PlanFields plan;              // as it ran (the model's defaults filled in)
  std::string parallel;                   // the layout's label as it ran (parallel_label)
  std::string cache;                      // the step cache and what it did ("" when none)

  static JobResult error(int status, std::string message, std::string field = "") {
    JobResult r;
    r.status = status;
    r.message = std::move(message);
    r.field = std::move(field);
    return r;
  }
};

class Job {
 public:
  // `plan`: the request planned (checked) before it was queued.
  Job(ServeRequest request, Clock::time_point deadline, std::optional<pipeline::Plan> plan = {})
      : request_(std::move(request)),
        plan_(std::move(plan)),
        enqueued_(Clock::now()),
        deadline_(deadline) {}

  const ServeRequest& request() const { return request_; }
  ServeRequest& request() { return request_; }
  const std::optional<pipeline::Plan>& plan() const { return plan_; }
  Clock::time_point enqueued() const { return enqueued_; }
  Clock::time_point deadline() const { return deadline_; }

  // The serving loop's answer (the first one counts).
  void finish(JobResult r);
  // The client's wait: the result, or nothing when the deadline passed
  // first (the job is then abandoned: the loop skips it if not yet started).
  std::optional<JobResult> wait();
  bool abandoned() const;

 private:
  ServeRequest request_;
  std::optional<pipeline::Plan> plan_;
  Clock::time_point enqueued_, deadline_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<JobResult> result_;
  bool abandoned_ = false;
};

class JobQueue {
 public:
  explicit JobQueue(size_t capacity) : capacity_(capacity) {}

  enum class Push { kQueued, kFull, kClosed };
  Push push(std::shared_ptr<Job> job);
  // Up to `max` jobs, oldest first, waiting at most `wait` for the first;
  // abandoned jobs are dropped on the way.
  std::vector<std::shared_ptr<Job>> take(size_t max, std::chrono::milliseconds wait);
  // Refuses further pushes; returns the jobs still waiting (to be answered 503).
  std::vector<std::shared_ptr<Job>> close();
  size_t depth() const;
  size_t capacity() const { return capacity_; }
  bool closed() const;
  // Wakes a take() that is waiting (e.g. to notice a shutdown).
  void wake();

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> jobs_;
  bool closed_ = false;
};

}  // namespace xdit::serve
