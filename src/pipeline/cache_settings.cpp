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
  }
  return "none";
}

CacheKind CacheSettings::parse(const std::string& name) {
  if (name == "none") return CacheKind::kNone;
  if (name == "fbcache") return CacheKind::kFirstBlock;
  XDIT_FAIL("unknown step cache '", name, "': use none or fbcache (First-Block-Cache)");
}

CacheSettings CacheSettings::resolved() const {
  CacheSettings s = *this;
  if (kind == CacheKind::kFirstBlock && !s.threshold) s.threshold = kFirstBlockThreshold;
  return s;
}

void CacheSettings::validate() const {
  if (!threshold) return;
  XDIT_CHECK(kind != CacheKind::kNone,
             "a cache threshold needs a cache: add --cache fbcache (or the request's cache field)");
  XDIT_CHECK(std::isfinite(*threshold) && *threshold > 0, "the ", name(),
             " threshold must be a finite number above 0, got ", *threshold);
}

std::string CacheSettings::label() const {
  const CacheSettings s = resolved();
  std::ostringstream o;
  o << s.name();
  if (s.threshold) o << " threshold " << *s.threshold;
  return o.str();
}

}  // namespace xdit::pipeline
