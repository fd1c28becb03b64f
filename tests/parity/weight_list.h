// The check every model's config makes against its golden file: the weights
// the config implies are exactly the file's (or the part of it a prefix
// names), name for name, each readable at the listed shape.
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "io/weights.h"

namespace xdit::test {

// `prefixes` empty: every weight of the file; else those whose names start
// with one of them (a VAE's decoder part, a VL model's language model).
inline void expect_weight_list(const io::WeightSpecs& specs, const io::WeightStore& w,
                               const std::vector<std::string>& prefixes = {}) {
  std::set<std::string> listed, stored;
  for (const std::string& n : w.names()) {
    bool keep = prefixes.empty();
    for (const std::string& p : prefixes) keep = keep || n.rfind(p, 0) == 0;
    if (keep) stored.insert(n);
  }
  for (const auto& [name, shape] : specs) {
    listed.insert(name);
    ASSERT_TRUE(w.has(name)) << name;
    EXPECT_EQ(w.get(name, shape).shape(), shape) << name;
  }
  EXPECT_EQ(listed, stored);
}

}  // namespace xdit::test
