// How rows split over the ranks of a group: as evenly as possible, the first
// (rows mod parts) ranks taking one row more. Sequence parallelism splits
// the image's patch rows this way (and each PipeFusion patch's), so that any
// height runs on any layout; the attention backends pad the shorter shares to
// the longest and mask the padding out of the keys.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace xdit::parallel {

// The rows [begin, end) of rows [r0, r1) that rank k of `parts` takes.
inline std::pair<int64_t, int64_t> row_share(int64_t r0, int64_t r1, int parts, int k) {
  const int64_t n = r1 - r0, base = n / parts, extra = n % parts;
  const int64_t begin = r0 + k * base + std::min<int64_t>(k, extra);
  return {begin, begin + base + (k < extra ? 1 : 0)};
}

// Every rank's share of `rows` rows, in rank order.
inline std::vector<int64_t> row_counts(int64_t rows, int parts) {
  std::vector<int64_t> v;
  for (int k = 0; k < parts; ++k) {
    const auto [b, e] = row_share(0, rows, parts, k);
    v.push_back(e - b);
  }
  return v;
}

}  // namespace xdit::parallel
