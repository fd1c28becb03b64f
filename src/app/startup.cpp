#include "app/startup.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>

#include "app/commands.h"
#include "comm/device_comm.h"
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
  XDIT_FAIL("injected fault (XDIT_FAULT_RANK=", r, ")");
}

DType parse_compute_dtype(const std::string& text) {
  const DType dtype = parse_dtype(text);
  XDIT_CHECK(dtype != DType::kF16, "--dtype f16 is not supported on CPU: use bf16 or f32");
  return dtype;
}

void check_ranks_agree(comm::Communicator& world, const CLI::App& command) {
  if (world.size() == 1) return;
  // One digest per option (std::hash: the same binary on every rank). The
  // values are the strings given; an option given on one side only differs
  // by its count.
  std::vector<std::string> names;
  std::vector<uint64_t> mine;
  for (const CLI::Option* opt : command.get_options()) {
    const std::string name = opt->get_name();
    if (name == "--help" || name == "--threads") continue;
    std::string given = std::to_string(opt->count());
    for (const std::string& v : opt->results()) given += '\0' + v;
    names.push_back(name);
    mine.push_back(std::hash<std::string>{}(given));
  }
  // First the command and the number of options (a fixed size on every rank).
  const uint64_t head[2] = {std::hash<std::string>{}(command.get_name()), mine.size()};
  std::vector<uint64_t> heads(2 * static_cast<size_t>(world.size()));
  world.allgather(head, heads.data(), sizeof head, comm::Type::kByte);
  for (int r = 1; r < world.size(); ++r)
    XDIT_CHECK(heads[2 * static_cast<size_t>(r)] == heads[0] &&
                   heads[2 * static_cast<size_t>(r) + 1] == heads[1],
               "rank ", r,
               " runs another subcommand than rank 0: every rank must run the same "
               "command");
  const size_t n = mine.size(), bytes = n * sizeof(uint64_t);
  std::vector<uint64_t> all(n * static_cast<size_t>(world.size()));
  world.allgather(mine.data(), all.data(), bytes, comm::Type::kByte);
  for (int r = 1; r < world.size(); ++r)
    for (size_t i = 0; i < n; ++i)
      XDIT_CHECK(all[static_cast<size_t>(r) * n + i] == all[i], "rank ", r,
                 " was started with a different ", names[i],
                 " than rank 0: every rank must run "
                 "the same command (only --threads may differ)");
}

JobStart start_job(int threads, const std::string& device, ParallelOptions& par) {
  set_threads(threads);
  JobStart s;
  s.world = &world();
  s.device = parse_device(device);
  comm::check_job_device(s.device, s.world->size());
  resolve_parallel_options(par, s.world->size());
  s.mesh = std::make_unique<parallel::Mesh>(par.config, *s.world);
  if (s.world->size() > 1) XDIT_INFO(s.mesh->layout());
  return s;
}

}  // namespace xdit::app
