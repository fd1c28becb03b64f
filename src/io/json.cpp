#include "io/json.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/file.h"

namespace xdit::io {

namespace {

// Quotes the bare tokens NaN / Infinity / -Infinity that appear outside strings.
std::string quote_python_specials(const std::string& in) {
  std::string out;
  out.reserve(in.size() + 16);
  bool in_string = false;
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < in.size())
        out += in[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    bool matched = false;
    for (const char* tok : {"-Infinity", "Infinity", "NaN"}) {
      const size_t n = std::char_traits<char>::length(tok);
      if (in.compare(i, n, tok) == 0) {
        out += '"';
        out += tok;
        out += '"';
        i += n - 1;
        matched = true;
        break;
      }
    }
    if (!matched) out += c;
  }
  return out;
}

// A value as shown in a message: one line, at most 60 characters.
std::string shown(const Json& v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

const Json* find(const Json& j, const std::string& key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

Json parse_json_text(const std::string& text, const std::string& what) {
  // nlohmann's reader stops at a NUL: whatever follows would be ignored.
  const size_t nul = text.find('\0');
  XDIT_CHECK(nul == std::string::npos, "malformed JSON in ", what, ": a NUL byte at offset ", nul,
             " (", text.size() - nul, " bytes from there on are not JSON)");
  try {
    return Json::parse(quote_python_specials(text));
  } catch (const nlohmann::json::exception& e) {
    XDIT_FAIL("malformed JSON in ", what, ": ", e.what());
  }
}

Json read_json_file(const std::string& path, size_t max_bytes) {
  return parse_json_text(read_small_file(path, max_bytes, "JSON file"), path);
}

void require_object(const Json& j, const std::string& what) {
  XDIT_CHECK(j.is_object(), what, " should hold a JSON object {...}, found ", j.type_name());
}

double number_or(const Json& j, const std::string& key, double fallback, const std::string& what,
                 bool allow_infinite) {
  const Json* v = find(j, key);
  if (v == nullptr) return fallback;
  double x = std::numeric_limits<double>::quiet_NaN();
  bool number = v->is_number();
  if (number) {
    x = v->get<double>();
  } else if (v->is_string()) {
    const std::string s = v->get<std::string>();
    number = s == "Infinity" || s == "-Infinity" || s == "NaN";
    if (s == "Infinity") x = std::numeric_limits<double>::infinity();
    if (s == "-Infinity") x = -std::numeric_limits<double>::infinity();
  }
  XDIT_CHECK(number, what, ": \"", key, "\" should be a number, found ", shown(*v));
  XDIT_CHECK(std::isfinite(x) || (allow_infinite && std::isinf(x)), what, ": \"", key,
             "\" should be a finite number, found ", shown(*v));
  return x;
}

int64_t int_in(const Json& j, const std::string& key, int64_t fallback, int64_t lo, int64_t hi,
               const std::string& what) {
  const int64_t v = int_or(j, key, fallback, what);
  XDIT_CHECK(v >= lo && v <= hi, what, ": \"", key, "\" is ", v, ", outside ", lo, " … ", hi);
  return v;
}

std::vector<int64_t> int_list_in(const Json& j, const std::string& key,
                                 const std::vector<int64_t>& fallback, size_t max_len, int64_t lo,
                                 int64_t hi, const std::string& what) {
  const Json* v = find(j, key);
  if (v == nullptr) return fallback;
  XDIT_CHECK(v->is_array() && !v->empty() && v->size() <= max_len, what, ": \"", key,
             "\" should be a list of 1 … ", max_len, " integers, found ",
             v->is_array() ? std::to_string(v->size()) + " entries" : shown(*v));
  std::vector<int64_t> out;
  for (const Json& e : *v) {
    XDIT_CHECK(e.is_number_integer(), what, ": \"", key, "\" should hold integers, found ",
               shown(e));
    const int64_t x = e.get<int64_t>();
    XDIT_CHECK(x >= lo && x <= hi, what, ": \"", key, "\" holds ", x, ", outside ", lo, " … ", hi);
    out.push_back(x);
  }
  return out;
}

int64_t int_or(const Json& j, const std::string& key, int64_t fallback, const std::string& what) {
  const Json* v = find(j, key);
  if (v == nullptr) return fallback;
  XDIT_CHECK(v->is_number_integer(), what, ": \"", key, "\" should be an integer, found ",
             shown(*v));
  return v->get<int64_t>();
}

bool bool_or(const Json& j, const std::string& key, bool fallback, const std::string& what) {
  const Json* v = find(j, key);
  if (v == nullptr) return fallback;
  XDIT_CHECK(v->is_boolean(), what, ": \"", key, "\" should be true or false, found ", shown(*v));
  return v->get<bool>();
}

std::string string_or(const Json& j, const std::string& key, const std::string& fallback,
                      const std::string& what) {
  const Json* v = find(j, key);
  if (v == nullptr) return fallback;
  XDIT_CHECK(v->is_string(), what, ": \"", key, "\" should be a string, found ", shown(*v));
  return v->get<std::string>();
}

}  // namespace xdit::io
