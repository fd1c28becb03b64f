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
  std::string parallelism, sync_mode;  // xDiT legacy patch flags ("" when not given)
  std::vector<std::string> patch_weights;
  std::vector<std::string> attn_layers;  // --attn_layer_num_for_pp: numbers or auto
  int warmup_steps = 0;                  // --warmup_steps, when given (warmup_flag)
  CLI::Option* warmup_flag = nullptr;
  bool parallel_vae = false;   // --use_parallel_vae[=true|false], when given
  double comm_timeout = 1800;  // --comm_timeout, seconds (0: no watchdog)
  CLI::Option* parallel_vae_flag = nullptr;
};

// Registers the flags in the "Parallel" group of `cmd`.
void add_parallel_options(CLI::App* cmd, ParallelOptions& o);

// The legacy flags folded into o.config for a job of `world_size` ranks;
// throws one line for a value the flags do not take.
void resolve_parallel_options(ParallelOptions& o, int world_size);

// The warnings of a resolved layout, once per job (rank 0 prints): the
// legacy sync modes that are the same for transformers, naive patch's
// approximation, --warmup_steps 0.
void warn_parallel_options(const ParallelOptions& o);

}  // namespace xdit::app
