// What every xdit process starts from (the job's world communicator, its
// OpenMP threads, the failure tests' fault hook), and the one start-up of the
// subcommands that run a pipeline over the device mesh (generate, serve).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "app/parallel_options.h"
#include "comm/communicator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "parallel/config.h"
#include "pipeline/request.h"

namespace xdit::app {

// The job's world communicator (single-rank when not under mpirun).
void set_world(comm::Communicator* world);
comm::Communicator& world();

// Sets the OpenMP thread count (0: the cores, shared among this machine's ranks).
void set_threads(int threads);

// OpenMP's thread counts from the environment (OMP_NUM_THREADS, each entry
// of its list, and OMP_THREAD_LIMIT) bounded as --threads is (1 … 4 x the
// cores): libgomp would otherwise try to start them all and crash. Throws
// one line naming the variable.
void check_thread_environment();

// Test hook for the failure tests, called at every denoising step by generate
// and serve: XDIT_FAULT_RANK=r makes rank r fail at the first step, by
// throwing (XDIT_FAULT=throw, default) or by dying without a word
// (XDIT_FAULT=kill), or by stopping as kill -STOP does (XDIT_FAULT=stop).
void maybe_inject_fault(const pipeline::StepEvent& e);

// --dtype: bf16 or f32 (f16 has no CPU path).
DType parse_compute_dtype(const std::string& text);

// A pipeline job, started: threads set, the device parsed and checked against
// the job, the parallel flags resolved into the mesh.
struct JobStart {
  comm::Communicator* world = nullptr;
  Device device;
  std::unique_ptr<parallel::Mesh> mesh;
};

// Starts a job of the world's ranks on `device` (--device) with `par`
// (resolved here): first the communication watchdog (--comm_timeout) and
// the ranks' agreement on `command` (check_ranks_agree), then the device,
// so that a machine without a GPU says so in one line before any work; the
// mesh checks the degrees against the job before anything loads, and under
// mpirun logs the layout.
JobStart start_job(const CLI::App& command, int threads, const std::string& device,
                   ParallelOptions& par);

}  // namespace xdit::app
