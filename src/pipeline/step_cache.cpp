#include "pipeline/step_cache.h"

#include <sstream>

#include "core/error.h"
#include "pipeline/first_block_cache.h"
#include "pipeline/taylorseer_cache.h"
#include "pipeline/teacache.h"

namespace xdit::pipeline {

std::string CacheStats::summary() const {
  std::ostringstream o;
  o << full_steps << " of " << steps << " steps in full, " << blocks_run << " of " << blocks << " "
    << unit << " run";
  return o.str();
}

void CacheStats::append(const CacheStats& part) {
  steps += part.steps;
  full_steps += part.full_steps;
  blocks += part.blocks;
  blocks_run += part.blocks_run;
  unit = part.unit;
  if (full.size() < part.full.size()) full.resize(part.full.size());
  if (indicator.size() < part.indicator.size()) indicator.resize(part.indicator.size());
  for (size_t c = 0; c < part.full.size(); ++c)
    full[c].insert(full[c].end(), part.full[c].begin(), part.full[c].end());
  for (size_t c = 0; c < part.indicator.size(); ++c)
    indicator[c].insert(indicator[c].end(), part.indicator[c].begin(), part.indicator[c].end());
}

std::unique_ptr<StepCache> make_step_cache(const CacheSettings& s, const CacheSetup& setup) {
  const CacheSettings r = s.resolved();
  r.validate();
  switch (r.kind) {
    case CacheKind::kFirstBlock:
      return std::make_unique<FirstBlockCache>(*r.threshold, setup);
    case CacheKind::kTaylorSeer:
      return std::make_unique<TaylorSeerCache>(*r.interval, *r.warmup, *r.order, setup);
    case CacheKind::kTeaCache:
      return std::make_unique<TeaCache>(*r.threshold, setup);
    case CacheKind::kNone:
      break;
  }
  XDIT_FAIL("make_step_cache: no cache asked for");
}

}  // namespace xdit::pipeline
