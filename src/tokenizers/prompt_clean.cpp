#include "tokenizers/prompt_clean.h"

#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizers/python_text.h"

namespace xdit::tokenizers {

namespace {

// html.unescape's tables: HTML5's named references and the numeric ones HTML
// remaps or drops. No C++ library we use carries them (ICU has no HTML
// entity table), so they are generated from Python's own html module.
#include "tokenizers/html_entities.inc"

const std::unordered_map<std::string, std::string>& named() {
  static const auto* m = [] {
    auto* t = new std::unordered_map<std::string, std::string>();
    for (const auto& [name, value] : kNamedReferences) t->emplace(name, value);
    return t;
  }();
  return *m;
}

void append_utf8(std::string& out, uint32_t cp) {
  icu::UnicodeString u(static_cast<UChar32>(cp));
  u.toUTF8String(out);
}

// The bytes of the UTF-8 sequence starting at s[i]: 1 for a stray byte, or
// for a lead byte whose continuation bytes are missing (then the next byte
// starts a character of its own, as Python's decoding with errors="replace"
// leaves it).
size_t sequence_length(const std::string& s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const size_t n = b < 0x80                   ? 1
                   : (b >= 0xC2 && b <= 0xDF) ? 2
                   : (b >= 0xE0 && b <= 0xEF) ? 3
                   : (b >= 0xF0 && b <= 0xF4) ? 4
                                              : 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  return n;
}

// A numeric reference's text (html._replace_charref); `digits` may be long.
std::string numeric(const std::string& digits, int base) {
  uint64_t num = 0;
  for (const char c : digits) {
    const int v = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
    num = num > 0x10FFFF ? num : num * static_cast<uint64_t>(base) + static_cast<uint64_t>(v);
  }
  for (const auto& [cp, value] : kInvalidCharrefs)
    if (num == cp) return value;
  if ((num >= 0xD800 && num <= 0xDFFF) || num > 0x10FFFF) return "\xef\xbf\xbd";  // U+FFFD
  for (const uint32_t cp : kInvalidCodepoints)
    if (num == cp) return "";
  std::string out;
  append_utf8(out, static_cast<uint32_t>(num));
  return out;
}

bool is_digit(char c, int base) {
  return (c >= '0' && c <= '9') || (base == 16 && ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'));
}

}  // namespace

std::string html_unescape(const std::string& s) {
  if (s.find('&') == std::string::npos) return s;
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] != '&') {
      out += s[i++];
      continue;
    }
    size_t j = i + 1;
    // &#[0-9]+;?  and  &#[xX][0-9a-fA-F]+;?
    if (j < s.size() && s[j] == '#') {
      const bool hex = j + 1 < s.size() && (s[j + 1] == 'x' || s[j + 1] == 'X');
      const int base = hex ? 16 : 10;
      size_t k = j + (hex ? 2 : 1);
      const size_t first = k;
      while (k < s.size() && is_digit(s[k], base)) ++k;
      if (k > first) {
        out += numeric(s.substr(first, k - first), base);
        i = k < s.size() && s[k] == ';' ? k + 1 : k;
        continue;
      }
      out += s[i++];  // no reference
      continue;
    }
    // [^\t\n\f <&#;]{1,32};?  — 32 code points at most.
    std::vector<size_t> ends;  // the byte end of each code point of the name
    size_t k = j;
    while (k < s.size() && ends.size() < 32) {
      const char c = s[k];
      if (c == '\t' || c == '\n' || c == '\f' || c == ' ' || c == '<' || c == '&' || c == '#' ||
          c == ';')
        break;
      k += sequence_length(s, k);
      ends.push_back(k);
    }
    if (ends.empty()) {
      out += s[i++];
      continue;
    }
    if (k < s.size() && s[k] == ';') ++k;
    const std::string ref = s.substr(j, k - j);  // the name, with its ';' if any
    const auto& table = named();
    if (const auto it = table.find(ref); it != table.end()) {
      out += it->second;
    } else {
      // The longest known prefix of at least 2 code points (and shorter than the whole).
      bool found = false;
      const size_t points = ends.size() + (k > ends.back() ? 1 : 0);
      for (size_t x = points - 1; x >= 2 && !found; --x) {
        const size_t end = x <= ends.size() ? ends[x - 1] : k;
        if (const auto p = table.find(s.substr(j, end - j)); p != table.end()) {
          out += p->second;
          out += s.substr(end, k - end);
          found = true;
        }
      }
      if (!found) out += "&" + ref;
    }
    i = k;
  }
  return out;
}

std::string wan_prompt_clean(const std::string& text) {
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(html_unescape(html_unescape(text)));
  // str.strip() (Python's white space); the run collapsing uses the `regex`
  // module's \s (diffusers imports regex as re there): White_Space alone.
  const auto white = [](UChar32 c) { return u_hasBinaryProperty(c, UCHAR_WHITE_SPACE) != 0; };
  const auto [b, e] = python_strip_range(u);
  icu::UnicodeString collapsed;
  bool in_run = false;
  for (int32_t i = b; i < e; i = u.moveIndex32(i, 1)) {
    const UChar32 c = u.char32At(i);
    if (white(c)) {
      if (!in_run) collapsed.append(static_cast<UChar>(' '));
      in_run = true;
    } else {
      collapsed.append(c);
      in_run = false;
    }
  }
  // (The final strip has nothing left to do: both ends are not white space.)
  std::string out;
  collapsed.toUTF8String(out);
  return out;
}

}  // namespace xdit::tokenizers
