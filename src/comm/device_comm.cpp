#include "comm/device_comm.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#ifdef XDIT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/runtime.h"
#endif
#ifdef XDIT_HAVE_NCCL
#include <nccl.h>
#endif

namespace xdit::comm {

namespace {
std::atomic<bool> g_exclude_compute{false};
}  // namespace

void set_comm_timing_excludes_compute(bool on) {
  g_exclude_compute.store(on, std::memory_order_relaxed);
}

int local_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return 0;
}

std::string choose_device_comm(int gpus_here, int ranks_here, bool have_nccl, std::string* note) {
  XDIT_CHECK(gpus_here > 0, "--device cuda with ", ranks_here,
             " ranks on this machine, but it has no CUDA device");
  if (have_nccl && ranks_here <= gpus_here) return "nccl";
  if (note != nullptr)
    *note = !have_nccl ? "this build has no NCCL: ranks exchange GPU data through host memory (MPI)"
                       : std::to_string(ranks_here) + " ranks share " + std::to_string(gpus_here) +
                             " GPU" + (gpus_here == 1 ? "" : "s") +
                             " on this machine (NCCL needs one each): ranks exchange GPU data "
                             "through host memory (MPI)";
  return "host-staged";
}

namespace {
// GPUs cudart sees here (0 without the backend or a device).
int gpus_here() {
#ifdef XDIT_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}
// Local rank r's GPU among `gpus`: round-robin.
int gpu_of_local_rank(int r, int gpus) {
  return r % std::max(gpus, 1);
}
}  // namespace

int ranks_on_gpu(int gpu) {
  const int ranks = local_process_count(), gpus = gpus_here();
  int n = 0;
  for (int r = 0; r < ranks; ++r) n += gpu_of_local_rank(r, gpus) == gpu ? 1 : 0;
  return std::max(n, 1);
}

RankDevice rank_device(std::string* note) {
  const int ranks = local_process_count(), gpus = gpus_here();
  if (gpus == 0) check_device(Device{Device::Kind::kCuda, 0});  // says why: no backend, driver …
#ifdef XDIT_HAVE_NCCL
  const bool nccl = true;
#else
  const bool nccl = false;
#endif
  RankDevice r;
  r.kind = choose_device_comm(gpus, ranks, nccl, note);
  r.device = Device{Device::Kind::kCuda, gpu_of_local_rank(local_rank(), gpus)};
  return r;
}

void check_job_device(const Device& requested, int world_size) {
  check_device(requested.cuda() && world_size > 1 ? rank_device(nullptr).device : requested);
}

std::unique_ptr<Communicator> make_device_comm(std::shared_ptr<Communicator> host,
                                               const std::string& kind) {
#ifdef XDIT_HAVE_NCCL
  if (kind == "nccl") return make_nccl(std::move(host));
#endif
#ifdef XDIT_HAVE_CUDA
  if (kind == "host-staged") return make_host_staged(std::move(host));
#endif
  XDIT_FAIL("a '", kind, "' communicator for GPU memory is not in this build",
            built_with_cuda() ? " (no NCCL when CMake configured it)" : " (no CUDA backend)");
}

#ifdef XDIT_HAVE_CUDA
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// With set_comm_timing_excludes_compute: the host first waits for this rank's
// queued GPU work (the compute stream).
struct ComputeDrained {
  ComputeDrained() {
    if (g_exclude_compute.load(std::memory_order_relaxed)) cuda::synchronize();
  }
};
// Times a call over GPU memory, when asked from the moment this rank's own
// queued work is done: the stats then count waiting for peers and moving
// bytes, not this rank's compute, which the calls would otherwise wait for
// inside the clock (--patch_weights auto / dynamic subtract the stats from a
// step's wall time). A collective and the staging copies wait for that work
// anyway; a point-to-point wait loses the host's run-ahead, hence the switch.
class DeviceCommTimer : ComputeDrained, public CommTimer {
 public:
  explicit DeviceCommTimer(CommStats& s, uint64_t bytes = 0) : CommTimer(s, bytes) {}
};

// Device buffers through host memory over a host communicator.
class HostStaged : public Communicator {
 public:
  explicit HostStaged(std::shared_ptr<Communicator> host) : host_(std::move(host)) {}
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }

  void send(const void* buf, size_t count, Type t, int dest, int tag) override {
    DeviceCommTimer tm(stats_, count * type_size(t));
    const auto h = down(buf, count * type_size(t));
    host_->send(h.data(), count, t, dest, tag);
  }
  void recv(void* buf, size_t count, Type t, int src, int tag) override {
    DeviceCommTimer tm(stats_);
    std::vector<char> h(count * type_size(t));
    host_->recv(h.data(), count, t, src, tag);
    up(buf, h);
  }

