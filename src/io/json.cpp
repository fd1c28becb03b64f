#include "io/json.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

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

const Json* find(const Json& j, const std::string& key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

Json parse_json_text(const std::string& text, const std::string& what) {
  try {
    return Json::parse(quote_python_specials(text));
  } catch (const nlohmann::json::exception& e) {
    XDIT_FAIL("malformed JSON in ", what, ": ", e.what());
  }
}

Json read_json_file(const std::string& path) {
  XDIT_CHECK(std::filesystem::is_regular_file(path), "missing file ", path);
  std::ifstream in(path);
  XDIT_CHECK(in.good(), "cannot read ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_json_text(ss.str(), path);
}

double number_or(const Json& j, const std::string& key, double fallback, const std::string& what) {
  const Json* v = find(j, key);
  if (v == nullptr) return fallback;
  if (v->is_number()) return v->get<double>();
  if (v->is_string()) {
    const std::string s = v->get<std::string>();
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  }
  XDIT_FAIL(what, ": \"", key, "\" should be a number, found ", v->dump());
}

int64_t int_or(const Json& j, const std::string& key, int64_t fallback, const std::string& what) {
  const Json* v = find(j, key);
  if (v == nullptr) return fallback;
  XDIT_CHECK(v->is_number_integer(), what, ": \"", key, "\" should be an integer, found ",
             v->dump());
  return v->get<int64_t>();
}

bool bool_or(const Json& j, const std::string& key, bool fallback, const std::string& what) {
  const Json* v = find(j, key);
  if (v == nullptr) return fallback;
  XDIT_CHECK(v->is_boolean(), what, ": \"", key, "\" should be true or false, found ", v->dump());
  return v->get<bool>();
}

std::string string_or(const Json& j, const std::string& key, const std::string& fallback,
                      const std::string& what) {
  const Json* v = find(j, key);
  if (v == nullptr) return fallback;
  XDIT_CHECK(v->is_string(), what, ": \"", key, "\" should be a string, found ", v->dump());
  return v->get<std::string>();
}

}  // namespace xdit::io
