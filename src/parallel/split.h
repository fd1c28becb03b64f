// How rows split over the ranks of a group: as evenly as possible, the first
// (rows mod parts) ranks taking one row more. Sequence parallelism splits
// the latents' token rows this way (frame-major, frame × patch rows of the
// latent grid: an image's patch rows; a share may cross frames), and each
// PipeFusion patch's, so that any height runs on any layout; the attention
// backends pad the shorter shares to the longest and mask the padding out
// of the keys.
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

// Rows in proportion to positive `weights` (uneven devices: a slower rank
// takes fewer), each rank at least one row (rows >= weights.size()): one row
// each, then the rest by largest remainder, ties to the lower rank.
inline std::vector<int64_t> row_counts(int64_t rows, const std::vector<double>& weights) {
  const size_t n = weights.size();
  double sum = 0;
  for (double w : weights) sum += w;
  const int64_t rest = rows - static_cast<int64_t>(n);
  std::vector<int64_t> v(n, 1);
  std::vector<double> frac(n);
  int64_t given = 0;
  for (size_t k = 0; k < n; ++k) {
    const double exact = static_cast<double>(rest) * weights[k] / sum;
    const auto whole = static_cast<int64_t>(exact);
    v[k] += whole;
    given += whole;
    frac[k] = exact - static_cast<double>(whole);
  }
  for (; given < rest; ++given) {
    size_t best = 0;
    for (size_t k = 1; k < n; ++k)
      if (frac[k] > frac[best]) best = k;
    ++v[best];
    frac[best] = -1.0;
  }
  return v;
}

// Rank k's rows [begin, end) of [r0, r0 + Σ counts) split by `counts`.
inline std::pair<int64_t, int64_t> row_share(int64_t r0, const std::vector<int64_t>& counts,
                                             int k) {
  int64_t begin = r0;
  for (int i = 0; i < k; ++i) begin += counts[static_cast<size_t>(i)];
  return {begin, begin + counts[static_cast<size_t>(k)]};
}

}  // namespace xdit::parallel