  class StagedRequest : public Request {
   public:
    StagedRequest(std::unique_ptr<Request> r, std::vector<char> host, void* device,
                  CommStats& stats)
        : r_(std::move(r)), host_(std::move(host)), device_(device), stats_(stats) {}
    void wait() override {
      if (done_) return;
      DeviceCommTimer tm(stats_);
      r_->wait();
      if (device_ != nullptr) cuda::copy(device_, host_.data(), host_.size());
      done_ = true;
    }
    bool test() override {
      if (done_ || !r_->test()) return done_;
      wait();
      return true;
    }

   private:
    std::unique_ptr<Request> r_;
    std::vector<char> host_;  // stays alive while the host operation runs
    void* device_;            // a receive's destination; null for a send
    CommStats& stats_;
    bool done_ = false;
  };

  std::unique_ptr<Request> isend(const void* buf, size_t count, Type t, int dest,
                                 int tag) override {
    DeviceCommTimer tm(stats_, count * type_size(t));
    auto h = down(buf, count * type_size(t));
    auto r = host_->isend(h.data(), count, t, dest, tag);  // the vector's data does not move
    return std::make_unique<StagedRequest>(std::move(r), std::move(h), nullptr, stats_);
  }
  std::unique_ptr<Request> irecv(void* buf, size_t count, Type t, int src, int tag) override {
    std::vector<char> h(count * type_size(t));
    auto r = host_->irecv(h.data(), count, t, src, tag);
    return std::make_unique<StagedRequest>(std::move(r), std::move(h), buf, stats_);
  }
  void allreduce_sum(float* buf, size_t count) override { reduce(buf, count); }
  void allreduce_sum(double* buf, size_t count) override { reduce(buf, count); }
  void allgather(const void* send, void* recv, size_t count, Type t) override {
    DeviceCommTimer tm(stats_, count * type_size(t) * static_cast<size_t>(size() - 1));
    const auto h = down(send, count * type_size(t));
    std::vector<char> all(h.size() * static_cast<size_t>(size()));
    host_->allgather(h.data(), all.data(), count, t);
    up(recv, all);
  }
  void alltoall(const void* send, void* recv, size_t count, Type t) override {
    const size_t bytes = count * type_size(t) * static_cast<size_t>(size());
    DeviceCommTimer tm(stats_, count * type_size(t) * static_cast<size_t>(size() - 1));
    const auto h = down(send, bytes);
    std::vector<char> r(bytes);
    host_->alltoall(h.data(), r.data(), count, t);
    up(recv, r);
  }
  void broadcast(void* buf, size_t count, Type t, int root) override {
    DeviceCommTimer tm(stats_, rank() == root ? count * type_size(t) : 0);
    auto h = down(buf, count * type_size(t));
    host_->broadcast(h.data(), count, t, root);
    up(buf, h);
  }
  void barrier() override {
    DeviceCommTimer tm(stats_);
    cuda::synchronize();
    host_->barrier();
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    return std::make_unique<HostStaged>(host_->split(color, key));
  }
  [[noreturn]] void abort(int code) override {
    host_->abort(code);
    std::abort();  // (not reached: the host's abort ends the process)
  }

 private:
  static std::vector<char> down(const void* device, size_t bytes) {
    std::vector<char> h(bytes);
    cuda::copy(h.data(), device, bytes);  // waits for the work that wrote it
    return h;
  }
  static void up(void* device, const std::vector<char>& h) {
    cuda::copy(device, h.data(), h.size());
  }
  template <class T>
  void reduce(T* buf, size_t count) {
    DeviceCommTimer tm(stats_, count * sizeof(T));
    auto h = down(buf, count * sizeof(T));
    host_->allreduce_sum(reinterpret_cast<T*>(h.data()), count);
    up(buf, h);
  }

  std::shared_ptr<Communicator> host_;
};

}  // namespace

std::unique_ptr<Communicator> make_host_staged(std::shared_ptr<Communicator> host) {
  return std::make_unique<HostStaged>(std::move(host));
}
#endif  // XDIT_HAVE_CUDA

#ifdef XDIT_HAVE_NCCL
namespace {

ncclDataType_t nccl_type(Type t) {
  return t == Type::kF32 ? ncclFloat32 : ncclUint8;
}

class Nccl : public Communicator {
 public:
  // Over the ranks of `host` (a split's: ncclCommSplit orders ranks by key,
  // then by the old rank, as MPI_Comm_split does, so the two agree).
  Nccl(std::shared_ptr<Communicator> host, ncclComm_t comm, double timeout_s)
      : host_(std::move(host)),
        comm_(comm),
        timeout_s_(timeout_s),
        rank_(host_->rank()),
        size_(host_->size()) {}
  ~Nccl() override {
    if (comm_ != nullptr) {
      try {
        flush();
        wait_stream("the final wait");
      } catch (...) {  // already aborted, or a peer is gone: nothing to finish
      }
      if (comm_ != nullptr) ncclCommDestroy(comm_);
    }
  }

