// Ranks that must agree (mpirun can start ranks with different commands,
// `-np 1 A : -np 1 B`, and machines can hold different files under the same
// path): each rank digests what its work depends on, in a fixed order of
// named entries, and rank 0's list is compared on every rank. A difference
// ends every rank with one line naming the first entry that differs and the
// rank, before any work.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "pipeline/plan.h"

namespace xdit::app {

struct Digest {
  std::string name;  // e.g. "--seed", "model file transformer/config.json"
  uint64_t value = 0;
};

// Every rank's `mine` against rank 0's; on a difference every rank throws
// "rank R <verb> <name> than rank 0: <why>" for the lowest such rank.
void check_ranks_agree(comm::Communicator& world, const std::vector<Digest>& mine,
                       const std::string& verb, const std::string& why);

// Each option of `command` as given (its values and count; --threads and
// --help left out), after the subcommand's name.
std::vector<Digest> option_digests(const CLI::App& command);

// The files a model run reads from `path` (a folder, recursively, or one
// file): each regular file's size, and its bytes (files up to 16 MiB) or
// its header (safetensors); documentation (*.md) and dotfiles are left out.
std::vector<Digest> file_digests(const std::string& label, const std::string& path);

// Each field of each plan as it crosses ranks (Plan::to_json).
std::vector<Digest> plan_digests(const std::vector<pipeline::Plan>& plans);

// The command line: every rank's options against rank 0's (only --threads
// may differ).
void check_ranks_agree(comm::Communicator& world, const CLI::App& command);

// The files: the model folder's and each input file's (label, path; an
// empty path is left out) against rank 0's.
void check_files_agree(comm::Communicator& world, const std::string& model_folder,
                       const std::vector<std::pair<std::string, std::string>>& inputs = {});

}  // namespace xdit::app
