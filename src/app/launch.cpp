// xdit launch -n N -- generate ...: runs `mpirun` for the user with the
// settings a CPU job wants (no core binding, so each rank's OpenMP threads can
// spread; oversubscription allowed), and as root with OpenMPI's two opt-in
// variables set.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "app/commands.h"
#include "core/error.h"
#include "core/log.h"

namespace xdit::app {

namespace {

struct LaunchOptions {
  int n = 2;
  std::string mpirun = "mpirun";
  std::vector<std::string> args;
};

int run_launch(const LaunchOptions& o) {
  XDIT_CHECK(o.n >= 1, "launch: -n must be at least 1");
  XDIT_CHECK(
      !o.args.empty(),
      "launch: give the xdit command to run after --, e.g. xdit launch -n 2 -- generate ...");
  std::error_code ec;
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  XDIT_CHECK(!ec, "launch: cannot find the xdit binary");
  std::vector<std::string> argv = {
      o.mpirun, "-np", std::to_string(o.n), "--oversubscribe", "--bind-to", "none", exe};
  argv.insert(argv.end(), o.args.begin(), o.args.end());
  if (::geteuid() == 0) {  // OpenMPI refuses root unless both are set
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  }
  std::vector<char*> c;
  for (auto& a : argv) c.push_back(a.data());
  c.push_back(nullptr);
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  XDIT_INFO("launch: ", cmd);
  ::execvp(c[0], c.data());
  XDIT_FAIL("launch: cannot run ", o.mpirun, " (install openmpi-bin): ", std::strerror(errno));
}

}  // namespace

std::function<int()> add_launch(CLI::App& app) {
  auto o = std::make_shared<LaunchOptions>();
  CLI::App* l = app.add_subcommand("launch", "run an xdit command on N processes through mpirun");
  // mpirun itself crashes when asked for tens of thousands of processes.
  l->add_option("-n,--np", o->n, "number of processes (1 … 1024)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  l->add_option("--mpirun", o->mpirun, "the launcher")->capture_default_str();
  l->add_option("args", o->args, "the xdit command and its options, after --")->expected(-1);
  l->prefix_command();  // everything after the options belongs to the command
  return [o] { return run_launch(*o); };
}

}  // namespace xdit::app
