#include "app/cache_options.h"

#include "core/error.h"

namespace xdit::app {

pipeline::CacheSettings CacheOptions::settings() const {
  pipeline::CacheSettings s;
  // xDiT's flags: one cache each, at xDiT's threshold. (xDiT lets
  // --use_fbcache win over --use_teacache with a warning; here two caches
  // are refused, as --cache given twice is.)
  XDIT_CHECK(!(use_fbcache && use_teacache),
             "--use_fbcache and --use_teacache name two step caches: give one");
  if (use_fbcache || use_teacache) {
    const char* flag = use_fbcache ? "--use_fbcache" : "--use_teacache";
    const char* name = use_fbcache ? "fbcache" : "teacache";
    XDIT_CHECK(cache.empty() || cache == name, flag, " is --cache ", name,
               "; it cannot go with --cache ", cache);
    s.kind = use_fbcache ? pipeline::CacheKind::kFirstBlock : pipeline::CacheKind::kTeaCache;
    s.threshold = threshold.value_or(pipeline::CacheSettings::kXDiTThreshold);
    XDIT_CHECK(!interval && !warmup && !order, flag,
               " takes no TaylorSeer setting: use --cache taylorseer");
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
                  "FirstBlockCacheConfig), taylorseer (TaylorSeerCacheConfig) or teacache "
                  "(TeaCache, as xDiT's)")
      ->group("Step cache")
      ->multi_option_policy(once);
  cmd->add_option("--cache_threshold,--cache-threshold", o.threshold,
                  "fbcache: run every block when the first block's residual changed by more "
                  "than this (relative L1; default 0.05, diffusers'); teacache: when the "
                  "accumulated, rescaled change of block 0's modulated input reaches it "
                  "(default 0.12, xDiT's)")
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
  cmd->add_flag("--use_teacache,--use-teacache", o.use_teacache,
                "xDiT's flag: --cache teacache at xDiT's threshold 0.12")
      ->group("Step cache")
      ->multi_option_policy(once);
}

}  // namespace xdit::app
