#include "tokenizers/python_text.h"

namespace xdit::tokenizers {

bool python_isspace(UChar32 c) {
  return u_hasBinaryProperty(c, UCHAR_WHITE_SPACE) || (c >= 0x1C && c <= 0x1F);
}

std::pair<int32_t, int32_t> python_strip_range(const icu::UnicodeString& u) {
  int32_t b = 0, e = u.length();
  while (b < e && python_isspace(u.char32At(b))) b = u.moveIndex32(b, 1);
  while (e > b && python_isspace(u.char32At(u.moveIndex32(e, -1)))) e = u.moveIndex32(e, -1);
  return {b, e};
}

}  // namespace xdit::tokenizers
