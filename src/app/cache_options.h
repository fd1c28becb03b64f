// The step-cache flags (generate, bench): --cache NAME --cache_threshold T,
// and xDiT's --use_fbcache / --use_teacache (First-Block-Cache / TeaCache at
// xDiT's threshold 0.12 unless --cache_threshold says otherwise).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "pipeline/cache_settings.h"

namespace xdit::app {

struct CacheOptions {
  std::string cache;  // "" when not given
  std::optional<double> threshold;
  std::optional<int64_t> interval, warmup, order;  // TaylorSeer
  bool use_fbcache = false, use_teacache = false;
  // The request's settings; throws one line for names or combinations the
  // flags do not take (the values are the planner's to check).
  pipeline::CacheSettings settings() const;
};

// Registers the flags in the "Step cache" group of `cmd`; each may be given
// once.
void add_cache_options(CLI::App* cmd, CacheOptions& o);

}  // namespace xdit::app
