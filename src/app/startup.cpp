#include "app/startup.h"

#include <omp.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>

#include "app/commands.h"
#include "app/rank_agreement.h"
#include "comm/device_comm.h"
#include "comm/watchdog.h"
#include "core/error.h"
#include "core/log.h"

namespace xdit::app {

namespace {
comm::Communicator* g_world = nullptr;
}

void set_world(comm::Communicator* w) {
  g_world = w;
}
comm::Communicator& world() {
  XDIT_CHECK(g_world != nullptr, "no world communicator");
  return *g_world;
}

void set_threads(int threads) {
  if (threads > 0) {
    omp_set_num_threads(threads);
    return;
  }
  // Under mpirun, share the cores among the ranks on this machine.
  const int n = comm::local_process_count();
  if (n > 1) omp_set_num_threads(std::max(1, omp_get_num_procs() / n));
}

void check_thread_environment() {
  const int hi = max_threads();
  for (const char* var : {"OMP_NUM_THREADS", "OMP_THREAD_LIMIT"}) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') continue;
    std::string entry;
    std::stringstream ss(v);
    while (std::getline(ss, entry, ',')) {
      int n = 0;
      XDIT_CHECK(CLI::detail::lexical_cast(entry, n) && n >= 1 && n <= hi, var, "=", v,
                 ": each count must be 1 … ", hi, " (4 x the ", hi / 4,
                 " cores this process may use, as for --threads)");
    }
  }
}

void maybe_inject_fault(const pipeline::StepEvent& e) {
  if (e.step != 1) return;
  const char* r = std::getenv("XDIT_FAULT_RANK");
  if (r == nullptr || std::atoi(r) != world().rank()) return;
  const char* how = std::getenv("XDIT_FAULT");
  if (how != nullptr && std::string(how) == "kill") std::_Exit(9);
  if (how != nullptr && std::string(how) == "stop") ::raise(SIGSTOP);  // as kill -STOP
  XDIT_FAIL("injected fault (XDIT_FAULT_RANK=", r, ")");
}

DType parse_compute_dtype(const std::string& text) {
  const DType dtype = parse_dtype(text);
  XDIT_CHECK(dtype != DType::kF16, "--dtype f16 is not supported on CPU: use bf16 or f32");
  return dtype;
}

JobStart start_job(const CLI::App& command, int threads, const std::string& device,
                   ParallelOptions& par) {
  comm::set_comm_timeout(par.comm_timeout);  // the agreement below is watched too
  check_ranks_agree(world(), command);       // before any rank works
  set_threads(threads);
  JobStart s;
  s.world = &world();
  s.device = parse_device(device);
  comm::check_job_device(s.device, s.world->size());
  resolve_parallel_options(par, s.world->size());
  s.mesh = std::make_unique<parallel::Mesh>(par.config, *s.world);
  if (s.world->size() > 1) XDIT_INFO(s.mesh->layout());
  warn_parallel_options(par);
  return s;
}

}  // namespace xdit::app