  static std::unique_ptr<Communicator> create(std::shared_ptr<Communicator> host,
                                              double timeout_s) {
    ncclUniqueId id{};
    if (host->rank() == 0) ncclGetUniqueId(&id);
    host->broadcast(&id, sizeof id, Type::kByte, 0);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;  // calls return at once; the watchdog waits
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRankConfig(&comm, host->size(), id, host->rank(), &cfg);
    auto c = std::make_unique<Nccl>(std::move(host), comm, timeout_s);
    c->settle(r, "ncclCommInitRankConfig");
    return c;
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void send(const void* buf, size_t count, Type t, int dest, int tag) override {
    isend(buf, count, t, dest, tag)->wait();
  }
  void recv(void* buf, size_t count, Type t, int src, int tag) override {
    irecv(buf, count, t, src, tag)->wait();
  }

  // Point-to-point calls wait in `pending_` until something needs them
  // issued; then they go out as one NCCL group (tags are not NCCL's: the
  // order of calls per peer matches them, as in every use here).
  struct Batch {
    cudaEvent_t done = nullptr;
    ~Batch() {
      if (done != nullptr) cudaEventDestroy(done);
    }
  };
  class NcclRequest : public Request {
   public:
    NcclRequest(Nccl* c, std::shared_ptr<Batch> b) : c_(c), b_(std::move(b)) {}
    void wait() override {
      if (done_) return;
      DeviceCommTimer tm(c_->stats());
      if (b_->done == nullptr) c_->flush();
      c_->wait_event(b_->done, "a point-to-point transfer");
      done_ = true;
    }
    bool test() override {
      if (done_) return true;
      if (b_->done == nullptr) c_->flush();
      return done_ = cudaEventQuery(b_->done) == cudaSuccess;
    }

   private:
    Nccl* c_;
    std::shared_ptr<Batch> b_;
    bool done_ = false;
  };
  std::unique_ptr<Request> isend(const void* buf, size_t count, Type t, int dest, int) override {
    stats_.bytes_sent += count * type_size(t);
    pending_.push_back({true, const_cast<void*>(buf), count, t, dest});
    return std::make_unique<NcclRequest>(this, batch());
  }
  std::unique_ptr<Request> irecv(void* buf, size_t count, Type t, int src, int) override {
    pending_.push_back({false, buf, count, t, src});
    return std::make_unique<NcclRequest>(this, batch());
  }

  void allreduce_sum(float* buf, size_t count) override {
    collective("ncclAllReduce", count * 4, [&] {
      return ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm_, stream_.get());
    });
  }
  void allreduce_sum(double* buf, size_t count) override {
    collective("ncclAllReduce", count * 8, [&] {
      return ncclAllReduce(buf, buf, count, ncclFloat64, ncclSum, comm_, stream_.get());
    });
  }
  void allgather(const void* send, void* recv, size_t count, Type t) override {
    collective("ncclAllGather", count * type_size(t) * static_cast<size_t>(size_ - 1), [&] {
      return ncclAllGather(send, recv, count, nccl_type(t), comm_, stream_.get());
    });
  }
  // Grouped send/recv: block j of send to rank j, block i of recv from rank i.
  void alltoall(const void* send, void* recv, size_t count, Type t) override {
    const size_t bytes = count * type_size(t);
    collective("all-to-all (grouped ncclSend/ncclRecv)", bytes * static_cast<size_t>(size_ - 1),
               [&] {
                 ncclResult_t r = ncclGroupStart();
                 for (int j = 0; j < size_ && r == ncclSuccess; ++j) {
                   r = ncclSend(static_cast<const char*>(send) + j * bytes, count, nccl_type(t), j,
                                comm_, stream_.get());
                   if (r == ncclSuccess)
                     r = ncclRecv(static_cast<char*>(recv) + j * bytes, count, nccl_type(t), j,
                                  comm_, stream_.get());
                 }
                 const ncclResult_t e = ncclGroupEnd();
                 return r != ncclSuccess ? r : e;
               });
  }
  void broadcast(void* buf, size_t count, Type t, int root) override {
    collective("ncclBroadcast", rank_ == root ? count * type_size(t) : 0, [&] {
      return ncclBroadcast(buf, buf, count, nccl_type(t), root, comm_, stream_.get());
    });
  }
  void barrier() override {
    flush();
    wait_stream("barrier");
    host_->barrier();
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    flush();
    auto host = std::shared_ptr<Communicator>(host_->split(color, key));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t child = nullptr;
    const ncclResult_t r = ncclCommSplit(comm_, color, key, &child, &cfg);
    auto c = std::make_unique<Nccl>(std::move(host), child, timeout_s_);
    c->settle(r, "ncclCommSplit");  // polls the child's own progress
    return c;
  }
  [[noreturn]] void abort(int code) override {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    host_->abort(code);
    std::abort();  // (not reached: the host's abort ends the process)
  }

