// Communicators over device buffers (pointers of this thread's current CUDA
// device), for ranks that each drive a GPU:
// - NCCL: rank 0 of a host communicator makes the unique id, the host
//   communicator broadcasts it, every rank joins with a non-blocking config;
//   split() is ncclCommSplit (groups in the mesh's order, as the host split
//   orders them). Point-to-point calls are gathered and issued as one NCCL
//   group when something waits (so a Ring step's send and receive never
//   deadlock on one stream), all-to-all is grouped send/recv. Every wait
//   polls with a watchdog: an NCCL error or no progress for the timeout
//   aborts the communicator and throws one line naming the rank and the call,
//   so a failing peer ends the job with its message instead of a hang.
// - Host-staged: the same interface over an MPI communicator, copying device
//   buffers through host memory. Slower, but it runs where NCCL cannot: two
//   ranks sharing one GPU (NCCL refuses two ranks on one device), which lets
//   the multi-rank GPU paths be tested on a one-GPU machine.
// Built when CMake finds NCCL with the CUDA backend (XDIT_HAVE_NCCL); the
// host-staged one needs only the CUDA runtime.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/device.h"

namespace xdit::comm {

// This process's rank among the job's processes on its machine (OpenMPI's
// local rank; 0 without a launcher): the GPU a rank takes is cuda:<local rank>.
int local_rank();

// Whether the communicators over GPU memory time their calls from the moment
// the rank's own queued GPU work is done (so that their stats count waiting
// for peers, not compute). Off by default: it costs each wait the host's
// run-ahead. --patch_weights auto / dynamic turn it on (they subtract the
// stats from a step's time).
void set_comm_timing_excludes_compute(bool on);

#ifdef XDIT_HAVE_NCCL
// An NCCL communicator over the ranks of `host` (every rank calls it, each
// with its own device current). `timeout_s`: the watchdog's limit for one
// wait.
std::unique_ptr<Communicator> make_nccl(std::shared_ptr<Communicator> host, double timeout_s = 300);
#endif

#ifdef XDIT_HAVE_CUDA
std::unique_ptr<Communicator> make_host_staged(std::shared_ptr<Communicator> host);
#endif

// A multi-rank job's GPU for this rank: cuda:<local rank>, shared round-robin
// where the machine has fewer GPUs than ranks, and the communicator `kind`
// between them (choose_device_comm; `note` one line when host-staged).
// Throws one line without a GPU or the CUDA backend.
struct RankDevice {
  Device device;
  std::string kind;
};
RankDevice rank_device(std::string* note);
// The ranks of this machine that rank_device puts on cuda:`gpu` (1 without
// a launcher or a GPU count).
int ranks_on_gpu(int gpu);

// `--device` for a job of `world_size` ranks, checked before any work: on
// one rank the device itself (check_device); under mpirun with a CUDA
// device the GPU this rank will take (rank_device), so that no rank starts
// a context on another rank's GPU. Throws one line.
void check_job_device(const Device& requested, int world_size);

// A device communicator of `kind` ("nccl" or "host-staged", as
// choose_device_comm says) over the ranks of `host`; every rank calls it with
// its own device current. Throws one line where this build lacks the kind.
std::unique_ptr<Communicator> make_device_comm(std::shared_ptr<Communicator> host,
                                               const std::string& kind);

// Which device communicator a job gets: "nccl" when every rank on a machine
// has a GPU of its own, else "host-staged" with `note` saying why (one line
// for the log). Throws one line when there is no GPU at all.
std::string choose_device_comm(int gpus_here, int ranks_here, bool have_nccl, std::string* note);

}  // namespace xdit::comm
