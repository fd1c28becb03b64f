#include "app/cache_options.h"

#include "core/error.h"

namespace xdit::app {

pipeline::CacheSettings CacheOptions::settings() const {
  pipeline::CacheSettings s;
  if (use_fbcache) {
    XDIT_CHECK(cache.empty() || cache == "fbcache", "--use_fbcache is --cache fbcache; it cannot ",
               "go with --cache ", cache);
    s.kind = pipeline::CacheKind::kFirstBlock;
    s.threshold = threshold.value_or(pipeline::CacheSettings::kXDiTThreshold);
    return s;
  }
  if (!cache.empty()) s.kind = pipeline::CacheSettings::parse(cache);
  s.threshold = threshold;
  return s;
}

void add_cache_options(CLI::App* cmd, CacheOptions& o) {
  const auto once = CLI::MultiOptionPolicy::Throw;
  cmd->add_option("--cache", o.cache,
                  "step cache: none, or fbcache (First-Block-Cache, as diffusers' "
                  "FirstBlockCacheConfig)")
      ->group("Step cache")
      ->multi_option_policy(once);
  cmd->add_option("--cache_threshold,--cache-threshold", o.threshold,
                  "fbcache: run every block when the first block's residual changed by more "
                  "than this (relative L1; default 0.05, diffusers')")
      ->group("Step cache")
      ->multi_option_policy(once);
  cmd->add_flag("--use_fbcache,--use-fbcache", o.use_fbcache,
                "xDiT's flag: --cache fbcache at xDiT's threshold 0.12")
      ->group("Step cache")
      ->multi_option_policy(once);
}

}  // namespace xdit::app
