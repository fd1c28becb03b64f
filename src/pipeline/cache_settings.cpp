#include "pipeline/cache_settings.h"

#include <cmath>
#include <sstream>

#include "core/error.h"

namespace xdit::pipeline {

const char* CacheSettings::name() const {
  switch (kind) {
    case CacheKind::kNone:
      return "none";
    case CacheKind::kFirstBlock:
      return "fbcache";
    case CacheKind::kTaylorSeer:
      return "taylorseer";
    case CacheKind::kTeaCache:
      return "teacache";
  }
  return "none";
}

CacheKind CacheSettings::parse(const std::string& name) {
  if (name == "none") return CacheKind::kNone;
  if (name == "fbcache") return CacheKind::kFirstBlock;
  if (name == "taylorseer") return CacheKind::kTaylorSeer;
  if (name == "teacache") return CacheKind::kTeaCache;
  XDIT_FAIL("unknown step cache '", name,
            "': use none, fbcache (First-Block-Cache), taylorseer (TaylorSeer) or teacache "
            "(TeaCache)");
}

CacheSettings CacheSettings::resolved() const {
  CacheSettings s = *this;
  if (kind == CacheKind::kFirstBlock && !s.threshold) s.threshold = kFirstBlockThreshold;
  if (kind == CacheKind::kTeaCache && !s.threshold) s.threshold = kXDiTThreshold;
  if (kind == CacheKind::kTaylorSeer) {
    if (!s.interval) s.interval = kTaylorInterval;
    if (!s.warmup) s.warmup = kTaylorWarmup;
    if (!s.order) s.order = kTaylorOrder;
  }
  return s;
}

void CacheSettings::validate() const {
  const bool taylor = interval || warmup || order;
  XDIT_CHECK(!taylor || kind == CacheKind::kTaylorSeer,
             "the TaylorSeer settings (interval, warmup, order) need --cache taylorseer (or the "
             "request's cache field), not ",
             name());
  if (threshold) {
    XDIT_CHECK(kind == CacheKind::kFirstBlock || kind == CacheKind::kTeaCache,
               "a cache threshold needs --cache fbcache or teacache (or the request's cache ",
               "field), not ", name());
    XDIT_CHECK(std::isfinite(*threshold) && *threshold > 0, "the ", name(),
               " threshold must be a finite number above 0, got ", *threshold);
  }
  if (kind != CacheKind::kTaylorSeer) return;
  const CacheSettings r = resolved();
  XDIT_CHECK(*r.interval >= 1, "the TaylorSeer interval must be 1 or more, got ", *r.interval);
  XDIT_CHECK(*r.order >= 0 && *r.order <= 3, "the TaylorSeer order must be 0 to 3, got ", *r.order);
  XDIT_CHECK(*r.warmup >= 1 || *r.interval == 1, "the TaylorSeer warm-up must be 1 or more ",
             "(step 0 has nothing to forecast from), got ", *r.warmup);
}

std::string CacheSettings::label() const {
  const CacheSettings s = resolved();
  std::ostringstream o;
  o << s.name();
  if (s.threshold) o << " threshold " << *s.threshold;
  if (s.interval)
    o << " interval " << *s.interval << " warmup " << *s.warmup << " order " << *s.order;
  return o.str();
}

}  // namespace xdit::pipeline