 private:
  struct P2p {
    bool send;
    void* buf;
    size_t count;
    Type t;
    int peer;
  };

  std::shared_ptr<Batch> batch() {
    if (!open_) open_ = std::make_shared<Batch>();
    return open_;
  }

  void flush() {
    if (pending_.empty()) return;
    const auto ops = std::move(pending_);
    pending_.clear();
    issue("grouped ncclSend/ncclRecv", [&] {
      ncclResult_t r = ncclGroupStart();
      for (const P2p& p : ops) {
        if (r != ncclSuccess) break;
        r = p.send ? ncclSend(p.buf, p.count, nccl_type(p.t), p.peer, comm_, stream_.get())
                   : ncclRecv(p.buf, p.count, nccl_type(p.t), p.peer, comm_, stream_.get());
      }
      const ncclResult_t e = ncclGroupEnd();
      return r != ncclSuccess ? r : e;
    });
    cudaEvent_t ev = nullptr;
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    cudaEventRecord(ev, stream_.get());
    open_->done = ev;
    open_.reset();
  }

  // Enqueues on the communicator's stream after the work queued so far on
  // the legacy stream (where the ops run).
  template <class F>
  void issue(const char* call, F enqueue) {
    cuda::Event ready;
    ready.record(nullptr);
    ready.wait(stream_.get());
    settle(enqueue(), call);
  }
  // Pending point-to-point calls first, then `enqueue`, waited for (its
  // time and the `bytes` it sends counted in the stats).
  template <class F>
  void collective(const char* call, size_t bytes, F enqueue) {
    DeviceCommTimer tm(stats_, bytes);
    flush();
    issue(call, enqueue);
    wait_stream(call);
  }

  [[noreturn]] void fail(const std::string& call, const std::string& why) {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    throw Error("NCCL " + call + " on rank " + std::to_string(rank_) + " of " +
                std::to_string(size_) + ": " + why + "; the communicator was aborted");
  }

  // A non-blocking call's result: in progress → poll until done or failed.
  void settle(ncclResult_t r, const std::string& call) {
    const auto t0 = Clock::now();
    while (r == ncclInProgress) {
      if (seconds_since(t0) > timeout_s_)
        fail(call, "not done after " + std::to_string(static_cast<int>(timeout_s_)) +
                       " s (a peer failed or stopped)");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      ncclCommGetAsyncError(comm_, &r);
    }
    if (r != ncclSuccess)
      fail(call, std::string(ncclGetErrorString(r)) + " (" + ncclGetLastError(comm_) + ")");
  }

  // The watchdog: polls the stream (or an event) and the communicator's
  // asynchronous error until the work is done, it failed, or the timeout.
  template <class Query>
  void watch(Query done, const std::string& call) {
    const auto t0 = Clock::now();
    for (;;) {
      const cudaError_t e = done();
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) fail(call, cudaGetErrorString(e));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress)
        fail(call, std::string(ncclGetErrorString(async)) + " (" + ncclGetLastError(comm_) + ")");
      if (seconds_since(t0) > timeout_s_)
        fail(call, "no progress for " + std::to_string(static_cast<int>(timeout_s_)) +
                       " s (a peer failed or stopped)");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  void wait_stream(const std::string& call) {
    watch([&] { return cudaStreamQuery(stream_.get()); }, call);
  }
  void wait_event(cudaEvent_t ev, const std::string& call) {
    watch([&] { return cudaEventQuery(ev); }, call);
  }

  std::shared_ptr<Communicator> host_;
  ncclComm_t comm_ = nullptr;
  double timeout_s_;
  int rank_, size_;
  cuda::OwnedStream stream_;
  std::vector<P2p> pending_;
  std::shared_ptr<Batch> open_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl(std::shared_ptr<Communicator> host, double timeout_s) {
  return Nccl::create(std::move(host), timeout_s);
}
#endif  // XDIT_HAVE_NCCL

}  // namespace xdit::comm
