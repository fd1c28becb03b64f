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
