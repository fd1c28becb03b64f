// The LoRA flags (generate): --lora FILE[:SCALE], repeatable (diffusers'
// set_adapters weights; the scale defaults to 1), and
// --lora_ignore_unmatched.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "nn/lora.h"
#include "pipeline/request.h"

namespace xdit::app {

struct LoraOptions {
  std::vector<std::string> specs;  // "FILE" or "FILE:SCALE", as given
  bool ignore_unmatched = false;
  // --max_lora_bytes: a larger file is refused before it is read.
  size_t max_bytes = nn::LoraFile::kDefaultMaxBytes;
  // "merge": into the weights as they load (nn::LoraWeights); "side": beside
  // them, as low-rank side paths (nn/lora_side.h), as xdit serve applies a
  // request's LoRAs — milliseconds to apply, about the LoRA's size in memory.
  std::string mode = "merge";
  bool side() const { return mode == "side"; }
  // Each file opened and checked (format, ranks, values), with its scale;
  // throws one line for a file that cannot be read or a scale that is not a
  // finite number.
  std::vector<nn::LoraUse> uses() const;
  // The files and scales, for side paths (the pipeline opens them); throws
  // as uses() for a scale, and for --lora_ignore_unmatched, which side paths
  // do not take.
  std::vector<pipeline::LoraRef> refs() const;
};

void add_lora_options(CLI::App* cmd, LoraOptions& o);
// --max_lora_bytes alone (xdit serve's, for --lora_dir's files).
void add_max_lora_bytes(CLI::App* cmd, size_t& max_bytes);

}  // namespace xdit::app
