// Python's string white space as the prompt preprocessing needs it, on ICU
// strings (lower_strip, wan_prompt_clean).
#pragma once

#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <cstdint>
#include <utility>

namespace xdit::tokenizers {

// str.isspace(): Unicode White_Space plus U+001C … U+001F.
bool python_isspace(UChar32 c);
// The [begin, end) code units of `u` that str.strip() keeps.
std::pair<int32_t, int32_t> python_strip_range(const icu::UnicodeString& u);

}  // namespace xdit::tokenizers
