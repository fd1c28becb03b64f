// xDiT's parallel flags, shared by the subcommands that run a pipeline over
// the device mesh (generate, serve): registered on a CLI11 subcommand, then
// resolved (legacy --parallelism / --sync_mode / --patch_weights) into one
// ParallelConfig for the job's ranks.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "parallel/config.h"

namespace xdit::app {

struct ParallelOptions {
  parallel::ParallelConfig config;
  std::string parallelism, sync_mode = "corrected_async_gn";  // xDiT legacy patch flags
  std::vector<std::string> patch_weights;
  bool parallel_vae = false;   // --use_parallel_vae[=true|false], when given
  double comm_timeout = 1800;  // --comm_timeout, seconds (0: no watchdog)
  CLI::Option* parallel_vae_flag = nullptr;
};

// Registers the flags in the "Parallel" group of `cmd`.
void add_parallel_options(CLI::App* cmd, ParallelOptions& o);

// The legacy flags folded into o.config for a job of `world_size` ranks;
// throws one line for a value the flags do not take.
void resolve_parallel_options(ParallelOptions& o, int world_size);

}  // namespace xdit::app
