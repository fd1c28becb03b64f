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
    XDIT_CHECK(!interval && !warmup && !order,
               "--use_fbcache takes no TaylorSeer setting: use --cache taylorseer");
    return s;
  }
  if (!cache.empty()) s.kind = pipeline::CacheSettings::parse(cache);
  s.threshold = threshold;
  s.interval = interval;
  s.warmup = warmup;
  s.order = order;
  return s;
}

void add_cache_options(CLI::App* cmd, CacheOptions& o) {
  const auto once = CLI::MultiOptionPolicy::Throw;
  cmd->add_option("--cache", o.cache,
                  "step cache: none, fbcache (First-Block-Cache, as diffusers' "
                  "FirstBlockCacheConfig) or taylorseer (TaylorSeerCacheConfig)")
      ->group("Step cache")
      ->multi_option_policy(once);
  cmd->add_option("--cache_threshold,--cache-threshold", o.threshold,
                  "fbcache: run every block when the first block's residual changed by more "
                  "than this (relative L1; default 0.05, diffusers')")
      ->group("Step cache")
      ->multi_option_policy(once);
  cmd->add_option("--taylorseer_interval,--taylorseer-interval", o.interval,
                  "taylorseer: a full step every this many after the warm-up (default 5)")
      ->group("Step cache")
      ->multi_option_policy(once);
  cmd->add_option("--taylorseer_warmup,--taylorseer-warmup", o.warmup,
                  "taylorseer: the first steps run in full (default 3; diffusers' "
                  "disable_cache_before_step)")
      ->group("Step cache")
      ->multi_option_policy(once);
  cmd->add_option("--taylorseer_order,--taylorseer-order", o.order,
                  "taylorseer: the Taylor factors' highest order, 0 to 3 (default 1)")
      ->group("Step cache")
      ->multi_option_policy(once);
  cmd->add_flag("--use_fbcache,--use-fbcache", o.use_fbcache,
                "xDiT's flag: --cache fbcache at xDiT's threshold 0.12")
      ->group("Step cache")
      ->multi_option_policy(once);
}

}  // namespace xdit::app
