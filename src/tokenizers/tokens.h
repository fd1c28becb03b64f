// What every tokenizer returns for one text at a fixed length.
#pragma once

#include <cstdint>
#include <vector>

namespace xdit::tokenizers {

struct Tokens {
  std::vector<int32_t> ids;   // max_length ids: special tokens, pieces, then padding
  std::vector<uint8_t> mask;  // 1 for the real tokens, 0 for padding
  int64_t untruncated = 0;    // real tokens before truncation
  bool truncated() const { return untruncated > static_cast<int64_t>(ids.size()); }
};

}  // namespace xdit::tokenizers
