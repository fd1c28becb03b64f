#include "app/lora_options.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"

namespace xdit::app {

namespace {

// "FILE:SCALE" → (FILE, SCALE) where the part after the last ':' is a
// number; otherwise the whole is the file at scale 1 (a path may hold ':').
std::pair<std::string, double> split_spec(const std::string& spec) {
  const size_t colon = spec.rfind(':');
  if (colon != std::string::npos && colon + 1 < spec.size()) {
    const std::string tail = spec.substr(colon + 1);
    size_t used = 0;
    double scale = 0;
    try {
      scale = std::stod(tail, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == tail.size()) {
      XDIT_CHECK(std::isfinite(scale), "--lora ", spec, ": the scale ", tail,
                 " is not a finite number");
      return {spec.substr(0, colon), scale};
    }
    XDIT_CHECK(std::filesystem::exists(spec), "--lora ", spec, ": '", tail,
               "' after the last ':' is not a scale, and no file ", spec, " exists");
  }
  return {spec, 1.0};
}

}  // namespace

namespace {

// The files and scales as given, each file checked to exist.
std::vector<pipeline::LoraRef> files(const std::vector<std::string>& specs) {
  std::vector<pipeline::LoraRef> out;
  for (const std::string& spec : specs) {
    const auto [file, scale] = split_spec(spec);
    XDIT_CHECK(std::filesystem::is_regular_file(file), "--lora ", spec, ": no file ", file);
    out.push_back({file, scale});
  }
  return out;
}

}  // namespace

std::vector<nn::LoraUse> LoraOptions::uses() const {
  std::vector<nn::LoraUse> out;
  for (const pipeline::LoraRef& f : files(specs))
    out.push_back({std::make_shared<nn::LoraFile>(f.path, max_bytes), f.scale});
  return out;
}

std::vector<pipeline::LoraRef> LoraOptions::refs() const {
  XDIT_CHECK(!ignore_unmatched,
             "--lora_ignore_unmatched merges what fits; --lora_mode side takes whole LoRAs only");
  return files(specs);
}

void add_lora_options(CLI::App* cmd, LoraOptions& o) {
  cmd->add_option(
         "--lora", o.specs,
         "a LoRA file (safetensors: diffusers / PEFT; for FLUX.1 also kohya, BFL, XLabs) and "
         "its scale, FILE[:SCALE] "
         "(default 1); repeat for several, combined as diffusers' set_adapters")
      ->group("LoRA")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_flag("--lora_ignore_unmatched,--lora-ignore-unmatched", o.ignore_unmatched,
                "apply a LoRA whose modules the model partly lacks, or with tensors xdit does not "
                "apply (those are skipped)")
      ->group("LoRA");
  add_max_lora_bytes(cmd, o.max_bytes);
  cmd->add_option("--lora_mode,--lora-mode", o.mode,
                  "merge: into the weights as they load (no cost per step); side: beside them as "
                  "low-rank side paths (applied in milliseconds, about the LoRA's size in memory, "
                  "~1 % per step at rank 16; CPU)")
      ->check(CLI::IsMember({"merge", "side"}))
      ->capture_default_str()
      ->group("LoRA");
}

void add_max_lora_bytes(CLI::App* cmd, size_t& max_bytes) {
  cmd->add_option("--max_lora_bytes,--max-lora-bytes", max_bytes,
                  "the largest LoRA file read, in bytes (checked from its size before anything "
                  "is read; real LoRAs are a few hundred MB, the largest a few GB)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 40))
      ->capture_default_str()
      ->group("LoRA");
}

}  // namespace xdit::app
