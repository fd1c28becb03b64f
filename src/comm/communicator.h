// Communicators: point-to-point (blocking and non-blocking) and collectives
// over a group of ranks. Implementations: MPI (OpenMPI) for processes, and a
// single-rank one that the serial path uses. Buffers are host pointers with an
// element type; the interface takes no MPI types so that an NCCL communicator
// (device buffers, streams) can implement it later.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace xdit::comm {

enum class Type { kF32, kByte };
size_t type_size(Type t);

// A pending non-blocking operation; wait() completes it (idempotent).
class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;
  virtual bool test() = 0;
};

// Bytes moved and seconds spent inside communication calls (including waits),
// for benchmarks.
struct CommStats {
  double seconds = 0;
  uint64_t bytes_sent = 0;
};

// Times a communication call (its scope) into `s`, adding `bytes` sent.
class CommTimer {
 public:
  explicit CommTimer(CommStats& s, uint64_t bytes = 0)
      : s_(s), t0_(std::chrono::steady_clock::now()) {
    s_.bytes_sent += bytes;
  }
  ~CommTimer() {
    s_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  CommTimer(const CommTimer&) = delete;
  CommTimer& operator=(const CommTimer&) = delete;

 private:
  CommStats& s_;
  std::chrono::steady_clock::time_point t0_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual void send(const void* buf, size_t count, Type t, int dest, int tag) = 0;
  virtual void recv(void* buf, size_t count, Type t, int src, int tag) = 0;
  virtual std::unique_ptr<Request> isend(const void* buf, size_t count, Type t, int dest,
                                         int tag) = 0;
  virtual std::unique_ptr<Request> irecv(void* buf, size_t count, Type t, int src, int tag) = 0;

  // In place sum over all ranks (f32; f64 where a sum must stay exact to
  // rounding, e.g. GroupNorm statistics over row bands).
  virtual void allreduce_sum(float* buf, size_t count) = 0;
  virtual void allreduce_sum(double* buf, size_t count) = 0;
  // recv holds size() blocks of `count` elements, rank i's block at i·count.
  virtual void allgather(const void* send, void* recv, size_t count, Type t) = 0;
  // send and recv hold size() blocks of `count`: block j of send goes to rank
  // j, and lands at block i of j's recv (i the sender).
  virtual void alltoall(const void* send, void* recv, size_t count, Type t) = 0;
  virtual void broadcast(void* buf, size_t count, Type t, int root) = 0;
  virtual void barrier() = 0;
  // Ranks with equal color form a new communicator, ordered by key.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // Ends every rank of the job (used when one rank fails).
  [[noreturn]] virtual void abort(int code) = 0;

  CommStats& stats() { return stats_; }

 protected:
  CommStats stats_;
};

// The single-rank communicator: every collective is a copy.
std::unique_ptr<Communicator> make_single();

// The world communicator: MPI when started by mpirun (or when MPI is already
// initialised), the single-rank one otherwise. Call once, early in main.
std::unique_ptr<Communicator> init_world(int* argc, char*** argv);
// Finalises MPI if it was initialised (normal exit).
void finalize();
// True when running under an MPI launcher with more than one process.
bool launched_by_mpi();
// Processes of this job on this machine (OpenMPI's local size; 1 without a launcher).
int local_process_count();

}  // namespace xdit::comm
