// The LoRA flags (generate): --lora FILE[:SCALE], repeatable (diffusers'
// set_adapters weights; the scale defaults to 1), and
// --lora_ignore_unmatched.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "nn/lora.h"

namespace xdit::app {

struct LoraOptions {
  std::vector<std::string> specs;  // "FILE" or "FILE:SCALE", as given
  bool ignore_unmatched = false;
  // Each file opened and checked (format, ranks, values), with its scale;
  // throws one line for a file that cannot be read or a scale that is not a
  // finite number.
  std::vector<nn::LoraUse> uses() const;
};

void add_lora_options(CLI::App* cmd, LoraOptions& o);

}  // namespace xdit::app
