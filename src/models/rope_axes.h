// A transformer config's RoPE axes (FLUX.1's and Qwen-Image's axes_dims_rope,
// Z-Image's axes_dims): three even widths that add up to the head width.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "io/json.h"

namespace xdit::models {

// `key` of config `j` (default `fallback`), checked against `head_dim`;
// throws one line naming `where` and the key.
inline std::vector<int64_t> read_rope_axes(const io::Json& j, const char* key,
                                           std::vector<int64_t> fallback, int64_t head_dim,
                                           const std::string& where) {
  std::vector<int64_t> axes = io::int_list_in(j, key, std::move(fallback), 3, 2, 1 << 12, where);
  XDIT_CHECK(axes.size() == 3, where, ": ", key, " must list 3 axes");
  int64_t sum = 0;
  for (const int64_t d : axes) {
    XDIT_CHECK(d % 2 == 0, where, ": ", key, " entries must be even (rotated pairs), found ", d);
    sum += d;
  }
  XDIT_CHECK(sum == head_dim, where, ": ", key, " add up to ", sum, ", not the head width ",
             head_dim);
  return axes;
}

}  // namespace xdit::models
